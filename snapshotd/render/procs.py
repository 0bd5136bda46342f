"""Child processes as Linux's /proc shows them: who runs under us, and how much memory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Proc", "descendants", "rss_bytes"]


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
