"""The renderer against real Chromium and real servers on loopback.

Only loopback addresses are ever targets here: the origin and a sentinel on 127.0.0.1, a
sentinel on 127.0.0.2. Private and metadata ranges are tested on the policy function alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_asyncio
from pytest_httpserver import HTTPServer
from werkzeug.wrappers import Request, Response

from snapshotd.cli.capture import capture_command
from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.render import BrowserPool
from snapshotd.render.renderer import CaptureResult, Shot
from tests.chromium import (
    Sentinel,
    alive,
    chromium_pids,
    page_handler,
    require_chromium,
    rules_met,
    wait_until,
)

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

# render_timeout only stops a hang (a capture on a busy machine takes what it needs); the
# tests of what a render timeout does set a short one on their site (TIMED_OUT).
SETTINGS = BrowserSettings(
    concurrency=2,
    javascript_timeout=1.0,
    render_timeout=60.0,
    block_resources=("font", "media"),
    recycle_after=500,
)


# The render timeout of the tests that wait for one to end a capture.
TIMED_OUT = 4.0


class Origin:
    """The site under test: pages from tests/pages plus a few dynamic routes."""

    def __init__(self, sentinel: Sentinel, other: Sentinel) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self.sentinel, self.other = sentinel, other
        pages = page_handler(
            {
                "SENTINEL": sentinel.origin,
                "SENTINEL_WS": sentinel.origin.replace("http:", "ws:"),
                "OTHER": other.origin,
            }
        )
        s = self.server
        s.expect_request(re.compile(r"/p/.*")).respond_with_handler(self._logged(pages))
        s.expect_request("/sw.js").respond_with_handler(self._logged(pages))
        s.expect_request("/slow").respond_with_handler(self._logged(self._slow))
        s.expect_request("/data.json").respond_with_handler(self._logged(self._data))
        s.expect_request("/redirect").respond_with_handler(self._logged(self._redirect))
        s.expect_request("/status").respond_with_handler(self._logged(self._status))
        s.expect_request("/setcookie").respond_with_handler(self._logged(self._setcookie))
        s.expect_request(re.compile(".*")).respond_with_handler(
            self._logged(lambda r: Response("ok", content_type="text/plain"))
        )

    def _logged(self, handler):  # type: ignore[no-untyped-def]
        def handle(request: Request) -> Response:
            with self._lock:
                self.requests.append((request.full_path.rstrip("?"), dict(request.headers)))
            return handler(request)

        return handle

    @staticmethod
    def _slow(request: Request) -> Response:
        time.sleep(float(request.args.get("s", "1")))
        return Response("slow", content_type="text/plain")

    @staticmethod
    def _data(request: Request) -> Response:
        time.sleep(float(request.args.get("delay", "0")))
        return Response(json.dumps({"text": "Arrived late"}), content_type="application/json")

    @staticmethod
    def _setcookie(request: Request) -> Response:
        time.sleep(float(request.args.get("s", "0")))
        cookie = f"{request.args.get('name', 'set')}=1; Max-Age=3600; Path=/"
        return Response("set", content_type="text/plain", headers={"Set-Cookie": cookie})

    def _redirect(self, request: Request) -> Response:
        target = {"sentinel": self.sentinel.origin, "other": self.other.origin}
        to = target.get(request.args.get("to", ""), request.args.get("to", "/"))
        return Response("", status=302, headers={"Location": f"{to}/redirected"})

    @staticmethod
    def _status(request: Request) -> Response:
        code = int(request.args.get("code", "200"))
        headers = {"Location": request.args.get("location", "/")} if 300 <= code < 400 else {}
        body = f"<!doctype html><html><body><p>Status {code}</p></body></html>"
        return Response(body, status=code, headers=headers, content_type="text/html")

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    def seen(self, path: str) -> list[dict[str, str]]:
        with self._lock:
            return [h for p, h in self.requests if p.split("?")[0] == path]


@pytest.fixture(scope="module")
def servers() -> Iterator[Origin]:
    require_chromium()
    sentinel, other = Sentinel("127.0.0.2"), Sentinel("127.0.0.1")
    sentinel.start()
    other.start()
    origin = Origin(sentinel, other)
    origin.server.start()
    yield origin
    origin.server.clear()
    origin.server.stop()
    sentinel.stop()
    other.stop()


@pytest.fixture(scope="module")
def site(servers: Origin) -> SiteSettings:
    return SiteSettings(origin=servers.origin)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pool(servers: Origin) -> AsyncIterator[BrowserPool]:
    pool = BrowserPool(SETTINGS)
    await pool.start()
    yield pool
    await pool.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def solo(servers: Origin) -> AsyncIterator[BrowserPool]:
    """A one-slot pool without spares, so that consecutive captures share a page."""
    pool = BrowserPool(replace(SETTINGS, concurrency=1), spares=0)
    await pool.start()
    yield pool
    await pool.close()


# ------------------------------------------------------------------------ readiness


async def test_early_capture_ready_ends_the_capture_at_once(
    pool, site, servers, monkeypatch
) -> None:
    met = rules_met(monkeypatch)
    result = await pool.capture(f"{servers.origin}/p/early", site)
    assert result.ok, result
    assert "Ready early" in result.html
    assert met == []  # the page's call ended it: no rule was met (a request was in flight)


async def test_content_fetched_after_a_delay_is_waited_for(pool, site, servers) -> None:
    # SEO4Ajax's rule alone (the adaptive one is tested on the corpus, test_readiness.py).
    quiet = replace(site, readiness="quiet")
    result = await pool.capture(f"{servers.origin}/p/delayed", quiet)
    assert result.ok, result
    assert '<p class="late">Arrived late</p>' in result.html
    # fetch at 0.3 s, answered at 0.7 s, then the 1 s quiet period
    assert result.elapsed >= 1.6
    assert "setTimeout" not in result.html  # executable script stripped
    assert "application/ld+json" in result.html and '"name": "kept"' in result.html


async def test_a_page_that_never_idles_ends_at_render_timeout(
    pool, site, servers, monkeypatch
) -> None:
    # Under SEO4Ajax's rule; adaptive readiness lets polling go (tests/corpus, "/c/polling").
    met = rules_met(monkeypatch)
    polled = replace(site, readiness="quiet", render_timeout=TIMED_OUT)
    result = await pool.capture(f"{servers.origin}/p/poll", polled)
    assert result.error == "timeout"
    assert met == []  # never quiet: the render timeout ended it, not before it was up
    assert result.elapsed >= TIMED_OUT - 0.2
    assert result.html == ""


async def test_wait_for_capture_ready_ignores_the_quiet_period(pool, site, servers) -> None:
    waiting = replace(site, wait_for_capture_ready=True)
    result = await pool.capture(f"{servers.origin}/p/waitready", waiting)
    assert result.ok, result
    assert 'class="second"' in result.html
    assert result.elapsed >= 1.4


async def test_strip_scripts_false_keeps_scripts(pool, site, servers) -> None:
    result = await pool.capture(f"{servers.origin}/p/ready404", replace(site, strip_scripts=False))
    assert "onCaptureReady(404)" in result.html


# ------------------------------------------------------------------------ status and redirects


@pytest.mark.parametrize(
    ("page", "status", "location"),
    [
        ("meta404", 404, None),
        ("rendertron404", 404, None),
        ("metaredirect", 301, "/moved-here"),
        ("ready404", 404, None),
        ("readyredirect", 301, "/new"),
    ],
)
async def test_page_declared_status(pool, site, servers, page, status, location) -> None:
    result = await pool.capture(f"{servers.origin}/p/{page}", site)
    assert result.ok, result
    assert result.status == status
    assert result.headers.get("Location") == location
    assert "Set-Cookie" not in result.headers
    assert "prerender-" not in result.html
    assert "render:status_code" not in result.html
    if status == 404:
        assert "<p>" in result.html


async def test_document_redirect_is_stored_not_followed(pool, site, servers) -> None:
    url = f"{servers.origin}/status?code=301&location=/p/target"
    result = await pool.capture(url, site)
    assert result.ok, result
    assert (result.status, result.headers) == (301, {"Location": "/p/target"})
    assert result.html == ""


async def test_document_4xx_is_captured_with_its_status(pool, site, servers) -> None:
    result = await pool.capture(f"{servers.origin}/status?code=410", site)
    assert result.ok, result
    assert result.status == 410 and "Status 410" in result.html


async def test_document_5xx_is_an_error(pool, site, servers) -> None:
    result = await pool.capture(f"{servers.origin}/status?code=503", site)
    assert result.error == "http 503"


async def test_empty_body_is_an_error(pool, site, servers) -> None:
    result = await pool.capture(f"{servers.origin}/p/empty", site)
    assert result.error == "empty body"


async def test_client_side_redirect_records_the_final_url(solo, site, servers) -> None:
    result = await solo.capture(f"{servers.origin}/p/clientredirect", site)
    assert result.ok, result
    assert result.final_url == f"{servers.origin}/p/target"
    assert "Arrived." in result.html


# ------------------------------------------------------------------------ what the page may reach


async def test_page_cannot_reach_other_loopback_servers(pool, site, servers) -> None:
    result = await pool.capture(f"{servers.origin}/p/ssrf", site)
    assert result.ok, result
    assert servers.seen("/redirect"), "the same-origin redirect was requested"
    assert servers.sentinel.hits == []
    assert servers.other.hits == []


async def test_blocked_resource_types_are_not_fetched(pool, site, servers) -> None:
    result = await pool.capture(f"{servers.origin}/p/blocked", site)
    assert result.ok, result
    assert servers.seen("/seen")
    assert servers.seen("/font.woff") == []


async def test_every_request_carries_x_snapshotd(pool, site, servers) -> None:
    await pool.capture(f"{servers.origin}/p/blocked", site)
    for headers in servers.seen("/p/blocked") + servers.seen("/seen"):
        assert headers.get("X-Snapshotd") == "1"


async def test_file_urls_and_foreign_addresses_are_refused(pool, site, servers) -> None:
    result = await pool.capture("file:///etc/passwd", site)
    assert result.error == "refused: scheme file"
    result = await pool.capture(f"{servers.sentinel.origin}/", site)
    assert result.error is not None and result.error.startswith("refused: loopback")
    assert servers.sentinel.hits == []


# ------------------------------------------------------------------------ isolation


async def test_no_state_survives_from_one_capture_to_the_next(solo, site, servers) -> None:
    opened = solo.stats.slots_opened
    first = await solo.capture(f"{servers.origin}/p/setstate", site)
    assert first.ok, first
    for _ in range(2):
        result = await solo.capture(f"{servers.origin}/p/checkstate", site)
        assert result.ok, result
        state = json.loads(re.search(r'<pre id="out">(.*?)</pre>', result.html).group(1))
        # The one entry a reused page keeps behind the capture is the blank page between.
        assert state.pop("history") <= 2
        assert state == {"cookie": "", "local": 0, "session": 0, "name": "", "idb": 0, "caches": 0}
    assert all("Cookie" not in h for h in servers.seen("/p/checkstate"))
    assert solo.stats.slots_opened <= max(opened, 1)  # the same page, wiped, not a new one


async def test_captures_take_turns_on_wiped_spare_slots(servers, site, monkeypatch) -> None:
    from snapshotd.render.slot import Slot

    used: list[int] = []
    capture = Slot.capture

    async def recorded(
        self: Slot, url: str, site: SiteSettings, shot: Shot | None = None
    ) -> CaptureResult:
        used.append(id(self))
        return await capture(self, url, site, shot)

    monkeypatch.setattr(Slot, "capture", recorded)
    pool = BrowserPool(replace(SETTINGS, concurrency=1))
    await pool.start()
    try:
        # Dirty both slots, then check that each, wiped, shows none of it.
        for path in ("setstate", "setstate", "checkstate", "checkstate", "checkstate"):
            result = await pool.capture(f"{servers.origin}/p/{path}", site)
            assert result.ok, result
            if path == "checkstate":
                state = json.loads(re.search(r'<pre id="out">(.*?)</pre>', result.html).group(1))
                assert state.pop("history") <= 2
                assert state == {
                    "cookie": "", "local": 0, "session": 0, "name": "", "idb": 0, "caches": 0
                }
        assert pool.stats.slots_opened == 2
        # Each slot was dirtied by a setstate and then checked, wiped, at least once.
        a, b = used[0], used[1]
        assert a != b and used == [a, b, a, b, a]
    finally:
        await pool.close()
    assert all("Cookie" not in h for h in servers.seen("/p/checkstate"))


async def test_a_site_serving_both_profiles_keeps_contexts_of_each_instead_of_trading_them(
    servers, site
) -> None:
    # Pages captured in both profiles, two at a time: each profile keeps its spare slot.
    pool = BrowserPool(SETTINGS)
    await pool.start()
    try:
        for _ in range(6):
            results = await asyncio.gather(*(
                pool.capture(f"{servers.origin}/p/target", site, profile)
                for profile in ("mobile", "desktop", "mobile", "desktop")
            ))
            assert all(r.ok for r in results), results
        # At most concurrency + a spare of each profile, opened once.
        assert pool.stats.slots_opened <= SETTINGS.concurrency + 2, pool.stats
    finally:
        await pool.close()
    # One at a time, the next asked for as soon as the last returned (its slot not yet
    # being wiped): it waits for that wipe rather than trading the other profile's slot.
    solo = BrowserPool(replace(SETTINGS, concurrency=1))
    await solo.start()
    try:
        for profile in ("mobile", "desktop", "desktop", "mobile", "mobile", "desktop") * 2:
            result = await solo.capture(f"{servers.origin}/p/target", site, profile)
            assert result.ok, result
        assert solo.stats.slots_opened <= 1 + 2, solo.stats
    finally:
        await solo.close()


async def test_a_profile_left_without_its_spare_takes_one_from_a_profile_with_two_idle(
    servers, site, monkeypatch
) -> None:
    # Two desktop captures at once take two desktop slots; then phone captures two at a
    # time find the phone's slots busy or being wiped: a desktop slot idle beside another
    # idle one, through SURPLUS_AFTER captures, is closed for a phone slot, so the phone has
    # its spare again rather than each capture waiting for the last one's wipe from then on.
    from snapshotd.render.pool import SURPLUS_AFTER
    from snapshotd.render.slot import Slot

    used: dict[str, set[int]] = {"mobile": set(), "desktop": set()}
    capture = Slot.capture

    async def recorded(
        self: Slot, url: str, site: SiteSettings, shot: Shot | None = None
    ) -> CaptureResult:
        used[self.profile.name].add(id(self))
        return await capture(self, url, site, shot)

    monkeypatch.setattr(Slot, "capture", recorded)
    pool = BrowserPool(SETTINGS)
    await pool.start()
    url = f"{servers.origin}/p/target"
    try:
        results = await asyncio.gather(*(pool.capture(url, site, "desktop") for _ in range(2)))
        assert len(used["desktop"]) == 2
        for _ in range(2 * SURPLUS_AFTER):
            results += await asyncio.gather(*(pool.capture(url, site, "mobile") for _ in range(2)))
        assert all(r.ok for r in results), results
        assert len(used["mobile"]) == SETTINGS.concurrency + 1, used
        # The desktop keeps one slot, which its next capture takes.
        assert (await pool.capture(url, site, "desktop")).ok
        assert len(used["desktop"]) == 2
    finally:
        await pool.close()


async def test_garbage_collection_between_captures_keeps_the_slot(
    servers, site, monkeypatch
) -> None:
    from snapshotd.render import wipe

    monkeypatch.setattr(wipe, "_COLLECT_ABOVE", 0)  # collect at every wipe the bound allows
    pool = BrowserPool(replace(SETTINGS, concurrency=1), spares=0)
    await pool.start()
    try:
        for _ in range(3):
            result = await pool.capture(f"{servers.origin}/p/target", site)
            assert result.ok, result
        await pool.capture(f"{servers.origin}/p/target", site)  # after the third wipe
        assert pool.stats.collections >= 1
        assert pool.stats.slots_opened == 1
    finally:
        await pool.close()


async def test_a_capture_cancelled_while_waiting_for_a_wipe_does_not_stall_recycling(
    servers, site
) -> None:
    pool = BrowserPool(replace(SETTINGS, concurrency=1, recycle_after=2), spares=0)
    await pool.start()
    try:
        first = await pool.capture(f"{servers.origin}/p/target", site)
        assert first.ok, first
        # The one slot is being wiped: this capture waits for it, and is cancelled there.
        waiting = asyncio.ensure_future(pool.capture(f"{servers.origin}/p/target", site))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # Two captures have started on this Chromium: the next one recycles it, which waits
        # for every capture on it to be released.
        after = await asyncio.wait_for(pool.capture(f"{servers.origin}/p/target", site), 30)
        assert after.ok, after
        assert pool.stats.recycles == 1
    finally:
        await pool.close()


async def test_nothing_the_last_page_left_running_reaches_the_next_capture(
    solo, site, servers
) -> None:
    # Timers, animation frames, a fetch in flight, a dedicated and a shared worker, an
    # IndexedDB transaction, unload handlers (on the page and on a script-made frame) and a
    # broadcast channel, all still at it when the capture ends.
    first = await solo.capture(f"{servers.origin}/p/linger", site)
    assert first.ok, first
    waiting = replace(site, wait_for_capture_ready=True)
    result = await solo.capture(f"{servers.origin}/p/checklinger", waiting)
    assert result.ok, result
    state = json.loads(re.search(r'<pre id="out">(.*?)</pre>', result.html).group(1))
    empty = {"cookie": "", "local": [], "session": [], "idb": [], "caches": []}
    assert state == {"first": empty, "later": empty, "heard": [], "sharedClients": 1}
    assert all("Cookie" not in h for h in servers.seen("/p/checklinger"))


@pytest.mark.parametrize("page", ["busyshared", "busyworker", "busypage"])
async def test_storage_written_to_the_end_leaves_nothing_behind(
    solo, site, servers, page
) -> None:
    # Writes still in flight when the capture ends, from the page, a dedicated worker or a
    # shared worker (which outlives its last document for a moment), must not land after the
    # wipe: the next capture in the same slot sees no database and no cache.
    waiting = replace(site, wait_for_capture_ready=True)
    for _ in range(8):
        first = await solo.capture(f"{servers.origin}/p/{page}", waiting)
        assert first.ok, first
        result = await solo.capture(f"{servers.origin}/p/checklinger", waiting)
        assert result.ok, result
        state = json.loads(re.search(r'<pre id="out">(.*?)</pre>', result.html).group(1))
        for moment in ("first", "later"):  # at once, and after writes in flight had landed
            assert (state[moment]["idb"], state[moment]["caches"]) == ([], []), moment


async def test_a_busy_loop_ends_at_render_timeout_and_the_slot_is_replaced(
    solo, site, servers
) -> None:
    result = await solo.capture(f"{servers.origin}/p/loop", replace(site, render_timeout=TIMED_OUT))
    assert result.error == "timeout"
    after = await solo.capture(f"{servers.origin}/p/target", site)
    assert after.ok, after


async def test_concurrent_captures(pool, site, servers) -> None:
    urls = [f"{servers.origin}/p/{p}" for p in ("target", "meta404", "ready404", "target")]
    results = await asyncio.gather(*(pool.capture(u, site) for u in urls))
    assert [r.status for r in results] == [200, 404, 404, 200]
    assert pool.stats.active == 0


# ------------------------------------------------------------------------ resilience


async def test_a_killed_chromium_is_replaced(servers, site) -> None:
    # Other pools of this module may be running browsers of their own: only this one's goes.
    before = set(chromium_pids())
    pool = BrowserPool(replace(SETTINGS, concurrency=1))
    await pool.start()
    try:
        # The page calls onCaptureReady after 3 s, and nothing else may end it before: the
        # browser is killed once the page has been asked for, while the capture waits.
        waiting = replace(site, wait_for_capture_ready=True)
        capture = asyncio.ensure_future(pool.capture(f"{servers.origin}/p/slowready", waiting))
        asked = lambda: any(path == "/p/slowready" for path, _ in list(servers.requests))  # noqa: E731
        assert await asyncio.to_thread(wait_until, lambda: asked() or capture.done(), 60.0)
        assert asked(), (capture.result() if capture.done() else None, servers.requests[-5:])
        browsers = [
            p for p in chromium_pids() if p not in before and "--type=" not in _cmdline(p)
        ]
        assert browsers
        for pid in browsers:
            os.kill(pid, signal.SIGKILL)
        result = await capture
        assert result.error == "crashed"
        after = await pool.capture(f"{servers.origin}/p/target", site)
        assert after.ok, after
        assert pool.stats.restarts == 1 and pool.stats.launches == 2
    finally:
        await pool.close()
    assert await asyncio.to_thread(wait_until, lambda: not any(alive(p) for p in browsers))
    assert await asyncio.to_thread(wait_until, lambda: not set(chromium_pids()) - before)


async def test_browser_is_recycled_once_drained(servers, site) -> None:
    # Other pools of this module may be running browsers of their own: only this one's count.
    before = set(chromium_pids())
    pool = BrowserPool(replace(SETTINGS, concurrency=2, recycle_after=2))
    await pool.start()
    try:
        urls = [f"{servers.origin}/p/target"] * 7
        results = await asyncio.gather(*(pool.capture(u, site) for u in urls))
        assert all(r.ok for r in results), results
        assert pool.stats.recycles == 3 and pool.stats.launches == 4
        mine = set(chromium_pids()) - before
        assert len([p for p in mine if "--type=" not in _cmdline(p)]) == 1
    finally:
        await pool.close()
    assert await asyncio.to_thread(wait_until, lambda: not set(chromium_pids()) - before)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


CHILD = """
import asyncio, sys
from snapshotd.config.settings import BrowserSettings, SiteSettings
from snapshotd.render import BrowserPool
from tests.chromium import chromium_pids

