"""Operations against a real snapshotd (uvicorn, a real SQLite file, real Chromium, the
example SPA as its origin): the metrics token kept in the store, across a restart and a
rotation; the Grafana dashboard's queries against a real scrape; the readiness probe while
Chromium works, after it has crashed, and while it cannot start.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from examples.spa.app import create_app as create_spa
from snapshotd.api.scrape_token import REREAD
from snapshotd.cli.parser import main
from snapshotd.config.loading import load_settings
from snapshotd.config.settings import BrowserSettings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.servers import serve_asgi

pytestmark = pytest.mark.browser

TOKEN = "operations-api-token"
BOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "snapshotd.json"
# Labels Prometheus adds to every series it scrapes.
SCRAPE_LABELS = {"job", "instance"}


@contextmanager
def snapshotd(db: str, spa: str, chromium: str) -> Iterator[str]:
    settings = load_settings(overrides={"origin": spa, "db": db, "miss_wait": 15.0}, env={})
    browser = BrowserSettings(
        concurrency=1, executable=chromium, javascript_timeout=0.3, render_timeout=15
    )
    settings = replace(settings, api_tokens=(TOKEN,), browser=browser)
    with serve_asgi(create_app(settings, crawler=False)) as base:
        yield base


def metrics_token(db: str, *more: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["metrics-token", "--db", db, *more]) == 0
    return out.getvalue().strip()


def scrape(base: str, token: str) -> httpx.Response:
    return httpx.get(f"{base}/_snapshotd/metrics", trust_env=False,
                     headers={"Authorization": f"Bearer {token}"})


def test_the_metrics_token_is_kept_across_restarts_opens_only_metrics_and_rotates(
    tmp_path, capsys
) -> None:
    chromium = require_chromium()
    db = str(tmp_path / "snap.db")
    token = metrics_token(db)
    assert len(token) >= 40
    # Asked again, no second token is made: it was shown once.
    assert main(["metrics-token", "--db", db]) == 2
    assert "kept already" in capsys.readouterr().err
    with serve_asgi(create_spa()) as spa:
        with snapshotd(db, spa, chromium) as base:
            r = scrape(base, token)
            assert r.status_code == 200 and "snapshotd_requests_total" in r.text
            for path in ("/_snapshotd/api/v1/sites", "/_snapshotd/api/v1/stats",
                         "/_snapshotd/api/openapi.json"):
                assert httpx.get(base + path, trust_env=False, headers={
                    "Authorization": f"Bearer {token}"}).status_code == 401, path
            r = httpx.post(f"{base}/_snapshotd/api/v1/sites/default/paths", trust_env=False,
                           json={"paths": ["/"]}, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 401
            assert scrape(base, "not-the-token").status_code == 401
        # A restart on the same store: the same token still scrapes.
        with snapshotd(db, spa, chromium) as base:
            assert scrape(base, token).status_code == 200
            rotated = metrics_token(db, "--rotate")
            assert rotated != token
            time.sleep(REREAD + 0.2)  # every process reads the kept digest again by then
            assert scrape(base, token).status_code == 401
            assert scrape(base, rotated).status_code == 200


def test_the_store_keeps_a_digest_of_the_metrics_token_not_the_token(tmp_path) -> None:
    import sqlite3

    db = str(tmp_path / "snap.db")
    token = metrics_token(db)
    with sqlite3.connect(db) as conn:
        kept = [v for (v,) in conn.execute("SELECT value FROM meta")]
    assert kept and token not in "".join(kept)


# --- The Grafana dashboard ------------------------------------------------------------------


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def exposed(text: str) -> dict[str, set[str]]:
    """The sample names of an exposition, each with the label names it carries."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?", line)
        assert m is not None, line
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
        found.setdefault(m.group(1), set()).update(labels)
    return found


def test_every_metric_and_label_the_dashboard_queries_is_exposed(tmp_path) -> None:
    chromium = require_chromium()
    db = str(tmp_path / "snap.db")
    with serve_asgi(create_spa()) as spa, snapshotd(db, spa, chromium) as base:
        # Some traffic, so the labelled series exist: a capture, a hit, a person.
        for ua in (BOT, BOT, "Mozilla/5.0 (X11; Linux x86_64) Chrome/120"):
            httpx.get(f"{base}/items/2", headers={"User-Agent": ua}, timeout=30,
                      trust_env=False)
        r = scrape(base, TOKEN)
        assert r.status_code == 200
        series = exposed(r.text)
    queries = dashboard_queries()
    assert len(queries) >= 10
    for expr in queries:
        metrics = set(re.findall(r"\b(?:snapshotd|process)_[a-z_]+\b", expr))
        assert metrics, f"queries no snapshotd or process metric: {expr}"
        labels: set[str] = set()
        for metric in metrics:
            assert metric in series, f"{metric} is not exposed (queried by {expr})"
            labels |= series[metric]
        # Labels in selectors, `by (...)`, and label_values(..., label).
        used = set(re.findall(r'([a-zA-Z_]+)\s*(?:=~|!=|!~|=)\s*"', expr))
        for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
            used |= {g.strip() for g in group.split(",") if g.strip()}
        used |= set(re.findall(r"label_values\([^,]+,\s*([a-zA-Z_]+)\)", expr))
        missing = used - labels - SCRAPE_LABELS
        assert not missing, f"{sorted(missing)} not on {sorted(metrics)}: {expr}"


