"""``snapshotd serve`` on a PostgreSQL store that goes away under it (a gate in front of the
real server, shut): the API answers 503, bots get the origin's page, and the log says so in
a few lines, not one per request."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections import Counter
from urllib.parse import urlsplit

import httpx
import pytest

from snapshotd.observe.logs import THROTTLE_EVERY, Throttle
from tests.conftest import POSTGRES, drop_postgres_schema, postgres_schema
from tests.gate import Gate
from tests.servers import serve_asgi
from tests.sites.shop import Shop
from tests.test_serve_process import serving
from tests.test_serve_workers import AUTH, BOT, write_config

API = "/_snapshotd/api/v1"
ACCESS = re.compile(r" snapshotd\.access ")


def new_lines(serve, since: int) -> list[str]:
    return [line for line in serve.lines[since:] if not ACCESS.search(line)]


def test_a_failure_repeated_is_one_line_per_interval_the_next_counting_those_left_out(caplog):
    now = [0.0]
    throttle = Throttle(every=10, clock=lambda: now[0])
    store_log, other_log = logging.getLogger("snapshotd.one"), logging.getLogger("snapshotd.two")
    with caplog.at_level(logging.INFO):
        for n in range(50):  # 5 s of a failure under every request
            now[0] = n / 10
            throttle.log(store_log, logging.WARNING, "store gone: %s", f"error {n}")
            throttle.log(other_log, logging.WARNING, "store gone: %s", f"error {n}")
        throttle.log(store_log, logging.ERROR, "loop failed: %s", "error")
        now[0] = 9.99
        throttle.log(store_log, logging.WARNING, "store gone: %s", "still")
        now[0] = 10.0
        throttle.log(store_log, logging.WARNING, "store gone: %s", "again")
        throttle.log(store_log, logging.WARNING, "store gone: %s", "and again")
        now[0] = 30.0
        throttle.log(store_log, logging.WARNING, "store gone: %s", "much later")
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("snapshotd.one", "WARNING", "store gone: error 0"),
        ("snapshotd.two", "WARNING", "store gone: error 0"),
        ("snapshotd.one", "ERROR", "loop failed: error"),
        ("snapshotd.one", "WARNING", "store gone: again (50 more since the last one)"),
        ("snapshotd.one", "WARNING", "store gone: much later (1 more since the last one)"),
    ]


@pytest.mark.browser
@pytest.mark.parametrize("workers", ["1", "2"], ids=["1-worker", "2-workers"])
def test_a_store_gone_away_is_a_503_for_the_api_a_bypass_for_bots_and_a_few_log_lines(
    tmp_path, workers
):
    schema, url = asyncio.run(postgres_schema())
    server = urlsplit(POSTGRES)
    gate = Gate((server.hostname or "127.0.0.1", server.port or 5432))
    db = url.replace(server.netloc, f"{server.netloc.rpartition('@')[0]}@127.0.0.1:{gate.port}")
    try:
        with serve_asgi(Shop().app) as origin:
            config = write_config(tmp_path, origin, db, seeds='["/"]')  # type: ignore[arg-type]
            with serving("--config", str(config), "--workers", workers) as serve:
                base = serve.url()
                api = httpx.Client(base_url=base, headers=AUTH, trust_env=False, timeout=30)
                bot = httpx.Client(
                    base_url=base, headers={"User-Agent": BOT}, trust_env=False, timeout=30
                )
                assert api.get(f"{API}/sites/shop/paths").status_code == 200

                gate.shut()
                since = len(serve.lines)
                started = time.monotonic()
                for n in range(20):
                    for r in (
                        api.get(f"{API}/sites/shop/paths"),
                        api.get(f"{API}/stats"),
                        api.post(f"{API}/sites/shop/paths", json={"paths": [f"/new/{n}"]}),
                    ):
                        assert r.status_code == 503, (r.status_code, r.text)
                        assert r.json() == {"error": "store unavailable"}
                        assert int(r.headers["retry-after"]) > 0
                    # A bot gets the origin's answer, whatever it is.
                    page = bot.get(f"/b/{n}")
                    direct = httpx.get(origin + f"/b/{n}", trust_env=False)
                    assert (page.status_code, page.text) == (direct.status_code, direct.text)
                    assert page.headers["x-snapshotd-cache"] == "BYPASS"
                time.sleep(max(0.0, 5 - (time.monotonic() - started)))
                during = new_lines(serve, since)
                # Each kind of failure may be said once in each THROTTLE_EVERY seconds
                # begun; on a busy machine these requests may take more than one.
                windows = math.ceil((time.monotonic() - started) / THROTTLE_EVERY)

                gate.open()
                # Back as soon as the store answers again.
                deadline = time.monotonic() + 30
                while api.get(f"{API}/sites/shop/paths").status_code != 200:
                    assert time.monotonic() < deadline, new_lines(serve, since)
                    time.sleep(0.2)
                api.close()
                bot.close()
                serve.stop()
            err = serve.stderr
    finally:
        gate.shut()
        asyncio.run(drop_postgres_schema(schema))
    assert "Traceback" not in err, err
    # 60 API calls, 20 bot requests and every background loop in 5 s or more: each kind of
    # failure said at most once by each process in each throttle window.
    kinds = Counter(line.split(" ", 1)[1].split(":")[0] for line in during)
    assert max(kinds.values()) <= int(workers) * windows, (windows, "".join(during))
    assert len(during) < 20 * windows, (windows, "".join(during))
    assert any("store unavailable" in line for line in during), "".join(during)
