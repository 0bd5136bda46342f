"""Sites as runtime objects: in the store (both engines), through the API, the command line,
and seen by other processes without a restart."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from snapshotd.config.loading import site_from_mapping, site_to_mapping
from snapshotd.config.settings import SiteSettings
from snapshotd.config.values import ConfigError
from snapshotd.sites.registry import SiteRegistry, site_json
from snapshotd.store.interface import PRIORITY_LINK
from snapshotd.store.job_state import JobState, save_job_state
from snapshotd.store.outcome import CaptureOutcome
from tests.chromium import require_chromium, wait_until
from tests.servers import serve_asgi
from tests.test_crawler_process import (
    Shop,
    crawl_db,  # noqa: F401 (a fixture)
    kill_all,
    processed,
    snapshotd,
    states,
    tree,
)
from tests.test_serve_process import serving

BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
SHOP = SiteSettings(name="shop", origin="http://127.0.0.1:9", seeds=("/", "/a"), max_pages=50)


def test_a_site_round_trips_through_its_stored_form() -> None:
    site = site_from_mapping(
        {"name": "shop", "origin": "http://127.0.0.1:9", "expire_after": "2d",
         "bots": {"add": ["MyBot"]}, "render_timeout": 5, "javascript_timeout": 0.5}
    )
    assert site_from_mapping(json.loads(site_json(site))) == site
    assert site_to_mapping(SHOP)["seeds"] == ["/", "/a"]
    assert "render_timeout" not in site_to_mapping(SHOP)  # unset: the [browser] value
    for bad in ({"origin": "ftp://x"}, {"origin": "http://a", "max_pages": 0},
                {"origin": "http://a", "name": "no spaces"},
                {"origin": "http://a", "render_timeout": 0}):
        with pytest.raises(ConfigError):
            site_from_mapping(bad)


async def test_sites_in_the_store(store) -> None:  # type: ignore[no-untyped-def]
    assert await store.list_sites() == []
    await store.put_site("shop", site_json(SHOP))
    [row] = await store.list_sites()
    assert (row.name, row.paused) == ("shop", False)
    created = row.updated_at
    store.test_clock.now += 5
    await store.put_site("shop", site_json(SHOP))  # the same settings: nothing changes
    assert (await store.list_sites())[0].updated_at == created
    await store.put_site("shop", site_json(SiteSettings(name="shop", origin="http://127.0.0.1:8")))
    changed = (await store.list_sites())[0]
    assert changed.updated_at > created and "127.0.0.1:8" in changed.settings
    assert await store.set_site_paused("shop", True)
    assert (await store.list_sites())[0].paused
    assert not await store.set_site_paused("nope", True)


async def test_restart_and_delete_leave_nothing_behind(store) -> None:  # type: ignore[no-untyped-def]
    for name in ("shop", "blog"):
        await store.put_site(name, site_json(SiteSettings(name=name, origin="http://127.0.0.1:9")))
        for n in range(3):
            await store.enqueue(name, f"/p{n}", PRIORITY_LINK)
        record = await store.claim("me", 60, sites=[name])
        assert await store.complete(
            name, record.path, "me", CaptureOutcome(html="<p>x</p>", status=200, headers={},
                final_url="http://127.0.0.1:9" + record.path, expires_at=store.test_clock() + 60),
        )
    await store.add_counters([(1, "shop", "captures", 2), (1, "blog", "captures", 1)])
    await store.add_recent([(1.0, name, "Googlebot", "/p0", "HIT", 200, 1)
                            for name in ("shop", "blog")])
    for name in ("shop", "blog"):
        await save_job_state(store, name, JobState(started=1.0, rounds=3))

    assert await store.clear_site("shop") == 3
    assert [r.name for r in await store.list_sites()] == ["blog", "shop"]  # settings kept
    assert "shop" not in await store.counts()
    assert await store.get_snapshot("shop", "/p0") is None
    assert {s for _, s, _, _ in await store.counters(0)} == {"blog"}
    assert [r[1] for r in await store.recent(10)] == ["blog"]
    assert await store.get_meta("job:shop") is None  # its rounds

    assert await store.clear_site("blog", remove=True) == 3
    assert [r.name for r in await store.list_sites()] == ["shop"]
    assert await store.counts() == {}
    assert await store.counters(0) == []
    assert await store.recent(10) == []
    assert await store.get_meta("job:blog") is None
    async for record in store.iter_paths():
        raise AssertionError(f"left behind: {record}")


async def test_the_registry_sees_another_process_change_within_its_refresh(store) -> None:  # type: ignore[no-untyped-def]
    from snapshotd.config.settings import Settings

    heard: list[tuple[set[str], set[str]]] = []
    registry = SiteRegistry(Settings(sites=(SHOP,)), store, refresh_every=0.05)
    registry.listen(lambda changed, removed: heard.append((changed, removed)))
    await registry.open()
    try:
        assert [s.name for s in registry.sites] == ["shop"]
        blog = SiteSettings(name="blog", origin="http://127.0.0.1:8", hosts=("blog.test",))
        await store.put_site("blog", site_json(blog))  # as another process would
        assert await _eventually(lambda: registry.site("blog") == blog)
        assert registry.site_for_host("blog.test") == blog
        view = registry.view("blog")
        assert view is not None and view.settings is registry.site("blog")
        await store.set_site_paused("blog", True)
        assert await _eventually(lambda: registry.is_paused("blog"))
        await store.put_site("bad", '{"origin": "ftp://x"}')  # logged, left out
        await store.clear_site("blog", remove=True)
        assert await _eventually(lambda: registry.site("blog") is None)
        assert registry.site("bad") is None and registry.view("blog") is None
        assert ({"blog"}, set()) in heard and (set(), {"blog"}) in heard
    finally:
        await registry.close()


async def _eventually(check, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.02)
    return check()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "snapshotd", *args], capture_output=True, text=True, timeout=60
    )


def test_the_site_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "s.db")
    assert "no such database" in run("site", "list", "--db", db).stderr
    out = run("site", "set", "shop", "--db", db, "origin=http://127.0.0.1:9", "max_pages=500",
              'seeds=["/", "/a"]', 'bots.add=["MyBot"]')
    assert out.returncode == 0 and out.stdout == "created site shop\n", out.stderr
    shown = json.loads(run("site", "show", "shop", "--db", db).stdout)
    assert shown["settings"]["max_pages"] == 500
    assert shown["settings"]["seeds"] == ["/", "/a"]
    assert shown["settings"]["bots"]["add"] == ["MyBot"]
    bad = run("site", "set", "shop", "--db", db, "max_pages=0")
    assert bad.returncode == 2 and bad.stderr == (
        "snapshotd: site.max_pages: must be from 1 to 1000000000, got 0\n"
    )
    assert run("site", "pause", "shop", "--db", db).stdout == "paused site shop\n"
    listed = run("site", "list", "--db", db).stdout.splitlines()
    assert listed[1].split()[:2] == ["shop", "paused"]
    assert run("site", "resume", "shop", "--db", db).returncode == 0
    assert "removed 0 paths" in run("site", "restart", "shop", "--db", db).stdout
    assert run("site", "delete", "shop", "--db", db).stdout == "deleted site shop and its 0 paths\n"
    gone = run("site", "show", "shop", "--db", db)
    assert gone.returncode == 2 and gone.stderr == "snapshotd: no site is named 'shop'\n"


@pytest.mark.browser
def test_a_site_created_through_the_api_is_served_and_crawled_by_other_processes(
    crawl_db, monkeypatch  # noqa: F811
):
    """``serve`` starts with no site; a site PUT through its API is answered by serve at
    once and crawled by a ``worker`` already running in another process; pause, restart and
    delete reach that worker too."""
    require_chromium()
    monkeypatch.setenv("SNAPSHOTD_MAINTENANCE_EVERY", "1")
    shop = Shop()
    db = crawl_db
    with serve_asgi(shop.app) as origin, serving(
        "--db", str(db), "--no-crawler", "--workers", "1"
    ) as serve:
        worker = snapshotd("worker", "--db", str(db))
        processes = [worker.pid]
        try:
            url = serve.url()
            token = re.search(r"#token=(\S+)", serve.stderr).group(1)  # type: ignore[union-attr]
            auth = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=url, headers=auth, timeout=30, trust_env=False) as api:
                assert api.get("/items/1", headers={"User-Agent": BOT}).status_code == 421
                body = {"origin": origin, "seeds": ["/"], "javascript_timeout": 0.2}
                created = api.put("/_snapshotd/api/v1/sites/shop", json=body)
                assert created.status_code == 201, created.text
                assert created.json()["settings"]["origin"] == origin
                assert api.put("/_snapshotd/api/v1/sites/shop", json=body).status_code == 200
                bad = api.put("/_snapshotd/api/v1/sites/shop", json={"origin": origin,
                                                                     "max_hops": -5})
                assert bad.status_code == 400 and bad.json()["field"] == "max_hops"
                person = api.get("/a")
                assert person.status_code == 200 and "x-snapshotd-cache" not in person.headers
                # The worker, started before the site existed, crawls it.
                assert wait_until(lambda: len(processed(db)) >= 5, 90), _err(worker)
                hit = api.get("/", headers={"User-Agent": BOT})
                assert hit.headers["x-snapshotd-cache"] in ("HIT", "STALE")

                assert api.post("/_snapshotd/api/v1/sites/shop/pause").json()["paused"]
                time.sleep(2 + 1)  # every process reads the sites each second; a capture ends
                shown = api.get("/_snapshotd/api/v1/sites/shop").json()
                assert shown["paused"] and shown["counts"]["processed"] >= 5
                restarted = api.post("/_snapshotd/api/v1/sites/shop/restart").json()
                assert restarted["paths"] >= 5
                # Paused: nothing is crawled again, and a bot's miss passes through.
                miss = api.get("/items/2", headers={"User-Agent": BOT})
                assert miss.headers["x-snapshotd-cache"] == "BYPASS"
                assert not wait_until(lambda: processed(db), 3)
                assert api.post("/_snapshotd/api/v1/sites/shop/resume").status_code == 200
                # Resumed after a restart: crawled again from its seeds.
                assert wait_until(lambda: len(processed(db)) >= 5, 90), _err(worker)

                deleted = api.delete("/_snapshotd/api/v1/sites/shop")
                assert deleted.json()["deleted"] == "shop"
                assert api.get("/_snapshotd/api/v1/sites/shop").status_code == 404
                # Removed at once; what a capture under way queued meanwhile, at the
                # crawler's next maintenance (every second here).
                assert wait_until(lambda: not states(db), 10), states(db)
                time.sleep(2.5)  # two maintenances more
                assert not states(db)
                assert api.get("/items/1", headers={"User-Agent": BOT}).status_code == 421
            processes = tree(worker.pid)
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, err
            assert serve.stop() in (0, -signal.SIGTERM), serve.stderr
            for text in (serve.stderr, err):
                assert "Traceback" not in text, text
            assert not states(db)  # nothing came back after the delete
        finally:
            kill_all(processes)
            if worker.returncode is None:
                worker.kill()
                worker.communicate(timeout=10)


def _err(proc: subprocess.Popen[str]) -> str:
    return f"worker exited {proc.returncode}" if proc.poll() is not None else "worker running"
