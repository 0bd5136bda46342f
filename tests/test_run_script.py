"""`make run`'s script (scripts/run.sh) as a newcomer runs it with no ORIGIN: the example SPA
and snapshotd in front of it, on 127.0.0.1, with another program already on the example's
port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from tests.chromium import require_chromium
from tests.front import free_port

ROOT = Path(__file__).resolve().parent.parent


class _Stranger(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"another program's page"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_run_takes_another_port_for_the_example_when_its_own_is_taken(tmp_path) -> None:
    chromium = require_chromium()
    stranger = ThreadingHTTPServer(("127.0.0.1", 0), _Stranger)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    taken = stranger.server_address[1]
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "EXAMPLE_PORT": str(taken),
        "SNAPSHOTD_CHROMIUM": chromium, "SNAPSHOTD_DB": str(tmp_path / "snap.db"),
    }
    run = subprocess.Popen(["sh", str(ROOT / "scripts" / "run.sh"), "", str(port)],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        page = None
        for _ in range(300):
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/items/3", trust_env=False,
                                 timeout=5)
                break
            except httpx.TransportError:
                assert run.poll() is None, "make run stopped"
                time.sleep(0.2)
        assert page is not None and page.status_code == 200
        assert "another program" not in page.text
        assert '<script src="/app.js"' in page.text, page.text[:300]
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        out, _ = run.communicate(timeout=30)
        stranger.shutdown()
        stranger.server_close()
    assert f"port {taken} is taken by another program" in out, out
    assert f"example SPA on http://127.0.0.1:{taken}\n" not in out
