"""A site's regular expressions cannot hold the event loop: the settings refuse the shapes
that backtrack catastrophically (the rules files' own check), and what is accepted is matched
within a time budget per page (real config files, a real API server, a real ``serve``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
import regex
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from snapshotd.config.loading import load_settings
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.config.values import ConfigError
from snapshotd.patterns.crawl_patterns import (
    REGEX_SECONDS,
    SHARE_SECONDS,
    UrlRegex,
    regex_budget,
    url_matches,
)
from snapshotd.render.renderer import CaptureResult
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.servers import serve_asgi
from tests.test_crawler_process import _rows
from tests.test_serve_process import serving

TOKEN = "regex-token"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
# Each of these backtracks exponentially on some URL; the rules files refuse them too.
CATASTROPHIC = ["(a|aa)+$", "(a+)+$", r"^(\w+\s?)*$", "(.*a){12}", "(x+x+)+y"]
REGEX_FIELDS = ["url_crawl_regex", "url_process_regex"]


@pytest.mark.parametrize("field", REGEX_FIELDS)
@pytest.mark.parametrize("source", CATASTROPHIC)
def test_a_catastrophic_regex_setting_is_refused_by_the_config_file(
    tmp_path: Path, field: str, source: str
) -> None:
    config = tmp_path / "s.toml"
    config.write_text(f"[[site]]\norigin = 'http://127.0.0.1:9'\n{field} = '{source}'\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    message = str(caught.value)
    assert field in message and "nested quantifier" in message, message


@pytest.mark.parametrize("source", [r"/blog/\d+$", r"^https?://[^/]+/(en|fr)/", "(/[^/]+)*"])
def test_an_ordinary_regex_setting_loads(tmp_path: Path, source: str) -> None:
    config = tmp_path / "s.toml"
    config.write_text(f"[[site]]\norigin = 'http://127.0.0.1:9'\nurl_crawl_regex = '{source}'\n")
    assert load_settings(config, env={}).sites[0].url_crawl_regex == source


class NoRenderer:
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop"
    ) -> CaptureResult:
        return CaptureResult(url=url, final_url=url, error="nothing renders here")


@pytest.mark.parametrize("field", REGEX_FIELDS)
def test_a_catastrophic_regex_setting_is_a_400_naming_the_field_from_the_api(
    tmp_path: Path, field: str
) -> None:
    settings = Settings(db=str(tmp_path / "api.db"), api_tokens=(TOKEN,), sites=())
    app = create_app(settings, renderer=NoRenderer(), crawler=False)
    crawlbot_name = {"url_crawl_regex": "urlCrawlRegEx", "url_process_regex": "urlProcessRegEx"}
    with serve_asgi(app) as base, httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as api:
        for source in CATASTROPHIC:
            body = {"origin": "http://127.0.0.1:9", field: source}
            r = api.put("/_snapshotd/api/v1/sites/shop", json=body)
            assert r.status_code == 400, (source, r.text)
            assert r.json()["field"] == field and "nested quantifier" in r.json()["error"]
            r = api.post(
                "/_snapshotd/v3/crawl",
                data={"token": TOKEN, "name": "job", "seeds": "http://127.0.0.1:9/",
                      crawlbot_name[field]: source},
            )
            assert r.status_code == 400, (source, r.text)
            assert "nested quantifier" in r.text
        assert api.get("/_snapshotd/api/v1/sites/shop").status_code == 404
        ok = api.put("/_snapshotd/api/v1/sites/shop",
                     json={"origin": "http://127.0.0.1:9", field: r"/blog/\d+$"})
        assert ok.status_code == 201, ok.text


# Accepted (no nested quantifier), yet it backtracks polynomially: on a long URL of `a`s
# that has no other letter after them, one search takes far longer than its 50 ms.
SLOW = "a.*a.*a.*a.*a.*[b-z]$"
LINKS = 600


class LinkOrigin:
    """``/`` links to LINKS long paths; every other path is a small page."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self._lock = threading.Lock()

        async def page(request: Request) -> Response:
            with self._lock:
                self.hits.append(request.url.path)
            if request.url.path == "/":
                links = "".join(
                    f'<a href="/{n:04d}/{"a" * 1900}">{n}</a>\n' for n in range(LINKS)
                )
                return HTMLResponse(f"<!doctype html><html><body>{links}</body></html>")
            return HTMLResponse("<!doctype html><html><body><p>leaf</p></body></html>")

        self.app = Starlette(routes=[Route("/{rest:path}", page)])


