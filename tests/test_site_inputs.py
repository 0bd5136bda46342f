"""What an operator's API calls and stored settings may hold: every setting checked at the door
(400 naming it), and a bad site or time already in the store (written by hand, or by an older
snapshotd) breaking no listing and no report. Real sockets, a real SQLite file."""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.server.app import create_app
from tests.servers import serve_asgi
from tests.test_rewrite import count_file_reads

TOKEN = "inputs-token"
API = "/_snapshotd/api/v1"
ORIGIN = "http://127.0.0.1:9"


@contextmanager
def api(settings: Settings) -> Iterator[httpx.Client]:
    with serve_asgi(create_app(settings, crawler=False)) as base, httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30,
        trust_env=False,
    ) as client:
        yield client


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "snapshotd", *args], capture_output=True, text=True, timeout=60
    )


# A raw JSON body (NaN, Infinity and \ud800 as a JSON parser reads them) and the field named.
BAD_SETTINGS = [
    (f'{{"origin": "{ORIGIN}", "crawl_delay": NaN}}', "crawl_delay"),
    (f'{{"origin": "{ORIGIN}", "crawl_delay": Infinity}}', "crawl_delay"),
    (f'{{"origin": "{ORIGIN}", "render_timeout": NaN}}', "render_timeout"),
    (f'{{"origin": "{ORIGIN}", "javascript_timeout": Infinity}}', "javascript_timeout"),
    (f'{{"origin": "{ORIGIN}", "javascript_timeout": -Infinity}}', "javascript_timeout"),
    (f'{{"origin": "{ORIGIN}", "repeat": NaN}}', "repeat"),
    (f'{{"origin": "{ORIGIN}", "repeat": 1e308}}', "repeat"),
    (f'{{"origin": "{ORIGIN}", "expire_after": "{"9" * 400}"}}', "expire_after"),
    (f'{{"origin": "{ORIGIN}", "expire_after": {"9" * 400}}}', "expire_after"),
    (f'{{"origin": "{ORIGIN}", "max_pages": {"9" * 400}}}', "max_pages"),
    (f'{{"origin": "{ORIGIN}", "seeds": ["/\\ud800"]}}', "seeds"),
    (f'{{"origin": "{ORIGIN}", "sitemaps": ["/a\\u0000b"]}}', "sitemaps"),
    (f'{{"origin": "{ORIGIN}", "page_process_pattern": "\\udc80"}}', "page_process_pattern"),
    ('{"origin": "http://user:secret@127.0.0.1:9"}', "origin"),
]


