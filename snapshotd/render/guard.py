"""The egress guard: a SOCKS5 proxy on loopback through which one capture's browser context
reaches the network.

Chromium's request interception never sees the hops of an HTTP redirect, and a name can
resolve to a private address; judging URLs is therefore not enough. Every TCP connection the
context opens (documents, subresources, redirect hops, workers, WebSockets) goes through this
proxy, which resolves the name and judges each address (:func:`snapshotd.net.egress.judge`), and
connects to the address it judged, so a name cannot be re-resolved elsewhere in between.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import struct

from snapshotd.net.egress import Resolver, judge, resolve_host

__all__ = ["EgressGuard", "Resolver"]

log = logging.getLogger("snapshotd.render")

_CONNECT_TIMEOUT = 10.0
_REP_OK, _REP_FAIL, _REP_NOT_ALLOWED, _REP_HOST_UNREACHABLE, _REP_REFUSED = 0, 1, 2, 4, 5


class EgressGuard:
    """A SOCKS5 server on 127.0.0.1 allowing what the policy allows for ``origin``."""

    def __init__(self, origin: str = "", *, resolve: Resolver | None = None) -> None:
        self.origin = origin
        self.refused: list[str] = []
        # "host:port: why" for each judged address that could not be connected to.
        self.unreachable: list[str] = []
        self._resolve = resolve or resolve_host
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    @property
    def proxy_server(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"socks5://127.0.0.1:{port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Closing the sockets ends every relay; cancelling is the fallback for a stuck one.
        for writer in list(self._writers):
            writer.close()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=1.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def drop_connections(self) -> None:
        """Close every open tunnel (the listener stays)."""
        for writer in list(self._writers):
            writer.close()

    async def judge(self, host: str, port: int) -> tuple[str | None, list[str]]:
        """(reason refused or None, addresses to connect to) for ``host:port``."""
        return await judge(host, port, self.origin, self._resolve)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            target = await self._handshake(reader, writer)
            if target is None:
                return
            host, port = target
            reason, addresses = await self.judge(host, port)
            if reason is not None:
                self.refused.append(reason)
                log.info("refused %s:%s: %s", host, port, reason)
                await self._reply(writer, _REP_NOT_ALLOWED)
                return
            connected = await self._connect(addresses, port)
            if isinstance(connected, str):
                self.unreachable.append(f"{host}:{port}: {connected}")
                await self._reply(writer, _REP_REFUSED)
                return
            up_reader, upstream = connected
            self._writers.add(upstream)
            await self._reply(writer, _REP_OK)
            await asyncio.gather(_pump(reader, upstream), _pump(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            # This task is the connection's top level: ending it is all cancelling asks.
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._writers.discard(w)
                    w.close()
            self._tasks.discard(task)

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, int] | None:
        version, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        if version != 5 or 0 not in methods:
            writer.write(b"\x05\xff")
            return None
        writer.write(b"\x05\x00")
        version, command, _, kind = await reader.readexactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 3:
            (length,) = await reader.readexactly(1)
            host = (await reader.readexactly(length)).decode("idna")
        elif kind == 4:
            host = f"[{ipaddress.IPv6Address(await reader.readexactly(16))}]"
        else:
            await self._reply(writer, _REP_FAIL)
            return None
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if command != 1:  # only CONNECT: no BIND, no UDP ASSOCIATE
            self.refused.append(f"socks command {command}")
            await self._reply(writer, _REP_NOT_ALLOWED)
            return None
        return host, port

    async def _connect(
        self, addresses: list[str], port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | str:
        """A connection to the first address that answers; else what the last one did."""
        why = "no address"
        for address in addresses:
            try:
                async with asyncio.timeout(_CONNECT_TIMEOUT):
                    r, w = await asyncio.open_connection(address.strip("[]"), port)
                return r, w
            except TimeoutError:
                why = "connection timed out"
            except OSError as exc:
                why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        return why

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, code: int) -> None:
        writer.write(bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0]))
        await writer.drain()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction until its end, then end the other side's writing too. Stops when
    the other side was closed meanwhile (uvloop, unlike asyncio, raises on writing to it)."""
    try:
        while data := await reader.read(65536):
            if writer.is_closing():
                return
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof() and not writer.is_closing():
            writer.write_eof()
    except OSError:
        writer.close()
