"""The one browser pool of a serve's workers (snapshotd.server.shared_pool): two SharedPools
in one directory, as two workers have them, each over a pool that records what it is asked.
Both run in this process: an ``fcntl`` lock is held by an open file, so the second is refused
it as another process would be. The pools here are recorders; tests/test_serve_workers.py
runs the real one, Chromium and all, in two worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import struct
import sys
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from snapshotd.config.settings import SiteSettings
from snapshotd.crawl.hostlock import HostLock
from snapshotd.render.renderer import CaptureResult, Shot
from snapshotd.server import shared_pool
from snapshotd.server.shared_pool import SharedPool

SITE = SiteSettings(name="shop", origin="http://127.0.0.1:9", ignore_params=("ref",))
assert SITE.ignored_params is not None  # a cached property: an object of another class


class Recorder:
    """A browser pool that records its captures; ``gate``, when set, holds them."""

    def __init__(self) -> None:
        self.started = 0
        self.closed = False
        self.asked: list[tuple[str, SiteSettings, str, Shot | None]] = []
        self.gate: asyncio.Event | None = None
        self.cancelled = 0
        self.fault: Exception | None = None

    async def start(self) -> None:
        self.started += 1

    async def close(self) -> None:
        self.closed = True
        if self.gate is not None:
            self.gate.set()

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop", shot: Shot | None = None
    ) -> CaptureResult:
        self.asked.append((url, site, profile, shot))
        if self.fault is not None:
            raise self.fault
        if self.gate is not None:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.closed:
            return CaptureResult(url=url, final_url=url, error="renderer closed")
        return CaptureResult(url=url, final_url=url, html=f"<p>{profile}</p>",
                             png=b"PNG" if shot else b"")

    async def probe(self, timeout: float = 15.0) -> str | None:
        return f"probed by {id(self):x} within {timeout:g}"


async def until(check: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_pool, "LOCK_POLL_SECONDS", 0.02)
    monkeypatch.setattr(shared_pool, "HOLDER_WAIT", 0.3)


@contextlib.asynccontextmanager
async def two(
    tmp_path: Path, grace: float = 10.0
) -> AsyncIterator[tuple[SharedPool, Recorder, SharedPool, Recorder]]:
    """Two workers' pools in one directory, the first the holder; both closed at the end."""
    first, second = Recorder(), Recorder()
    holder = SharedPool(first, str(tmp_path), grace=grace)  # type: ignore[arg-type]
    other = SharedPool(second, str(tmp_path), grace=grace)  # type: ignore[arg-type]
    await holder.start()
    await other.start()
    try:
        yield holder, first, other, second
    finally:
        await other.close()
        await holder.close()


async def held(other: SharedPool, first: Recorder, path: str) -> asyncio.Future[CaptureResult]:
    """A capture ``other`` asked, held on the holder's pool (``first``) until its gate opens."""
    first.gate = asyncio.Event()
    asked = asyncio.ensure_future(other.capture(f"http://127.0.0.1:9{path}", SITE))
    await until(lambda: first.asked)
    return asked


async def test_a_worker_that_does_not_hold_the_pool_renders_on_the_holders(tmp_path, fast):
    async with two(tmp_path) as (holder, first, other, second):
        assert holder.holder and not other.holder
        result = await other.capture("http://127.0.0.1:9/a", SITE, "mobile", Shot(320, 640))
        assert result.ok and result.html == "<p>mobile</p>" and result.png == b"PNG"
        assert first.asked == [("http://127.0.0.1:9/a", SITE, "mobile", Shot(320, 640))]
        assert second.asked == [] and second.started == 0  # no browser of its own
        assert await other.probe(3) == f"probed by {id(first):x} within 3"
        own = await holder.capture("http://127.0.0.1:9/b", SITE)
        assert own.html == "<p>desktop</p>" and len(first.asked) == 2


async def test_a_capture_its_worker_stops_waiting_for_is_cancelled_on_the_holder(
    tmp_path, fast
):
    async with two(tmp_path) as (holder, first, other, _):
        asked = await held(other, first, "/slow")
        asked.cancel()
        await until(lambda: first.cancelled == 1)
        with pytest.raises(asyncio.CancelledError):
            await asked


