"""A person's throughput with the front-server recipes, beside the app alone, same run.

A person's request for a 40 KB page, six ways, each measured with wrk under the same load:

1. direct: to the app itself (a bare ASGI app on uvicorn answering the page from memory);
2. nginx: through docs/integrations/nginx.conf, which sends people straight to the app;
3. apache: through docs/integrations/apache.conf, likewise;
4. caddy: through docs/integrations/Caddyfile, likewise;
5. haproxy: through docs/integrations/haproxy.cfg, likewise;
6. snapshotd: through snapshotd's own pass-through (no front server).

Figures are requests per second and their ratio to direct, best of ``--runs``.

    python bench/bench_recipes.py [--duration 5] [--connections 32] [--runs 2]

Needs wrk, nginx, apache2, caddy and haproxy (Debian packages; ``make test`` installs the
servers). Every
server listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_proxy import Floor, Snapshotd, page_40k, wrk  # noqa: E402

from tests.front import apache, caddy, free_port, haproxy, nginx, recipe  # noqa: E402

PERSON = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    for tool in ("wrk", "nginx", "apache2", "caddy", "haproxy"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            print(f"{tool} not found: apt-get install {tool}", file=sys.stderr)
            return 2
    print(f"cpu: {os.cpu_count()} cores; wrk -t1 -c{args.connections} -d{args.duration}s, "
          f"best of {args.runs}; a person asking for a 40 KB page\n")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        page = Path(tmp) / "page.html"
        page.write_text(page_40k())
        Path(f"{page}.gz").write_bytes(gzip.compress(page.read_bytes()))
        app = Floor(Path(tmp), page, workers=1)
        stack.callback(app.stop)
        snap = Snapshotd(Path(tmp), f"{tmp}/snap.db", app.url, workers=1)
        stack.callback(snap.stop)
        slots = {
            "SERVER_NAME": "shop.test",
            "APP": app.url.split("://")[1],
            "SNAPSHOTD": snap.url.split("://")[1],
        }
        nginx_port, apache_port = free_port(), free_port()
        stack.enter_context(
            nginx(recipe("nginx.conf", LISTEN=f"127.0.0.1:{nginx_port}", **slots), nginx_port)
        )
        vhost = recipe("apache.conf", LISTEN=f"127.0.0.1:{apache_port}", **slots)
        stack.enter_context(apache(f"Listen 127.0.0.1:{apache_port}\n{vhost}", apache_port))
        caddy_port, haproxy_port = free_port(), free_port()
        site = recipe("Caddyfile", LISTEN=f"http://shop.test:{caddy_port}", **slots)
        stack.enter_context(caddy(site, caddy_port))
        sections = recipe("haproxy.cfg", LISTEN=f"127.0.0.1:{haproxy_port}", **slots)
        stack.enter_context(haproxy(sections, haproxy_port))
        targets = {
            "direct": app.url,
            "nginx": f"http://127.0.0.1:{nginx_port}",
            "apache": f"http://127.0.0.1:{apache_port}",
            "caddy": f"http://127.0.0.1:{caddy_port}",
            "haproxy": f"http://127.0.0.1:{haproxy_port}",
            "snapshotd": snap.url,
        }
        person = {"User-Agent": PERSON, "Host": "shop.test"}
        figures = {}
        for name, base in targets.items():
            rps, p50, _ = max(
                wrk(base + "/page", args.duration, args.connections, person, ())
                for _ in range(args.runs)
            )
            figures[name] = rps
            ratio = rps / figures["direct"]
            print(f"{name:10} {rps:9.0f} req/s  p50 {p50:>8}  ratio to direct {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
