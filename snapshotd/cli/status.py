"""``snapshotd status``: the paths of each site per state."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from snapshotd.cli.common import existing_db
from snapshotd.store import STATES, open_store


async def _status(db: str, out: Any) -> int:
    store = open_store(db)
    await store.open()
    try:
        counts = await store.counts()
    finally:
        await store.close()
    width = max([len("site"), *(len(s) for s in counts)])
    out.write(f"{'site':<{width}}  " + "  ".join(f"{s:>10}" for s in (*STATES, "total")) + "\n")
    for site in sorted(counts):
        row = [counts[site].get(s, 0) for s in STATES]
        out.write(f"{site:<{width}}  " + "  ".join(f"{n:>10}" for n in (*row, sum(row))) + "\n")
    if not counts:
        out.write("(no paths yet)\n")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    return asyncio.run(_status(existing_db(args), sys.stdout))