async def main():
    pool = BrowserPool(BrowserSettings(concurrency=1))
    await pool.start()
    result = await pool.capture(sys.argv[1], SiteSettings(origin=sys.argv[2]))
    print("READY", result.status, *chromium_pids(), flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_no_chromium_survives_sigterm(servers) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, f"{servers.origin}/p/target", servers.origin],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    try:
        line = await asyncio.to_thread(child.stdout.readline)
        words = line.split()
        assert words[:2] == ["READY", "200"], line
        pids = [int(w) for w in words[2:]]
        assert pids
        child.send_signal(signal.SIGTERM)
        await asyncio.to_thread(child.wait, 10)
        assert await asyncio.to_thread(wait_until, lambda: not any(alive(p) for p in pids))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


# ------------------------------------------------------------------------ the command


async def test_capture_command_prints_the_snapshot(servers, tmp_path, capsys) -> None:
    settings = Settings(browser=SETTINGS)
    out = tmp_path / "snap.html"
    code = await capture_command(f"{servers.origin}/p/target", settings, str(out))
    assert code == 0
    assert "Arrived." in out.read_text()
    err = capsys.readouterr().err
    assert re.search(
        r"status 200, \d+\.\d\d s, final URL http://127\.0\.0\.1:\d+/p/target, device mobile", err
    )
    code = await capture_command(f"{servers.origin}/p/target", settings, str(out), "desktop")
    assert code == 0
    assert capsys.readouterr().err.rstrip().endswith(", device desktop")
    code = await capture_command(f"{servers.origin}/status?code=500", settings, None)
    assert code == 1
    assert "http 500" in capsys.readouterr().err
