"""Verified crawlers over real sockets: real uvicorn, real SQLite, a table resolver, and
clients on their own loopback addresses (each binds 127.0.0.x as its source).

The table says 127.0.0.7 is ``crawl-127-0-0-7.googlebot.com`` and that name is 127.0.0.7:
a Googlebot from there is verified. 127.0.0.8's reverse name claims googlebot.com too, but
its forward look-up is another address: a spoofer. Nothing is resolved through the system's
resolver.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import pytest

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.crawlers.verification.resolver import TableResolver
from snapshotd.server.app import create_app
from tests.servers import serve_asgi
from tests.test_flood import BOT, TOKEN, SlotRenderer, _origin

VERIFIED, SPOOFER, FRONT, SLOW = "127.0.0.7", "127.0.0.8", "127.0.0.9", "127.0.0.10"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def table(**kw) -> TableResolver:
    return TableResolver(
        ptr={
            VERIFIED: ["crawl-127-0-0-7.googlebot.com."],
            SPOOFER: ["crawl-66-249-66-1.googlebot.com."],
            SLOW: ["crawl-127-0-0-10.googlebot.com."],
        },
        addresses={
            "crawl-127-0-0-7.googlebot.com.": [VERIFIED],
            "crawl-66-249-66-1.googlebot.com.": ["127.0.0.66"],
            "crawl-127-0-0-10.googlebot.com.": [SLOW],
        },
        **kw,
    )


@dataclass
class Env:
    base: str
    db: str
    renderer: SlotRenderer
    resolver: TableResolver

    def client(self, source: str) -> httpx.Client:
        """A client whose connections come from ``source``."""
        return httpx.Client(
            base_url=self.base, timeout=60, trust_env=False,
            transport=httpx.HTTPTransport(local_address=source),
            headers={"User-Agent": BOT},
        )

    def states(self) -> dict[str, str]:
        conn = sqlite3.connect(self.db)
        try:
            return dict(conn.execute("SELECT path, state FROM paths"))
        finally:
            conn.close()

    def priorities(self) -> set[int]:
        conn = sqlite3.connect(self.db)
        try:
            return {r[0] for r in conn.execute("SELECT DISTINCT priority FROM paths")}
        finally:
            conn.close()

    def metric(self, prefix: str) -> dict[str, float]:
        """The samples of a metric that counted something (every label starts at 0)."""
        with httpx.Client(base_url=self.base, trust_env=False) as c:
            text = c.get("/_snapshotd/metrics", headers=AUTH).text
        samples = {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(prefix)
        }
        return {name: value for name, value in samples.items() if value}


@contextmanager
def verified_env(
    tmp_path,
    *,
    resolver: TableResolver | None = None,
    concurrency: int = 2,
    delay: float = 0.0,
    miss_wait: float = 30.0,
    crawler: bool = True,
    trusted_proxies: tuple[str, ...] = (),
    forwarded_header: str = "x-forwarded-for",
    bot_ranges: tuple[str, ...] = (),
    **site: object,
) -> Iterator[Env]:
    db = str(tmp_path / f"verified-{uuid.uuid4().hex[:8]}.db")
    renderer = SlotRenderer(concurrency, delay)
    resolver = resolver or table()
    with serve_asgi(_origin()) as origin_url:
        settings = Settings(
            db=db,
            api_tokens=(TOKEN,),
            miss_wait=miss_wait,
            trusted_proxies=trusted_proxies,
            forwarded_header=forwarded_header,
            bot_ranges=bot_ranges,
            maintenance_every=0.5,
            browser=BrowserSettings(concurrency=concurrency),
            sites=(
                SiteSettings(
                    name="s", origin=origin_url, seeds=(), obey_robots=False,
                    crawl_links=False, **site,  # type: ignore[arg-type]
                ),
            ),
        )
        app = create_app(settings, renderer=renderer, crawler=crawler, resolver=resolver)
        with serve_asgi(app) as base:
            yield Env(base, db, renderer, resolver)


def burst(env: Env, source: str, paths: list[str], threads: int) -> list[httpx.Response]:
    with env.client(source) as client, ThreadPoolExecutor(threads) as pool:
        return list(pool.map(client.get, paths))


def test_a_verified_googlebot_asking_81_new_pages_two_at_a_time_gets_no_shell(tmp_path):
    # As reported: past 60 new paths in the minute, 21 pages were the origin's shell and
    # none was queued. A verified Googlebot is held to max_pages alone.
    with verified_env(tmp_path, crawler=False) as env:
        paths = [f"/launch/{i}" for i in range(81)]
        answers = burst(env, VERIFIED, paths, threads=2)
        results = [r.headers.get("x-snapshotd-cache") for r in answers]
        assert results == ["MISS"] * 81
        assert all("rendered" in r.text for r in answers)
        assert set(env.states().values()) == {"processed"} and len(env.states()) == 81


def test_with_verification_off_the_same_burst_is_bounded_as_before(tmp_path):
    with verified_env(tmp_path, crawler=False, verify_bots="off") as env:
        answers = burst(env, VERIFIED, [f"/launch/{i}" for i in range(81)], threads=2)
        results = [r.headers.get("x-snapshotd-cache") for r in answers]
        assert results.count("MISS") == 60 and results.count("BYPASS") == 21
        assert len(env.states()) == 60  # the other 21 are not queued
        assert env.resolver.queries == []  # off: DNS is never asked


def test_a_verified_burst_of_100_new_pages_gets_no_shell_and_all_are_captured_within_a_minute(
    tmp_path,
):
    # Renders are slow and miss places few: most pages cannot be had in time. Each is queued
    # at priority 3 and answered 503 with Retry-After, never the origin's shell.
    with verified_env(tmp_path, delay=0.05, miss_wait=0.2) as env:
        paths = [f"/import/{i}" for i in range(100)]
        answers = burst(env, VERIFIED, paths, threads=12)
        results = [r.headers.get("x-snapshotd-cache") for r in answers]
        assert "BYPASS" not in results and None not in results
        assert set(results) <= {"MISS", "RETRY"} and "RETRY" in results
        for r in answers:
            if r.headers["x-snapshotd-cache"] == "RETRY":
                assert r.status_code == 503 and r.headers["retry-after"] == "60"
            else:
                assert r.status_code == 200 and "rendered" in r.text
        assert len(env.states()) == 100 and env.priorities() == {3}
        deadline = time.monotonic() + 60
        while set(env.states().values()) != {"processed"} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert set(env.states().values()) == {"processed"}
        # The next visit is a hit, for every page.
        again = burst(env, VERIFIED, paths, threads=4)
        assert {r.headers["x-snapshotd-cache"] for r in again} == {"HIT"}
        claims = env.metric("snapshotd_bot_claims_total")
        assert claims['snapshotd_bot_claims_total{claim="verified",family="google"}'] == 200


def test_the_same_burst_from_an_unverified_address_stays_within_todays_bounds(tmp_path):
    with verified_env(tmp_path, crawler=False, new_paths_per_minute=10) as env:
        answers = burst(env, SPOOFER, [f"/import/{i}" for i in range(100)], threads=4)
        results = [r.headers.get("x-snapshotd-cache") for r in answers]
        assert results.count("MISS") == 10 and results.count("BYPASS") == 90
        assert len(env.states()) == 10 and env.priorities() == {0}
        assert env.metric("snapshotd_refused_total") == {
            'snapshotd_refused_total{reason="rate"}': 90.0
        }
        claims = env.metric("snapshotd_bot_claims_total")
        assert claims == {
            'snapshotd_bot_claims_total{claim="unverified",family="google"}': 10.0,
            'snapshotd_bot_claims_total{claim="refused",family="google"}': 90.0,
        }
        # It still gets what exists: a hit costs nothing.
        with env.client(SPOOFER) as client:
            assert client.get("/import/0").headers["x-snapshotd-cache"] == "HIT"


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="snapshotd.access"), verified_env(
        tmp_path, crawler=False, new_paths_per_minute=1
    ) as env, env.client(SPOOFER) as client:
        forged = {"X-Forwarded-For": VERIFIED, "Forwarded": f"for={VERIFIED}"}
        results = [client.get(f"/p{i}", headers=forged).headers["x-snapshotd-cache"]
                   for i in range(5)]
        assert results == ["MISS"] + ["BYPASS"] * 4
    lines = [r.getMessage() for r in caplog.records if r.name == "snapshotd.access"]
    assert lines[0].endswith(f"unverified {SPOOFER}")
    assert all(line.endswith(f"refused {SPOOFER}") for line in lines[1:])


def test_a_trusted_front_servers_x_forwarded_for_names_the_client(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="snapshotd.access"), verified_env(
        tmp_path, crawler=False, new_paths_per_minute=1, trusted_proxies=(FRONT,)
    ) as env, env.client(FRONT) as client:
        # What a client wrote to the left of the front server's own entry is not believed.
        results = [
            client.get(f"/p{i}", headers={"X-Forwarded-For": f"{SPOOFER}, {VERIFIED}"})
            .headers["x-snapshotd-cache"]
            for i in range(5)
        ]
        assert results == ["MISS"] * 5
        # The spoofer behind the front server: held to the bound (1 a minute), which the
        # verified crawler's pages did not use up.
        spoofed = [
            client.get(f"/q{i}", headers={"X-Forwarded-For": f"{VERIFIED}, {SPOOFER}"})
            .headers["x-snapshotd-cache"]
            for i in range(2)
        ]
        assert spoofed == ["MISS", "BYPASS"]
    lines = [r.getMessage() for r in caplog.records if r.name == "snapshotd.access"]
    assert all(line.endswith(f"verified {VERIFIED}") for line in lines[:5])
    assert lines[5].endswith(f"unverified {SPOOFER}")
    assert lines[6].endswith(f"refused {SPOOFER}")


@pytest.mark.parametrize(
    ("header", "front_writes", "client_writes"),
    [
        ("forwarded", "Forwarded", "X-Forwarded-For"),
        ("x-forwarded-for", "X-Forwarded-For", "Forwarded"),
    ],
)
def test_only_the_header_the_front_server_writes_names_the_client(
    tmp_path, caplog, header, front_writes, client_writes
):
    def spelled(name: str, address: str) -> str:
        return f"for={address}" if name == "Forwarded" else address

    with caplog.at_level(logging.INFO, logger="snapshotd.access"), verified_env(
        tmp_path, crawler=False, new_paths_per_minute=1, trusted_proxies=(FRONT,),
        forwarded_header=header,
    ) as env, env.client(FRONT) as client:
        # The spoofer, through the front server, writes the verified crawler's address in
        # the header the front server leaves alone: it is not read.
        spoofed = {front_writes: spelled(front_writes, SPOOFER),
                   client_writes: spelled(client_writes, VERIFIED)}
        results = [client.get(f"/q{i}", headers=spoofed).headers["x-snapshotd-cache"]
                   for i in range(2)]
        assert results == ["MISS", "BYPASS"]
        real = {front_writes: spelled(front_writes, VERIFIED),
                client_writes: spelled(client_writes, SPOOFER)}
        results = [client.get(f"/p{i}", headers=real).headers["x-snapshotd-cache"]
                   for i in range(3)]
        assert results == ["MISS"] * 3
    lines = [r.getMessage() for r in caplog.records if r.name == "snapshotd.access"]
    assert lines[0].endswith(f"unverified {SPOOFER}") and lines[1].endswith(f"refused {SPOOFER}")
    assert all(line.endswith(f"verified {VERIFIED}") for line in lines[2:])


@pytest.mark.parametrize("trouble", ["hang", "fail"])
def test_a_dns_failure_or_time_out_never_delays_a_hit(tmp_path, caplog, trouble):
    resolver = table(**{trouble: [SLOW]})
    with caplog.at_level(logging.INFO, logger="snapshotd.access"), verified_env(
        tmp_path, resolver=resolver, crawler=False
    ) as env:
        with env.client(VERIFIED) as client:
            assert client.get("/known").headers["x-snapshotd-cache"] == "MISS"
        with env.client(SLOW) as client:
            hits = [client.get("/known").headers["x-snapshotd-cache"] for _ in range(20)]
            assert hits == ["HIT"] * 20
            # The look-up was started by the first hit, and never answered (hang) or failed:
            # no hit waited for it.
            assert resolver.queries.count(SLOW) == 1
            # A new path waits for it at most VERIFY_WAIT, then is judged unverified.
            new = client.get("/new")
            assert new.headers["x-snapshotd-cache"] == "MISS"
    lines = [r.getMessage() for r in caplog.records if r.name == "snapshotd.access"]
    slow = [line for line in lines if line.endswith(SLOW)]
    assert slow[0].endswith(f"pending {SLOW}") and " HIT " in slow[0]
    assert slow[-1].endswith(f"unverified {SLOW}") and "/new MISS" in slow[-1]


def test_a_strict_site_passes_an_unverified_claimant_through_as_a_person(tmp_path):
    with verified_env(tmp_path, crawler=False, verify_bots="strict") as env:
        with env.client(VERIFIED) as client:
            assert client.get("/a").headers["x-snapshotd-cache"] == "MISS"
            assert client.get("/a").headers["x-snapshotd-cache"] == "HIT"
        with env.client(SPOOFER) as client:
            client.get("/a")  # its claim is looked up; the answer is had within VERIFY_WAIT
            r = client.get("/a")
            assert "x-snapshotd-cache" not in r.headers and "origin page" in r.text
            # An _escaped_fragment_ request of a person claims no crawler: served.
            person = client.get("/a?_escaped_fragment_=", headers={"User-Agent": "Mozilla/5.0"})
            assert person.headers["x-snapshotd-cache"] == "HIT"


def test_miss_answer_origin_gives_the_origins_page_and_still_queues(tmp_path):
    with verified_env(
        tmp_path, delay=0.05, miss_wait=0.05, miss_answer="origin", crawler=False
    ) as env:
        env.renderer.gate.clear()  # no render ends while the bot waits
        with env.client(VERIFIED) as client:
            r = client.get("/slow")
        env.renderer.gate.set()
        assert r.headers["x-snapshotd-cache"] == "BYPASS" and "origin page" in r.text
        # The miss goes on after the answer: the path is queued, then rendered.
        deadline = time.monotonic() + 30
        while env.states().get("/slow") != "processed" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert env.states() == {"/slow": "processed"}


def test_a_crawler_in_its_familys_published_ranges_is_verified_without_dns(tmp_path):
    # OpenAI publishes ranges only, in the JSON shape Google and Bing use too.
    ranges = tmp_path / "gptbot.json"
    ranges.write_text(json.dumps({"prefixes": [{"ipv4Prefix": "127.0.0.5/32"}]}))
    gptbot = {"User-Agent": "Mozilla/5.0 AppleWebKit/537.36; compatible; GPTBot/1.2"}
    with verified_env(
        tmp_path, crawler=False, new_paths_per_minute=1, bot_ranges=(f"openai={ranges}",)
    ) as env:
        with env.client("127.0.0.5") as client:
            inside = [client.get(f"/a{i}", headers=gptbot).headers["x-snapshotd-cache"]
                      for i in range(3)]
        with env.client("127.0.0.6") as client:
            outside = [client.get(f"/b{i}", headers=gptbot).headers["x-snapshotd-cache"]
                       for i in range(2)]
        assert inside == ["MISS"] * 3 and outside == ["MISS", "BYPASS"]
        assert env.resolver.queries == []
        claims = env.metric("snapshotd_bot_claims_total")
        assert claims == {
            'snapshotd_bot_claims_total{claim="verified",family="openai"}': 3.0,
            'snapshotd_bot_claims_total{claim="unverified",family="openai"}': 1.0,
            'snapshotd_bot_claims_total{claim="refused",family="openai"}': 1.0,
        }
