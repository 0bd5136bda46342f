"""What read-your-write costs an API call: the same calls with the sites read fresh before
each (``snapshotd.api.fresh``, as served) and without (the registry as last polled), in the
same run, on one real SQLite file, as a ratio.

    python bench/bench_api_fresh.py
    python bench/bench_api_fresh.py --sites 200 --calls 2000

Each call is ``GET /_snapshotd/api/v1/sites/{site}/paths?limit=1`` on a kept-alive loopback
connection to uvicorn (one process), one at a time, then 8 at once (concurrent calls share
one read).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from snapshotd.config.settings import Settings, SiteSettings  # noqa: E402
from snapshotd.server.app import create_app  # noqa: E402
from snapshotd.sites.registry import SiteRegistry  # noqa: E402
from tests.servers import serve_asgi  # noqa: E402

TOKEN = "bench-token"


async def calls(base: str, n: int, parallel: int) -> float:
    """Calls per second for ``n`` calls, ``parallel`` at a time."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, trust_env=False) as client:
        await client.get("/_snapshotd/api/v1/sites/s0/paths", params={"limit": 1})
        started = time.perf_counter()

        async def one(i: int) -> None:
            r = await client.get(f"/_snapshotd/api/v1/sites/s{i % 5}/paths", params={"limit": 1})
            assert r.status_code == 200, r.text

        for start in range(0, n, parallel):
            await asyncio.gather(*(one(i) for i in range(start, min(start + parallel, n))))
        return n / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sites", type=int, default=50)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    fresh = SiteRegistry.fresh

    async def polled(self: SiteRegistry) -> None:  # the baseline: as last polled
        return None

    with tempfile.TemporaryDirectory() as d:
        sites = tuple(
            SiteSettings(name=f"s{i}", origin="http://127.0.0.1:9", seeds=())
            for i in range(args.sites)
        )
        settings = Settings(db=f"{d}/b.db", api_tokens=(TOKEN,), sites=sites)
        with serve_asgi(create_app(settings, crawler=False)) as base:
            for parallel in (1, 8):
                rates: dict[str, list[float]] = {"fresh": [], "polled": []}
                for _ in range(args.runs):
                    for name, method in (("fresh", fresh), ("polled", polled)):
                        SiteRegistry.fresh = method  # type: ignore[method-assign]
                        rates[name].append(asyncio.run(calls(base, args.calls, parallel)))
                SiteRegistry.fresh = fresh  # type: ignore[method-assign]
                f, p = (statistics.median(rates[k]) for k in ("fresh", "polled"))
                print(
                    f"{args.sites} sites, {parallel} at a time: fresh {f:.0f} calls/s, "
                    f"polled {p:.0f} calls/s, fresh/polled {f / p:.2f}"
                )


if __name__ == "__main__":
    main()
