"""A connection's writes of one turn of the event loop go out together, in one system call.

uvicorn writes a response's head to the socket as soon as the application starts the
response, then each body message as it comes: two system calls, and on a local network two
wakeups of the client, for the smallest answer. serve's HTTP protocol
(:class:`snapshotd.server.protocol.HttpProtocol`) wraps its transport in :class:`TurnWrites`, which
keeps a connection's writes until the end of the event loop's turn and sends them in one
``writelines`` (one ``writev``). Measured on a cache hit of a 40 KB page (docs/SCALE.md):
the server's CPU per request falls by about a fifth, more than half of that the kernel's.

Invariants:
- bytes go out in the order they were written, and none later than the turn's end;
- fewer than :data:`HELD_MAX` bytes are held: a write that would hold more goes out at once,
  with what was held before it, so a body sent piece by piece still meets the transport's
  flow control after each large piece (a slow client holds back the sender);
- closing the transport, or ending its writing side, sends what is held first; what is held
  when the client has gone is dropped, as the transport would drop it.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["HELD_MAX", "TurnWrites"]

# A response head and a page of the size most snapshots are, or a piece of a larger body.
HELD_MAX = 64 * 2**10


class TurnWrites:
    """A transport whose writes wait for the end of the loop's turn (see the module)."""

    __slots__ = ("_held", "_loop", "_size", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        size = self._size + len(data)
        if size >= HELD_MAX:
            held, self._held, self._size = self._held, [], 0
            if held:
                held.append(data)
                self.transport.writelines(held)
            else:
                self.transport.write(data)
            return
        if not self._held:
            self._loop.call_soon(self._flush)
        self._held.append(data)
        self._size = size

    def _flush(self) -> None:
        held, self._held, self._size = self._held, [], 0
        if held and not self.transport.is_closing():
            self.transport.writelines(held)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self._flush()
        self.transport.close()

    def write_eof(self) -> None:
        self._flush()
        self.transport.write_eof()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)

