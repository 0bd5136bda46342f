#!/usr/bin/env python3
"""Stop a process and every process started under it, by their ids, never by a name (other
snapshotd processes may run on this host): ``python3 scripts/stop-tree.py PID``.

The tree is read from /proc before anything is stopped (a child whose parent dies is handed
to init and would be lost); each process gets SIGTERM, then, 2 s later, SIGKILL if it is
still there.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def tree(root: int) -> set[int]:
    """``root`` and its descendants, as /proc shows them now."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found = {root}
    while True:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        if not more:
            return found & (set(parents) | {root})
        found |= more


def stop(root: int) -> None:
    pids = tree(root)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(2)


if __name__ == "__main__":
    stop(int(sys.argv[1]))
