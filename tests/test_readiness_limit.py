"""A capture a readiness limit ended while its page was still changing is said to be so, end
to end: real Chromium, the corpus's origin on loopback, snapshotd's own app with its crawler;
the mark is read from the path's JSON, the URL report and the metrics."""

from __future__ import annotations

import time

import httpx
import pytest

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.corpus.server import create_app as corpus_app
from tests.servers import serve_asgi

pytestmark = pytest.mark.browser

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API = "/_snapshotd/api/v1"


def test_a_page_still_changing_at_the_limit_is_marked_in_the_api_the_url_report_and_metrics(
    tmp_path,
) -> None:
    browser = BrowserSettings(
        concurrency=1, executable=require_chromium(), javascript_timeout=1.0, render_timeout=60
    )
    with serve_asgi(corpus_app()) as origin:
        site = SiteSettings(name="corpus", origin=origin, hosts=("corpus.test",))
        settings = Settings(
            db=str(tmp_path / "r.db"), api_tokens=(TOKEN,), browser=browser, sites=(site,)
        )
        with serve_asgi(create_app(settings)) as base, httpx.Client(
            base_url=base, timeout=30, trust_env=False, headers=AUTH
        ) as client:
            queued = client.post(
                f"{API}/sites/corpus/paths", json={"paths": ["/c/clock", "/c/raf"]}
            )
            assert queued.status_code == 200, queued.text
            # The crawler captures the site's seed too: the two paths are waited for by name.
            asked = {"/c/clock", "/c/raf"}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                done = client.get(f"{API}/sites/corpus/paths", params={"state": "processed"})
                listed = {p["path"]: p for p in done.json()["paths"] if p["path"] in asked}
                if len(listed) == 2:
                    break
                time.sleep(0.2)
            assert {p: r["readiness_limit"] for p, r in listed.items()} == {
                "/c/clock": True,  # a clock ticks forever
                "/c/raf": False,
            }
            one = client.get(f"{API}/sites/corpus/paths/c/clock").json()
            assert one["readiness_limit"] is True
            report = client.get(
                "/_snapshotd/v3/crawl/data",
                params={"name": "corpus", "type": "urls", "format": "json"},
            ).json()
            assert {r["path"]: r["readiness_limit"] for r in report if r["path"] in listed} == {
                "/c/clock": True,
                "/c/raf": False,
            }
            metrics = client.get("/_snapshotd/metrics").text
            assert "snapshotd_readiness_limits_total 1.0" in metrics
