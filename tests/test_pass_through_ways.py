"""The two ways a request passes through, a relay (callbacks) and the ASGI way
(``Upstream.forward``), ask the origin alike: what they decide is decided once, in
:mod:`snapshotd.proxy.passthrough`. Raw loopback origins record what they are asked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from snapshotd.net.http1 import Pool
from snapshotd.proxy.passthrough import Upstream
from snapshotd.proxy.relay import Relay
from tests.test_http1 import call, never, ok
from tests.test_relay import SCOPE, Client


class Recording:
    """An origin that answers every request ``ok`` and keeps each request's head."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.open = 0  # connections

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            while True:
                self.heads.append(await reader.readuntil(b"\r\n\r\n"))
                writer.write(ok())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


def framing(head: bytes) -> list[bytes]:
    """The framing lines of a request head."""
    return sorted(
        line.lower() for line in head.split(b"\r\n")
        if line.lower().startswith((b"content-length:", b"transfer-encoding:"))
    )


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "POST", "DELETE", "PUT"])
async def test_a_request_without_a_body_is_framed_alike_by_a_relay_and_the_asgi_way(
    method: str,
) -> None:
    """A request without a body, relayed and forwarded the ASGI way: the origin is told the
    same about its body (``Content-Length: 0`` for a method that may have one)."""
    origin = Recording()
    server = await asyncio.start_server(origin.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server:
        pool = Pool()
        client = Client()
        Relay(pool, url, method, b"/", SCOPE).start(client)
        await asyncio.wait_for(client.done.wait(), 5)
        upstream = Upstream()
        status, _ = await asyncio.wait_for(call(upstream, url, never, method=method), 5)
        pool.close()
        await upstream.close()
        for _ in range(100):  # the origin sees its connections closed
            if not origin.open:
                break
            await asyncio.sleep(0.01)
    assert client.got[0] == status == 200
    relayed, forwarded = origin.heads
    assert framing(relayed) == framing(forwarded)
    expected: list[Any] = [] if method in ("GET", "HEAD", "OPTIONS") else [b"content-length: 0"]
    assert framing(forwarded) == expected
