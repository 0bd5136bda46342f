"""The one browser pool of a ``serve``'s worker processes (SPEC 3.1): :class:`SharedPool`.

Every worker renders through one pool, whichever worker a request reached: the holder of
the render lock (a file of this ``serve``, :mod:`snapshotd.crawl.hostlock`) runs Chromium
and listens on a Unix socket beside the lock; every other worker sends it each capture (the
URL, the site's settings as that worker has them, the profile, the screenshot asked) and gets
its result back. So ``browser.concurrency`` bounds the renders of all the workers together,
one Chromium's memory is paid, and a site's pages render in contexts warm with its earlier
pages, where each worker's own browser would start cold for every site.

Invariants:
- at most one worker runs a browser: the holder of the lock. Every other worker tries the
  lock each second until its server begins to shut down, so when the holder dies (the kernel
  lets the lock go, however it ends) another takes it, listens, and launches the pool (a
  launch that fails is said once; each capture then tries again, as the pool's own do);
- a holder that stops stops listening first, gives the captures under way for others
  ``STOP_GRACE`` seconds to end on its pool, and only then closes the pool and lets the lock
  go; a capture asked meanwhile waits for the next holder;
- a capture sent to the holder that ends without its result (the holder died, or its grace
  ran out) fails as ``crashed``, as a capture on a crashed browser does; one that finds no
  holder listening tries again until one does, and fails as ``browser unavailable`` after
  :data:`HOLDER_WAIT` seconds;
- a capture that the asking worker stops waiting for (a stop cancels it) is cancelled in
  the holder too: the asker's end of the connection closing is the signal;
- one capture a connection, each message a length (4 bytes, big-endian, at most
  :data:`MAX_MESSAGE`) and a pickle of the request or the answer. Only this ``serve``'s
  workers speak on it: the socket is in the supervisor's private directory (mode 0700), each
  end hangs up on a peer that is not a worker of the same supervisor (``SO_PEERCRED``: the
  same user, and the same parent process), and a message is unpickled with the classes a
  request or an answer holds and no other (:class:`_Unpickler`);
- the pool's readiness probe (``readyz``) is the holder's, asked the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import pickle
import socket
import struct
import time
from dataclasses import replace
from typing import Any

from snapshotd.capture.stopping import STOP_GRACE
from snapshotd.config.settings import SiteSettings
from snapshotd.crawl.hostlock import HostLock
from snapshotd.render.pool import BrowserPool
from snapshotd.render.procs import parent_of
from snapshotd.render.renderer import CaptureResult, Shot, first_line

__all__ = ["HOLDER_WAIT", "MAX_MESSAGE", "SharedPool"]

log = logging.getLogger("snapshotd.render")

LOCK_POLL_SECONDS = 1.0  # how often a worker that is not the holder tries the lock
HOLDER_WAIT = 10.0  # how long a capture waits for a holder to listen
CONNECT_RETRY = 0.05
MAX_MESSAGE = 1 << 30
_LENGTH = struct.Struct(">I")


class SharedPool:
    """The browser pool all workers of one ``serve`` render through; implements
    :class:`~snapshotd.render.renderer.Renderer`. ``directory``: the supervisor's private
    directory, where the lock and the socket are."""

    screenshots = True  # it takes a capture's ``shot`` (snapshotd.api.screenshot)

    def __init__(self, pool: BrowserPool, directory: str, *, grace: float = STOP_GRACE) -> None:
        self.pool = pool
        self.lock = HostLock(os.path.join(directory, "render.lock"))
        self.address = os.path.join(directory, "render.sock")
        self.grace = grace
        self._server: asyncio.AbstractServer | None = None
        self._taking: asyncio.Task[None] | None = None
        self._answering: set[asyncio.Task[None]] = set()

    @property
    def holder(self) -> bool:
        """Whether this process runs the pool."""
        return self._server is not None

    async def start(self) -> None:
        """Hold the pool, or wait for it in the background; raises as
        :meth:`BrowserPool.start` does when this process holds it and Chromium does not
        start, and OSError when it cannot listen."""
        if not self.lock.try_acquire():
            self._taking = asyncio.create_task(self._hold_when_free(), name="render lock")
            return
        try:
            await self._listen()
            await self.pool.start()
        except BaseException:
            await self.close()
            raise
        log.info("browser runs in worker pid=%d", os.getpid())

    def stop_taking(self) -> None:
        """The server is stopping: this process no longer takes the pool over."""
        if self._taking is not None:
            self._taking.cancel()

    async def close(self) -> None:
        if self._taking is not None:
            self._taking.cancel()
            await asyncio.gather(self._taking, return_exceptions=True)
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.address)
            if self._answering:  # others' captures under way end on the pool, in time
                await asyncio.wait(set(self._answering), timeout=self.grace)
            for task in list(self._answering):
                task.cancel()
            if self._answering:
                await asyncio.gather(*self._answering, return_exceptions=True)
        await self.pool.close()
        self.lock.release()

    async def capture(
        self, url: str, site: SiteSettings, profile: str = "desktop", shot: Shot | None = None
    ) -> CaptureResult:
        """:meth:`BrowserPool.capture`, on the pool of the holder."""
        started = time.monotonic()
        # The site's fields alone: what its properties cached stays in this process.
        try:
            answer = await self._asked(("capture", url, replace(site), profile, shot))
        except _NoHolder as exc:
            return CaptureResult.failed(url, f"browser unavailable: {exc}", started)
        except _HolderGone:
            log.warning("capture of %s crashed: the worker running the browser went away", url)
            return CaptureResult.failed(url, "crashed", started)
        assert isinstance(answer, CaptureResult)
        return answer

    async def probe(self, timeout: float = 15.0) -> str | None:
        """:meth:`BrowserPool.probe`, on the pool of the holder."""
        try:
            answer = await self._asked(("probe", timeout))
        except _NoHolder as exc:
            return f"browser unavailable: {exc}"
        except _HolderGone:
            return "browser unavailable: the worker running it went away"
        assert answer is None or isinstance(answer, str)
        return answer

    # ------------------------------------------------------------------ holding the pool

    async def _listen(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.address)  # a holder's before, which died
        self._server = await asyncio.start_unix_server(self._accepted, self.address)

    async def _hold_when_free(self) -> None:
        """Take the lock once it is free, listen, and launch the pool (a capture asked
        meanwhile waits for the launch, as the pool's own captures do)."""
        while True:
            while not self.lock.try_acquire():
                await asyncio.sleep(LOCK_POLL_SECONDS)
            try:
                await self._listen()
                break
            except OSError as exc:
                log.warning("worker pid=%d cannot listen for the browser's captures: %s",
                            os.getpid(), first_line(exc))
                self.lock.release()  # another worker may do better
                await asyncio.sleep(LOCK_POLL_SECONDS)
        try:
            await self.pool.start()
        except Exception as exc:
            log.warning("browser did not start in worker pid=%d: %s; each capture tries "
                        "again", os.getpid(), first_line(exc))
            return
        log.info("browser runs in worker pid=%d", os.getpid())

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A connection: its answer runs as a task of its own, known from now on to
        :meth:`close`."""
        task = asyncio.ensure_future(self._answer(reader, writer))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Run one asker's capture or probe on the pool and send the result; cancel it when
        the asker hangs up first."""
        work: asyncio.Future[Any] | None = None
        try:
            if not _sibling(writer):
                return
            request = await _received(reader)
            work = asyncio.ensure_future(self._run(request))
            hung_up = asyncio.ensure_future(reader.read(1))  # b"" or an error: it hung up
            try:
                await asyncio.wait({work, hung_up}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                hung_up.cancel()
                await asyncio.gather(hung_up, return_exceptions=True)
            if work.done():
                await _send(writer, ("ok", work.result()))
        except (_HolderGone, ConnectionError):
            pass
        except Exception as exc:  # the pool's fault, or a request it cannot take
            with contextlib.suppress(ConnectionError):
                await _send(writer, ("raised", f"{type(exc).__name__}: {first_line(exc)}"))
        finally:
            if work is not None and not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
            writer.close()

    async def _run(self, request: tuple[Any, ...]) -> Any:
        kind, *args = request
        if kind == "capture":
            url, site, profile, shot = args
            return await self.pool.capture(url, site, profile, shot)
        if kind == "probe":
            return await self.pool.probe(*args)
        raise ValueError(f"unknown request {kind!r}")

    # ------------------------------------------------------------------ asking the holder

    async def _asked(self, request: tuple[Any, ...]) -> Any:
        """The holder's answer to ``request``: this process's own pool's when it holds it."""
        deadline = time.monotonic() + HOLDER_WAIT
        while not self.holder:
            try:
                reader, writer = await asyncio.open_unix_connection(self.address)
            except OSError:  # none listens (yet): the holder died, stops, or is taking over
                if time.monotonic() >= deadline:
                    raise _NoHolder("no worker runs the browser") from None
                await asyncio.sleep(CONNECT_RETRY)
                continue
            try:
                if not _sibling(writer):
                    raise _HolderGone()
                await _send(writer, request)
                status, value = await _received(reader)
            except ConnectionError as exc:
                raise _HolderGone() from exc
            finally:
                writer.close()  # the holder cancels a capture this stopped waiting for
            if status == "raised":
                raise RuntimeError(value)
            return value
        return await self._run(request)


class _NoHolder(Exception):
    """No worker listens as the pool's holder."""


class _HolderGone(Exception):
    """The connection ended before a whole message, or its peer is not a sibling worker."""


class _Unpickler(pickle.Unpickler):
    """Unpickles what a request or an answer holds, and nothing else."""

    ALLOWED = {
        ("snapshotd.config.settings", "SiteSettings"),
        ("snapshotd.render.renderer", "CaptureResult"),
        ("snapshotd.render.renderer", "Shot"),
        ("builtins", "frozenset"),
        ("builtins", "set"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not a class a message holds")
        return super().find_class(module, name)


async def _send(writer: asyncio.StreamWriter, value: Any) -> None:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if len(body) > MAX_MESSAGE:
        raise ValueError(f"a message of {len(body)} bytes is over {MAX_MESSAGE}")
    writer.write(_LENGTH.pack(len(body)))
    writer.write(body)
    await writer.drain()


async def _received(reader: asyncio.StreamReader) -> Any:
    try:
        (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
        if length > MAX_MESSAGE:
            raise _HolderGone()
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise _HolderGone() from None
    try:
        return _Unpickler(io.BytesIO(body)).load()
    except Exception:
        raise _HolderGone() from None  # not a message of this serve's workers


def _sibling(writer: asyncio.StreamWriter) -> bool:
    """Whether the peer of a connection is a worker of this process's supervisor: the same
    user and the same parent process (Linux's ``SO_PEERCRED`` and /proc; where either is
    missing, the directory's mode alone keeps others out)."""
    sock = writer.get_extra_info("socket")
    option = getattr(socket, "SO_PEERCRED", None)
    if sock is None or option is None:
        return True
    pid, uid, _gid = struct.unpack("iII", sock.getsockopt(socket.SOL_SOCKET, option, 12))
    if uid != os.getuid():
        return False
    if not os.path.isdir("/proc"):
        return True
    return parent_of(pid) == os.getppid()

