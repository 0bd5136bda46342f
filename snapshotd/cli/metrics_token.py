"""``snapshotd metrics-token``: the read-only token for ``/_snapshotd/metrics``, kept in the
store as its digest, shown once when made."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from snapshotd.api import scrape_token
from snapshotd.cli.common import UserError, settings_of
from snapshotd.store import open_store


async def _metrics_token(db: str, rotate: bool, out: Any) -> int:
    store = open_store(db)
    await store.open()
    try:
        token = await scrape_token.make(store, rotate=rotate)
    finally:
        await store.close()
    if token is None:
        raise UserError(
            "a metrics token is kept already; --rotate makes a new one (the old one stops "
            "working within seconds)"
        )
    out.write(token + "\n")
    return 0


def cmd_metrics_token(args: argparse.Namespace) -> int:
    return asyncio.run(_metrics_token(settings_of(args).db, args.rotate, sys.stdout))