def test_a_setting_that_is_not_finite_out_of_range_or_not_text_is_a_400_naming_it(
    tmp_path,
) -> None:
    settings = Settings(db=str(tmp_path / "a.db"), api_tokens=(TOKEN,))
    with api(settings) as client:
        for body, field in BAD_SETTINGS:
            r = client.put(f"{API}/sites/bad", content=body.encode())
            assert r.status_code == 400, (body[:80], r.status_code, r.text[:300])
            assert r.json()["field"] == field, (body[:80], r.json())
            assert "secret" not in r.text
        assert client.get(f"{API}/sites/bad").status_code == 404
        # Crawlbot's arguments are the same settings, named as Crawlbot names them.
        seeds = {"token": TOKEN, "name": "job", "seeds": ORIGIN + "/"}
        for arg, value in (("crawlDelay", "nan"), ("crawlDelay", "inf"), ("repeat", "inf"),
                           ("seedRecrawlFrequency", "nan"), ("maxToCrawl", "9" * 400)):
            r = client.post("/_snapshotd/v3/crawl", data={**seeds, arg: value})
            assert r.status_code == 400 and r.json()["field"] == arg, (arg, r.text[:300])
        r = client.post("/_snapshotd/v3/crawl", content=json.dumps({**seeds, "crawlDelay": 1e999}),
                        headers={"Content-Type": "application/json"})  # Infinity
        assert r.status_code == 400 and r.json()["field"] == "crawlDelay", r.text[:300]
        jobs = client.get("/_snapshotd/v3/crawl", params={"token": TOKEN})
        assert jobs.status_code == 200 and jobs.json() == {"jobs": []}
        # A good one is stored and read back as it was given.
        good = client.put(f"{API}/sites/good", json={
            "origin": ORIGIN, "crawl_delay": 3600, "repeat": 3650, "expire_after": "3650d",
            "render_timeout": 600, "javascript_timeout": 0, "seeds": ["/caf\u00e9"],
        })
        assert good.status_code == 201, good.text
        assert good.json()["settings"]["expire_after"] == 3650 * 86400
    bad = run("site", "set", "good", "--db", settings.db, "crawl_delay=nan")
    assert bad.returncode == 2 and "crawl_delay: must be from 0 to 3600" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_bad_site_or_time_written_into_the_store_breaks_no_listing_and_no_report(
    tmp_path, caplog
) -> None:
    db = str(tmp_path / "s.db")
    settings = Settings(db=db, api_tokens=(TOKEN,))
    with api(settings) as client:  # creates the store, and one good site with one page
        assert client.put(f"{API}/sites/good", json={"origin": ORIGIN}).status_code == 201
        assert client.post(f"{API}/sites/good/paths", json={"paths": ["/a"]}).status_code == 200
    with sqlite3.connect(db) as conn:
        now = time.time()
        for name, text in (
            ("nan", f'{{"origin": "{ORIGIN}", "crawl_delay": NaN, "name": "nan"}}'),
            ("forever", f'{{"origin": "{ORIGIN}", "expire_after": 1e999, "name": "forever"}}'),
            ("garbled", '{"origin": '),
            ("surrogate", f'{{"origin": "{ORIGIN}", "seeds": ["/\\ud800"], "name": "surrogate"}}'),
        ):
            conn.execute(
                "INSERT INTO sites (name, settings, paused, created_at, updated_at) "
                "VALUES (?, ?, 0, ?, ?)", (name, text, now, now)
            )
        # A time no date can name, as a site that expired after "forever" would have stored.
        conn.execute("UPDATE paths SET expires_at = 1e999, captured_at = 1e300")
    with caplog.at_level(logging.INFO, logger="snapshotd.sites.registry"), api(settings) as client:
        listed = client.get(f"{API}/sites")
        assert listed.status_code == 200, listed.text[:300]
        assert [s["name"] for s in listed.json()["sites"]] == ["good"]
        jobs = client.get("/_snapshotd/v3/crawl", params={"token": TOKEN})
        assert jobs.status_code == 200 and [j["name"] for j in jobs.json()["jobs"]] == ["good"]
        assert client.get(f"{API}/sites/nan").status_code == 404
        urls = client.get("/_snapshotd/v3/crawl/data",
                          params={"token": TOKEN, "name": "good", "type": "urls",
                                  "format": "json"})
        assert urls.status_code == 200, urls.text[:300]
        [row] = urls.json()
        assert row["path"] == "/a" and row["expires_at"] is None
        paths = client.get(f"{API}/sites/good/paths")
        assert paths.status_code == 200 and paths.json()["paths"][0]["captured_at"] is None
        time.sleep(2.5)  # the sites are read again each second: still one line each
    lines = [r.getMessage() for r in caplog.records if r.name == "snapshotd.sites.registry"]
    for name in ("nan", "forever", "garbled", "surrogate"):
        about = [line for line in lines if line.startswith(f"site {name} ")]
        assert len(about) == 1, (name, lines)
        assert "\n" not in about[0]
    report = run("report", "--db", db, "--format", "jsonl")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["expires_at"] == ""
    listing = run("site", "list", "--db", db)
    assert listing.returncode == 0, listing.stderr
    rows = {line.split()[0]: line for line in listing.stdout.splitlines()[1:]}
    assert set(rows) == {"good", "nan", "forever", "garbled", "surrogate"}
    assert "unreadable" in rows["garbled"] and "unreadable" in rows["nan"]
    assert "unreadable" not in rows["good"]
    for name in ("nan", "garbled"):
        shown = run("site", "show", name, "--db", db)
        assert shown.returncode == 2 and shown.stderr.count("\n") == 1, shown.stderr
        assert "Traceback" not in shown.stderr
    # It can be put right: set from its defaults again.
    fixed = run("site", "set", "garbled", "--db", db, f"origin={ORIGIN}")
    assert fixed.returncode == 0, fixed.stderr