@pytest.mark.browser
def test_a_slow_crawl_regex_on_a_page_of_many_long_links_cannot_hold_the_loop(
    tmp_path: Path,
) -> None:
    require_chromium()
    origin = LinkOrigin()
    db = tmp_path / "crawl.db"
    with serve_asgi(origin.app) as origin_url:
        config = tmp_path / "serve.toml"
        config.write_text(
            f'[server]\ndb = "{db}"\n'
            f'[browser]\nexecutable = "{require_chromium()}"\njavascript_timeout = 0.2\n'
            f'[[site]]\nname = "shop"\norigin = "{origin_url}"\nseeds = ["/"]\n'
            f"sitemaps = []\nurl_crawl_regex = '{SLOW}'\n"
            'soft_404 = "off"\n'  # it counts what is fetched: no render to learn from
        )
        with serving("--config", str(config), "--workers", "1") as serve:
            base = serve.url()

            def followed() -> bool:
                sql = "SELECT links_due FROM paths WHERE path = '/' AND state = 'processed'"
                rows = _rows(db, sql)
                return bool(rows) and not rows[0][0]

            with httpx.Client(base_url=base, timeout=120, trust_env=False) as client:
                deadline = time.monotonic() + 120  # only stops a hang
                while not followed() and time.monotonic() < deadline:
                    assert client.get("/_snapshotd/healthz").status_code == 200
                    time.sleep(0.02)
            assert followed(), serve.stderr
    # Not one link is crawled: each search ran out of time, or of the page's budget.
    assert [p for p in origin.hits if p not in ("/", "/robots.txt")] == []
    # The page's links were matched inside one budget (a fraction of a second for all 600,
    # not 600 times 50 ms: test_the_searches_of_one_budget_take_its_time_together...),
    # which says one line for the page, not one per link.
    said = [line for line in serve.stderr.splitlines() if "ran out of time" in line]
    assert len(said) == 1 and f"on {LINKS} URLs of the links of site=shop path=/" in said[0], said


class Timed:
    """A compiled regex whose searches are recorded: the time each was given."""

    def __init__(self, compiled: regex.Pattern[str]) -> None:
        self.compiled = compiled
        self.pattern = compiled.pattern
        self.given: list[float] = []

    def search(self, text: str, timeout: float) -> regex.Match[str] | None:
        self.given.append(timeout)
        return self.compiled.search(text, timeout=timeout)


def timed(rx: UrlRegex) -> Timed:
    rx.pattern = Timed(rx.pattern)  # type: ignore[assignment]
    return rx.pattern  # type: ignore[return-value]


# A search that runs out of time has taken at least the time it was given, on any machine;
# the regex module's clock and the budget's may differ by a clock tick (this margin).
TICK = 0.005


def test_the_searches_of_one_budget_take_its_time_together_and_say_so_once(caplog) -> None:
    url = "http://127.0.0.1:9/" + "a" * 1900
    slow = UrlRegex(SLOW)
    searches = timed(slow)
    with caplog.at_level("WARNING"), regex_budget("the links of /", 0.2) as budget:
        assert not any(url_matches(url, "", slow) for _ in range(100))
    assert budget.missed == 100
    # The budget's 0.2 s were shared by the first few searches (each ran out of time); the
    # others were not run at all.
    assert 1 <= len(searches.given) <= 0.2 / REGEX_SECONDS + 1, searches.given
    assert max(searches.given) <= REGEX_SECONDS and sum(searches.given) <= 0.2 + TICK
    assert [r.getMessage() for r in caplog.records if "regex" in r.getMessage()] == [
        f"regex ran out of time on 100 URLs of the links of /, taken as not matching "
        f"(first {url[:200]})"
    ]


