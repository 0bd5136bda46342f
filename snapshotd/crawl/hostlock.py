"""The lock the worker processes of one ``serve`` contend for; its holder runs the crawler.

An ``fcntl`` lock on a file the supervisor made for this ``serve``: the kernel lets it go
when its holder exits, however it ends, so another worker takes it at its next try.

Invariants:
- at most one process holds the lock of a file at a time;
- each try opens the file anew in the trying process, so workers forked from one parent
  never share the lock by inheritance.
"""

from __future__ import annotations

import contextlib
import fcntl
import os


class HostLock:
    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; never waits."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
