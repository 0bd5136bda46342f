"""``snapshotd report``: one row per path of the store, CSV or JSON lines."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
from typing import Any

from snapshotd.cli.common import existing_db
from snapshotd.store import PathRecord, open_store
from snapshotd.store.interface import iso_time

REPORT_COLUMNS = (
    "site", "path", "state", "priority", "status", "captured_at", "expires_at", "hops",
    "duplicate_of", "error", "profiles", "readiness_limit", "not_found",
)


def report_row(r: PathRecord, profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    """A path's report row; ``profiles``: the device profiles it holds a snapshot of its own
    for, space-separated, its own snapshot's first."""
    return {
        "site": r.site,
        "path": r.path,
        "state": r.state,
        "priority": r.priority,
        "status": r.status,
        "captured_at": iso_time(r.captured_at) or "",
        "expires_at": iso_time(r.expires_at) or "",
        "hops": r.hops,
        "duplicate_of": r.duplicate_of,
        "error": r.error,
        "profiles": " ".join(profiles),
        "readiness_limit": r.readiness_limit,
        "not_found": r.not_found,
    }


async def _report(db: str, fmt: str, out: Any) -> int:
    store = open_store(db)
    await store.open()
    try:
        writer = csv.DictWriter(out, fieldnames=REPORT_COLUMNS, lineterminator="\n")
        if fmt == "csv":
            writer.writeheader()
        batch: list[PathRecord] = []

        async def write() -> None:
            profiles: dict[tuple[str, str], tuple[str, ...]] = {}
            for site in {r.site for r in batch}:
                own = await store.own_profiles(site, [r.path for r in batch if r.site == site])
                profiles.update({(site, path): p for path, p in own.items()})
            for record in batch:
                row = report_row(record, profiles.get((record.site, record.path), ()))
                if fmt == "csv":
                    writer.writerow({k: "" if v is None else v for k, v in row.items()})
                else:
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
            batch.clear()

        async for record in store.iter_paths():
            batch.append(record)
            if len(batch) >= 500:
                await write()
        await write()
    finally:
        await store.close()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    return asyncio.run(_report(existing_db(args), args.format, sys.stdout))
