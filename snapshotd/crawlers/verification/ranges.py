"""Published address ranges of crawler families: read, looked up, and loaded again on a
schedule.

Invariants:
- a list is the operators' JSON (``{"prefixes": [{"ipv4Prefix": ...}, {"ipv6Prefix": ...}]}``,
  the format Google, Bing, Apple and OpenAI publish) or plain text (one address or network a
  line, ``#`` comments), at most ``MAX_BYTES``; a list that cannot be read, or holds no
  range, leaves the family's ranges as they were (and is logged), so a failed reload never
  unverifies a crawler;
- a URL is fetched through :class:`snapshotd.net.fetch.Fetcher`, judged by the address policy
  (public addresses only, unless an ``origin`` is handed in); a file is read from disk;
- start-up waits for the first load at most ``START_WAIT`` seconds; until a family's lists
  are loaded its crawlers are judged by DNS, or are unverifiable;
- a look-up is a binary search over the family's merged intervals: no I/O, no await.
"""

from __future__ import annotations

import asyncio
import bisect
import ipaddress
import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx

from snapshotd.http_text.urls import redact
from snapshotd.net.fetch import Fetcher, describe, read_body

__all__ = ["MAX_BYTES", "RangeLists", "Ranges", "parse_ranges"]

log = logging.getLogger("snapshotd.verify")
MAX_BYTES = 4 * 2**20
START_WAIT = 5.0

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_ranges(text: str) -> list[Network]:
    """The networks of a published list (JSON or plain text); ValueError when it is
    neither or holds an entry that is no network."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        data = json.loads(stripped)
        prefixes = data.get("prefixes") if isinstance(data, dict) else None
        if not isinstance(prefixes, list):
            raise ValueError("JSON without a prefixes list")
        values = []
        for entry in prefixes:
            if not isinstance(entry, dict):
                raise ValueError("a prefixes entry is no object")
            values += [v for k, v in entry.items() if k in ("ipv4Prefix", "ipv6Prefix")]
    else:
        values = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    out = []
    for value in values:
        if not value:
            continue
        if not isinstance(value, str):
            raise ValueError(f"{value!r:.40} is no network")
        out.append(ipaddress.ip_network(value, strict=False))
    return out


class Ranges:
    """Networks merged into sorted intervals per IP version, for look-ups."""

    def __init__(self, networks: Iterable[Network]) -> None:
        spans: dict[int, list[tuple[int, int]]] = {4: [], 6: []}
        for n in networks:
            spans[n.version].append((int(n.network_address), int(n.broadcast_address)))
        self._starts: dict[int, list[int]] = {}
        self._ends: dict[int, list[int]] = {}
        self.count = 0
        for version, items in spans.items():
            merged: list[list[int]] = []
            for start, end in sorted(items):
                if merged and start <= merged[-1][1] + 1:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([start, end])
            self._starts[version] = [s for s, _ in merged]
            self._ends[version] = [e for _, e in merged]
            self.count += len(items)

    def __contains__(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        starts = self._starts[address.version]
        value = int(address)
        i = bisect.bisect_right(starts, value) - 1
        return i >= 0 and value <= self._ends[address.version][i]


class RangeLists:
    """The range lists of ``sources`` ((family, source) pairs), loaded at :meth:`start` and
    every ``every`` seconds after, until :meth:`close`."""

    def __init__(
        self,
        sources: Sequence[tuple[str, str]],
        *,
        fetcher: Fetcher | None = None,
        every: float = 86400.0,
        origin: str = "",
    ) -> None:
        self.sources = list(sources)
        self.every = every
        self.origin = origin  # what a URL's fetch is judged with ("": public addresses only)
        self._fetcher = fetcher
        self._own_fetcher = fetcher is None
        self._networks: dict[tuple[str, str], list[Network]] = {}
        self.by_family: dict[str, Ranges] = {}
        self._task: asyncio.Task[None] | None = None
        self.loads = 0  # completed rounds of loading, for tests and the log

    def families(self) -> set[str]:
        """The families with ranges loaded."""
        return {f for f, r in self.by_family.items() if r.count}

    def lookup(
        self, family: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address
    ) -> bool | None:
        """Whether ``address`` is in the family's ranges; None when none are loaded."""
        ranges = self.by_family.get(family)
        if ranges is None or not ranges.count:
            return None
        return address in ranges

    async def start(self) -> None:
        """Load the lists now and on the schedule; start-up waits for the first load at most
        ``START_WAIT`` seconds (a slow list goes on loading meanwhile)."""
        if not self.sources:
            return
        first = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._reload(first), name="bot-ranges")
        await asyncio.wait({first}, timeout=START_WAIT)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._own_fetcher and self._fetcher is not None:
            await self._fetcher.aclose()
            self._fetcher = None

    async def _reload(self, first: asyncio.Future[None]) -> None:
        await self.load()
        first.set_result(None)
        while True:
            await asyncio.sleep(self.every)
            await self.load()

    async def load(self) -> None:
        """Load every list once; a list that fails keeps what it had."""
        for family, source in self.sources:
            try:
                text = await self._read(source)
                networks = parse_ranges(text)
                if not networks:
                    raise ValueError("no range in it")
            except (OSError, ValueError, UnicodeDecodeError, httpx.HTTPError) as exc:
                why = describe(exc) if isinstance(exc, httpx.HTTPError) else str(exc)[:200]
                log.warning(
                    "bot ranges not loaded family=%s source=%s error=%s",
                    family, redact(source), why,
                )
                continue
            self._networks[(family, source)] = networks
        merged: dict[str, list[Network]] = {}
        for (family, _source), networks in self._networks.items():
            merged.setdefault(family, []).extend(networks)
        self.by_family = {family: Ranges(networks) for family, networks in merged.items()}
        self.loads += 1
        log.info(
            "bot ranges loaded %s",
            " ".join(f"{f}={r.count}" for f, r in sorted(self.by_family.items())) or "none",
        )

    async def _read(self, source: str) -> str:
        if source.startswith("/"):
            data = await asyncio.to_thread(_read_file, source)
        else:
            if self._fetcher is None:
                self._fetcher = Fetcher(headers={"X-Snapshotd": "1"})
            async with self._fetcher.stream(source, origin=self.origin) as response:
                if response.status_code != 200:
                    raise ValueError(f"status {response.status_code}")
                data, more = await read_body(response, MAX_BYTES)
                if more:
                    raise ValueError(f"larger than {MAX_BYTES} bytes")
        return data.decode("utf-8")


def _read_file(path: str) -> bytes:
    with Path(path).open("rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes")
    return data