async def test_a_holder_that_stops_lets_others_captures_end_then_another_takes_over(
    tmp_path, fast
):
    async with two(tmp_path) as (holder, first, other, second):
        asked = await held(other, first, "/a")
        closing = asyncio.ensure_future(holder.close())
        await asyncio.sleep(0.1)
        assert not closing.done() and not first.closed  # the capture under way goes on
        first.gate.set()
        result = await asked
        assert result.ok and result.html == "<p>desktop</p>"
        await closing
        assert first.closed
        await until(lambda: other.holder)
        assert second.started == 1
        result = await other.capture("http://127.0.0.1:9/b", SITE)
        assert result.ok and second.asked[-1][0] == "http://127.0.0.1:9/b"
    assert not os.path.exists(other.address)


async def test_a_capture_still_under_way_when_the_holders_grace_ends_is_crashed(
    tmp_path, fast
):
    async with two(tmp_path, grace=0.1) as (holder, first, other, _):
        asked = await held(other, first, "/a")
        await holder.close()
        assert first.cancelled == 1  # cut short on the holder's pool
        result = await asked
        assert result.error == "crashed" and result.html == ""


async def test_a_worker_that_stops_does_not_take_the_pool_over(tmp_path, fast):
    async with two(tmp_path) as (holder, _, other, second):
        other.stop_taking()
        await holder.close()
        await asyncio.sleep(0.2)  # ten tries of the lock, had it gone on
        assert not other.holder and second.started == 0


async def test_the_holder_hangs_up_on_a_process_that_is_not_a_sibling_worker(tmp_path, fast):
    async with two(tmp_path) as (holder, first, other, _):
        # This test's own child: its parent is this process, not this process's parent.
        script = (
            "import pickle, socket, struct, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "body = pickle.dumps(('probe', 1.0))\n"
            "try:\n"
            "    s.sendall(struct.pack('>I', len(body)) + body)\n"
            "    print(repr(s.recv(100)))\n"
            "except (BrokenPipeError, ConnectionResetError):\n"
            "    print('hung up')\n"
        )
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, holder.address, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await child.communicate()
        assert out.decode().strip() in ("b''", "hung up")  # nothing answered
        assert first.asked == []
        assert (await other.capture("http://127.0.0.1:9/a", SITE)).ok  # siblings still are


async def test_a_message_holding_any_other_class_is_not_unpickled(tmp_path, fast):
    async with two(tmp_path) as (holder, first, other, _):
        reader, writer = await asyncio.open_unix_connection(holder.address)
        body = pickle.dumps(("capture", "http://127.0.0.1:9/a", OrderedDict(), "mobile", None))
        writer.write(struct.pack(">I", len(body)) + body)
        await writer.drain()
        assert await reader.read() == b""  # hung up on
        writer.close()
        assert first.asked == []


async def test_with_no_holder_listening_a_capture_fails_after_waiting_for_one(tmp_path, fast):
    taken = HostLock(str(tmp_path / "render.lock"))  # a holder that never listens
    assert taken.try_acquire()
    recorder = Recorder()
    other = SharedPool(recorder, str(tmp_path))  # type: ignore[arg-type]
    await other.start()
    try:
        result = await other.capture("http://127.0.0.1:9/a", SITE)
        assert result.error == "browser unavailable: no worker runs the browser"
        assert await other.probe() == "browser unavailable: no worker runs the browser"
        assert recorder.asked == [] and not other.holder
    finally:
        await other.close()
        taken.release()


async def test_a_fault_of_the_holders_pool_is_raised_in_the_asking_worker(tmp_path, fast):
    async with two(tmp_path) as (holder, first, other, _):
        first.fault = KeyError("wedged")
        with pytest.raises(RuntimeError, match="KeyError: 'wedged'"):
            await other.capture("http://127.0.0.1:9/a", SITE)
        first.fault = None
        assert (await other.capture("http://127.0.0.1:9/b", SITE)).ok  # the holder goes on