def test_a_site_from_the_config_file_keeps_its_settings_in_the_store_form() -> None:
    """The stored form of a site with every setting at its bound reads back as that site."""
    from snapshotd.config.loading import site_from_mapping, site_to_mapping

    site = SiteSettings(name="edge", origin=ORIGIN, crawl_delay=3600.0, repeat=3650.0,
                        expire_after=3650 * 86400.0, max_pages=1_000_000_000, max_hops=-1)
    assert site_from_mapping(json.loads(json.dumps(site_to_mapping(site)))) == site



def test_rules_through_the_api_are_text_or_a_file_of_the_rules_directory(
    tmp_path, monkeypatch
) -> None:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "good.rules").write_text("^/old/(.*)$ /new/$1 [R=301]\n")
    bad = b"^/a /b\nList Manager:secret-content /var/list /bin/x\n"
    (rules_dir / "bad.rules").write_bytes(bad)
    outside = tmp_path / "outside.rules"
    outside.write_text("^/x /y [R=302]\n")
    (rules_dir / "escape.rules").symlink_to(outside)
    (rules_dir / "zero.rules").symlink_to("/dev/zero")
    with (rules_dir / "big.rules").open("wb") as f:
        f.truncate(400 * 1024 * 1024)
    configured = SiteSettings(name="cfg", origin=ORIGIN, rules=str(outside))
    settings = Settings(db=str(tmp_path / "r.db"), api_tokens=(TOKEN,), sites=(configured,),
                        rules_dir=str(rules_dir))

    def put(client: httpx.Client, **body: object) -> httpx.Response:
        return client.put(f"{API}/sites/s", json={"origin": ORIGIN, **body})

    read = count_file_reads(monkeypatch)
    with api(settings) as client:
        for name in ("/dev/zero", "zero.rules", "/etc/passwd", "../outside.rules", str(outside),
                     "escape.rules", "big.rules", "bad.rules", "nope.rules", ".", ""):
            read.clear()
            r = put(client, rules=name) if name else put(client, rules="x", rules_text="^/a /b")
            # Refused by where it is or what it is, before a byte is read (a small file
            # with a bad line aside).
            assert sum(read) == (len(bad) if name == "bad.rules" else 0), (name, read)
            assert r.status_code == 400 and r.json()["field"] in ("rules", "rules_text"), (
                name, r.text[:300])
            assert "root:" not in r.text and "secret-content" not in r.text, r.text
        assert "line 2" in put(client, rules="bad.rules").json()["error"]
        assert "1 MiB" in put(client, rules="big.rules").json()["error"]
        assert client.get(f"{API}/sites/s").status_code == 404

        # A file of the directory, and rules sent as text, apply to the paths queued.
        assert put(client, rules="good.rules").status_code == 201
        queued = client.post(f"{API}/sites/s/paths", json={"paths": ["/old/a"]})
        assert queued.json()["results"][0]["location"] == "/new/a", queued.text
        assert put(client, rules_text="^/c$ /d [R=302]\n").status_code == 200
        queued = client.post(f"{API}/sites/s/paths", json={"paths": ["/c"]})
        assert queued.json()["results"][0]["location"] == "/d", queued.text
        shown = client.get(f"{API}/sites/s").json()["settings"]
        assert shown["rules_text"] == "^/c$ /d [R=302]\n" and shown["rules"] == ""
        wrong = put(client, rules_text="^/a /b\nnot a rule at all\n")
        assert wrong.status_code == 400 and wrong.json()["field"] == "rules_text"
        assert "rules_text:2:" in wrong.json()["error"]

        # The configured site's own file, outside the directory, stays through changes.
        cfg = client.get(f"{API}/sites/cfg").json()["settings"]
        changed = client.put(f"{API}/sites/cfg", json={**cfg, "crawl_delay": 1})
        assert changed.status_code == 200 and changed.json()["settings"]["rules"] == str(outside)
        job = client.post("/_snapshotd/v3/crawl", data={"token": TOKEN, "name": "cfg",
                                                        "maxToCrawl": "5"})
        assert job.status_code == 200, job.text
        assert client.get(f"{API}/sites/cfg").json()["settings"]["rules"] == str(outside)

    # No rules directory: no file is named through the API, text still is.
    with api(Settings(db=str(tmp_path / "n.db"), api_tokens=(TOKEN,))) as client:
        r = put(client, rules=str(rules_dir / "good.rules"))
        assert r.status_code == 400 and "rules_dir" in r.json()["error"], r.text
        assert put(client, rules_text="^/c$ /d [R=302]\n").status_code == 201


