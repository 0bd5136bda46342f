"""Child processes as Linux's /proc shows them: who runs under us, and how much memory; the
browsers among them, as Prometheus metrics (:class:`BrowserProcesses`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["BrowserProcesses", "Proc", "browsers", "descendants", "parent_of", "rss_bytes"]


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    cmdline: str


def _read(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return None
    # The command name in parentheses may itself hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    return Proc(pid=pid, ppid=int(fields[1]), state=fields[0], cmdline=cmdline.strip())


def parent_of(pid: int) -> int | None:
    """The parent of process ``pid``; None when /proc does not show it."""
    proc = _read(pid)
    return None if proc is None else proc.ppid


def _all() -> list[Proc]:
    procs = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            proc = _read(int(entry))
            if proc is not None:
                procs.append(proc)
    return procs


def descendants(pid: int | None = None) -> list[Proc]:
    """Every process below ``pid`` (default: this one); empty where /proc is missing."""
    root = os.getpid() if pid is None else pid
    if not os.path.isdir("/proc"):
        return []
    children: dict[int, list[Proc]] = {}
    for proc in _all():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child.pid)
    return found


def rss_bytes(pids: list[int]) -> int:
    """The summed resident set size of ``pids`` (those that still exist)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
    return total


def browsers(root: int | None = None) -> list[Proc]:
    """The Chromium processes below ``root`` (its browsers, renderers, GPU and utility
    processes): those whose program's name holds ``chrom`` or ``headless_shell``."""
    def is_browser(proc: Proc) -> bool:
        program = os.path.basename(proc.cmdline.split(" ", 1)[0])
        return "chrom" in program or "headless_shell" in program

    return [p for p in descendants(root) if is_browser(p)]


class BrowserProcesses(Collector):
    """The browser pool's processes and their memory, read from /proc at each scrape, below
    ``root`` (the ``serve`` whose workers run them; default: this process)."""

    def __init__(self, root: int | None = None) -> None:
        self.root = root

    def collect(self) -> Iterator[GaugeMetricFamily]:
        found = browsers(self.root)
        yield GaugeMetricFamily(
            "snapshotd_browser_processes", "Chromium processes of the browser pool",
            value=len(found),
        )
        yield GaugeMetricFamily(
            "snapshotd_browser_memory_bytes",
            "Resident memory of the browser pool's Chromium processes, summed",
            value=rss_bytes([p.pid for p in found]),
        )