def test_a_regex_setting_takes_a_tenth_of_each_second_whoever_asks(caplog) -> None:
    url = "http://127.0.0.1:9/" + "a" * 1900
    now = [1000.0]
    slow = UrlRegex(SLOW, clock=lambda: now[0])
    searches = timed(slow)
    with caplog.at_level("WARNING"):
        assert not any(url_matches(url, "", slow) for _ in range(100))
        # Within one second: its share, then no search at all, and one line.
        ran = len(searches.given)
        assert 1 <= ran <= SHARE_SECONDS / REGEX_SECONDS + 1, searches.given
        assert sum(searches.given) <= SHARE_SECONDS + TICK
        assert len([r for r in caplog.records if "ran out of time" in r.getMessage()]) == 1
        # The next second gives it its share again.
        now[0] += 1.0
        assert not any(url_matches(url, "", slow) for _ in range(100))
    assert ran < len(searches.given) <= 2 * ran + 1, searches.given
    said = [r.getMessage() for r in caplog.records if "regex" in r.getMessage()]
    assert len(said) == 2 and all("ran out of time" in line for line in said), said
    # A regex that matches in time is not held back by another's slowness.
    assert url_matches("http://127.0.0.1:9/blog/7", "", UrlRegex(r"/blog/\d+$"))


def test_a_slow_process_regex_cannot_slow_the_health_check_under_bot_requests(
    tmp_path: Path,
) -> None:
    """Eight bots asking for long new paths, each judged by an accepted but slow
    ``url_process_regex``: the regex gets a tenth of each second, so the loop stays free."""
    origin = LinkOrigin()
    db = tmp_path / "bots.db"
    with serve_asgi(origin.app) as origin_url:
        config = tmp_path / "serve.toml"
        config.write_text(
            f'[server]\ndb = "{db}"\n[browser]\nexecutable = "{require_chromium()}"\n'
            f'[[site]]\nname = "shop"\norigin = "{origin_url}"\nseeds = []\nsitemaps = []\n'
            f"url_process_regex = '{SLOW}'\n"
        )
        with serving("--config", str(config), "--no-crawler", "--workers", "1") as serve:
            base = serve.url()
            began = time.monotonic()
            stop = began + 6
            answers: list[int] = []

            def bot(n: int) -> None:
                with httpx.Client(base_url=base, timeout=60, trust_env=False) as client:
                    i = 0
                    while time.monotonic() < stop:
                        i += 1
                        r = client.get(f"/{n}-{i}/" + "a" * 1900, headers={"User-Agent": BOT})
                        answers.append(r.status_code)

            bots = [threading.Thread(target=bot, args=(n,)) for n in range(8)]
            for thread in bots:
                thread.start()
            healthy = 0
            with httpx.Client(base_url=base, timeout=60, trust_env=False) as client:
                time.sleep(0.5)
                while time.monotonic() < stop:
                    assert client.get("/_snapshotd/healthz").status_code == 200
                    healthy += 1
                    time.sleep(0.05)
            for thread in bots:
                thread.join()
            seconds = time.monotonic() - began
            said = [line for line in serve.stderr.splitlines() if "ran out of time" in line]
    # Not processed: every bot got the origin's page, and nothing was rendered.
    assert answers and set(answers) == {200}
    assert _rows(db, "SELECT path FROM paths") == []
    assert healthy
    # Every bot's path was judged by the site's one regex setting, whose share of each
    # second (a tenth, test_a_regex_setting_takes_a_tenth_of_each_second_whoever_asks) it
    # ran out of: one line in each second at most, however many bots asked in it.
    assert 1 <= len(said) <= seconds + 1, (said, seconds)
    assert len(answers) > 2 * len(said), (len(answers), said)