def test_a_number_in_a_query_too_long_to_read_or_not_ascii_is_a_400(tmp_path) -> None:
    settings = Settings(db=str(tmp_path / "q.db"), api_tokens=(TOKEN,))
    with api(settings) as client:
        assert client.put(f"{API}/sites/s", json={"origin": ORIGIN}).status_code == 201
        for raw in ("9" * 5000, "\u00b2", "\u0661"):
            data = client.get("/_snapshotd/v3/crawl/data",
                              params={"token": TOKEN, "name": "s", "num": raw})
            assert data.status_code == 400 and data.json()["field"] == "num", data.text[:200]
            paths = client.get(f"{API}/sites/s/paths", params={"limit": raw})
            assert paths.status_code == 400 and paths.json()["field"] == "limit", paths.text[:200]
            stats = client.get(f"{API}/stats", params={"minutes": raw})
            assert stats.status_code == 400, stats.text[:200]


def test_rules_text_put_through_the_api_replaces_the_configured_sites_rules(tmp_path) -> None:
    from snapshotd.rewrite import load_site_rules

    configured = SiteSettings(name="cfg", origin=ORIGIN, rules_text="^/a$ /b [R=301]\n")
    settings = Settings(db=str(tmp_path / "t.db"), api_tokens=(TOKEN,), sites=(configured,))
    app = create_app(settings, crawler=False, rules=load_site_rules(settings))
    with serve_asgi(app) as base, httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False
    ) as client:
        first = client.post(f"{API}/sites/cfg/paths", json={"paths": ["/a"]}).json()
        assert first["results"][0]["location"] == "/b"
        changed = client.put(f"{API}/sites/cfg", json={"origin": ORIGIN,
                                                       "rules_text": "^/a$ /c [R=301]\n"})
        assert changed.status_code == 200, changed.text
        then = client.post(f"{API}/sites/cfg/paths", json={"paths": ["/a"]}).json()
        assert then["results"][0]["location"] == "/c"


def test_never_is_taken_and_answered_as_never_and_zero_is_refused_naming_the_field(tmp_path):
    settings = Settings(db=str(tmp_path / "never.db"), api_tokens=(TOKEN,))
    with api(settings) as client:
        put = client.put(f"{API}/sites/kept", json={"origin": ORIGIN, "expire_after": "never"})
        assert put.status_code == 201, put.text
        assert put.json()["settings"]["expire_after"] == "never"
        assert client.get(f"{API}/sites/kept").json()["settings"]["expire_after"] == "never"
        for value in (0, "0", "30s"):
            bad = client.put(f"{API}/sites/kept", json={"origin": ORIGIN, "expire_after": value})
            assert bad.status_code == 400 and bad.json()["field"] == "expire_after", bad.text
            assert "must be from 60" in bad.json()["error"]
        assert client.get(f"{API}/sites/kept").json()["settings"]["expire_after"] == "never"
