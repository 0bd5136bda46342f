"""What snapshotd.middleware costs a person's request, beside the same app without it, same run.

The app is bench_proxy's floor (a bare ASGI app on uvicorn answering a 40 KB page from
memory), served twice: as it is, and wrapped in ``SnapshotdASGI`` (pointed at a snapshotd
that never gets asked: a person's request goes straight to the app after the bot check).
Each is measured with wrk under the same load; figures are requests per second and their
ratio to the bare app, best of ``--runs``, and the server's CPU per request.

    python bench/bench_middleware.py [--duration 5] [--connections 32] [--runs 2]

Needs wrk. Every server listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_proxy import FLOOR_APP, page_40k, wait_answering, wrk  # noqa: E402

from tests.front import free_port  # noqa: E402

PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"
WRAPPED = FLOOR_APP + """
from snapshotd.middleware import SnapshotdASGI

app = SnapshotdASGI(app, "http://127.0.0.1:9", token="unused")
"""


def serve(tmp: Path, module: str, source: str, page: Path) -> tuple[subprocess.Popen, str]:
    (tmp / f"{module}.py").write_text(source)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", f"{module}:app", "--app-dir", str(tmp),
         "--port", str(port), "--loop", "uvloop", "--http", "httptools", "--no-access-log",
         "--log-level", "warning", "--lifespan", "off"],
        env={**os.environ, "FLOOR_PAGE": str(page), "PYTHONPATH": str(ROOT)},
    )
    url = f"http://127.0.0.1:{port}"
    wait_answering(url + "/page", proc, module)
    return proc, url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2
    print(f"cpu: {os.cpu_count()} cores; wrk -t1 -c{args.connections} -d{args.duration}s, "
          f"best of {args.runs}; a person asking for a 40 KB page\n")
    procs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / "page.html"
            page.write_text(page_40k())
            Path(f"{page}.gz").write_bytes(gzip.compress(page.read_bytes()))
            servers = {}
            for name, module, source in (("bare app", "floor", FLOOR_APP),
                                         ("middleware", "wrapped", WRAPPED)):
                proc, url = serve(Path(tmp), module, source, page)
                procs.append(proc)
                servers[name] = (proc, url)
            figures = {}
            for name, (proc, url) in servers.items():
                rps, p50, cpu = max(
                    wrk(url + "/page", args.duration, args.connections,
                        {"User-Agent": PERSON, "Host": "shop.test"}, (proc.pid,))
                    for _ in range(args.runs)
                )
                figures[name] = rps
                print(f"{name:11} {rps:9.0f} req/s  p50 {p50:>8}  "
                      f"cpu {cpu:6.1f} us/req  ratio to bare {rps / figures['bare app']:.2f}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
