"""A connection's writes of one turn of the event loop go out together
(``snapshotd.server.batched_writes``): over a real loopback connection, with the calls the transport
receives recorded."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from snapshotd.server.batched_writes import HELD_MAX, TurnWrites

pytestmark = pytest.mark.asyncio


class Recorded:
    """The real transport, with each write it is given noted as the list of its pieces."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.real = transport
        self.calls: list[list[bytes]] = []

    def write(self, data: bytes) -> None:
        self.calls.append([bytes(data)])
        self.real.write(data)

    def writelines(self, pieces: Any) -> None:
        pieces = [bytes(p) for p in pieces]
        self.calls.append(pieces)
        self.real.writelines(pieces)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


async def connection() -> tuple[TurnWrites, Recorded, socket.socket]:
    """TurnWrites over a real connection to a socket the test reads (or not)."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    recorded = Recorded(transport)  # type: ignore[arg-type]
    return TurnWrites(recorded, loop), recorded, theirs  # type: ignore[arg-type]


async def read_all(sock: socket.socket, until: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < until:
        piece = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 10)
        if not piece:
            break
        data += piece
    return data


async def next_turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_a_head_and_its_body_written_in_one_turn_go_out_in_one_call() -> None:
    writes, recorded, client = await connection()
    head, body = b"HTTP/1.1 200 OK\r\ncontent-length: 40960\r\n\r\n", b"x" * 40960
    writes.write(head)
    writes.write(body)
    assert recorded.calls == []  # not before the turn ends
    await next_turn()
    assert recorded.calls == [[head, body]]
    assert await read_all(client, len(head + body)) == head + body
    writes.write(b"the next answer")
    await next_turn()
    assert recorded.calls[1:] == [[b"the next answer"]]
    writes.close()
    await next_turn()
    client.close()


async def test_a_write_that_would_hold_too_much_goes_out_at_once_with_what_was_held() -> None:
    """So a client that reads nothing fills the transport's buffer piece by piece, which is
    what the server's flow control watches."""
    writes, recorded, client = await connection()
    writes.write(b"head")
    piece = b"z" * HELD_MAX
    sizes = []
    for _ in range(8):
        writes.write(piece)
        sizes.append(writes.get_write_buffer_size())
    assert recorded.calls == [[b"head", piece]] + [[piece]] * 7
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]  # nothing waits in TurnWrites
    await next_turn()
    assert len(recorded.calls) == 8
    writes.close()
    await next_turn()
    client.close()


async def test_closing_sends_what_is_held_first() -> None:
    writes, recorded, client = await connection()
    writes.write(b"last ")
    writes.write(b"words")
    writes.close()
    assert recorded.calls == [[b"last ", b"words"]]
    assert await read_all(client, 100) == b"last words"  # then the end of the stream
    await next_turn()
    client.close()


async def test_what_is_held_when_the_client_has_gone_is_dropped() -> None:
    writes, recorded, client = await connection()
    writes.write(b"never read")
    writes.transport.real.close()  # type: ignore[attr-defined]
    await next_turn()
    assert recorded.calls == []
    await next_turn()
    client.close()