def promql_errors(exprs: list[str]) -> dict[str, list[str]]:
    """Each expression's syntax errors, by Prometheus's own PromQL grammar (tests/deploy)."""
    deploy = Path(__file__).parent / "deploy"
    node = shutil.which("node")
    if node is None or not (deploy / "node_modules" / "@prometheus-io" / "lezer-promql").is_dir():
        missing = f"node or npm packages are missing: run npm ci --prefix {deploy}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    done = subprocess.run([node, str(deploy / "promql.js"), json.dumps(exprs)],
                          capture_output=True, text=True, timeout=60, check=True)
    return {r["expr"]: r["errors"] for r in json.loads(done.stdout)}


def as_promql(expr: str) -> str:
    """A dashboard query as Prometheus gets it: Grafana's variables filled in, and
    label_values(selector, label) as its selector."""
    expr = expr.replace("$__rate_interval", "5m")
    values = re.fullmatch(r"label_values\((.*),\s*[a-zA-Z_]+\)", expr)
    return values.group(1) if values else expr


def test_every_dashboard_query_is_promql_that_prometheus_parses() -> None:
    queries = [as_promql(q) for q in dashboard_queries()]
    errors = promql_errors(queries)
    assert all(not e for e in errors.values()), {q: e for q, e in errors.items() if e}
    # The check bites: a bracket left open, a dangling operator.
    broken = promql_errors(["sum by (result (rate(snapshotd_requests_total[5m]))",
                            "rate(snapshotd_captures_total[5m]) /"])
    assert all(broken.values()), broken


def test_a_dashboard_query_of_a_metric_that_does_not_exist_is_caught() -> None:
    series = exposed('snapshotd_requests_total{result="HIT"} 1.0\n')
    assert "snapshotd_request_total" not in series
    assert series["snapshotd_requests_total"] == {"result"}


# --- Readiness -----------------------------------------------------------------------------


def _our_browsers() -> list[int]:
    """Pids of the Chromium browser processes this test process started (its descendants
    whose command line is a browser's, not one of its helpers')."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    ours = {os.getpid()}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in ours} - ours
        grew = bool(found)
        ours |= found
    browsers = []
    for pid in ours - {os.getpid()}:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"chrom" in argv[0] and not any(a.startswith(b"--type=") for a in argv):
            browsers.append(pid)
    return browsers


def test_readiness_says_whether_the_browser_pool_can_render(tmp_path) -> None:
    chromium = require_chromium()
    link = tmp_path / "chromium"
    link.symlink_to(chromium)
    db = str(tmp_path / "snap.db")
    with serve_asgi(create_spa()) as spa, snapshotd(db, spa, str(link)) as base:
        ready = httpx.get(f"{base}/_snapshotd/readyz", timeout=30, trust_env=False)
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ready", "store": "ok", "browser": "ok"}
        # Chromium crashes, and its binary is gone: no page can be rendered.
        link.unlink()
        browsers = _our_browsers()
        assert browsers
        for pid in browsers:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            r = httpx.get(f"{base}/_snapshotd/readyz", timeout=30, trust_env=False)
            if r.status_code == 503:
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.5)
        assert r.json()["status"] == "not ready" and r.json()["store"] == "ok"
        assert r.json()["browser"].startswith("browser unavailable"), r.text
        # healthz says only that the store answers.
        assert httpx.get(f"{base}/_snapshotd/healthz", trust_env=False).status_code == 200
        # Chromium back: the probe launches it again, as a capture would.
        link.symlink_to(chromium)
        deadline = time.monotonic() + 30
        while httpx.get(f"{base}/_snapshotd/readyz", timeout=30,
                        trust_env=False).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.5)


def _sample(text: str, name: str) -> float:
    found = re.search(rf"^{name}(?:\{{[^}}]*\}})? ([0-9.e+]+)$", text, re.MULTILINE)
    assert found, f"{name} is not exposed"
    return float(found.group(1))


def test_the_scrape_gives_the_process_and_the_browser_pools_processes_and_memory(
    tmp_path,
) -> None:
    chromium = require_chromium()
    db = str(tmp_path / "snap.db")
    with serve_asgi(create_spa()) as spa, snapshotd(db, spa, chromium) as base:
        r = httpx.get(f"{base}/items/4", headers={"User-Agent": BOT}, timeout=30,
                      trust_env=False)
        assert r.headers["x-snapshotd-cache"] == "MISS"
        text = scrape(base, TOKEN).text
    assert _sample(text, "process_resident_memory_bytes") > 0
    assert _sample(text, "process_cpu_seconds_total") > 0
    assert _sample(text, "process_open_fds") > 0
    # The pool's Chromium: a browser process and its renderers, with their memory.
    assert _sample(text, "snapshotd_browser_processes") >= 2
    assert _sample(text, "snapshotd_browser_memory_bytes") > 10 * 2**20


def test_the_dashboard_shows_crawler_claims_and_the_memory_of_snapshotd_and_its_browsers(
) -> None:
    queries = dashboard_queries()
    claims = [q for q in queries if "snapshotd_bot_claims_total" in q]
    assert claims and all("family" in q and "claim" in q for q in claims), claims
    for metric in ("process_resident_memory_bytes", "snapshotd_browser_memory_bytes",
                   "snapshotd_browser_processes"):
        assert any(metric in q for q in queries), metric
