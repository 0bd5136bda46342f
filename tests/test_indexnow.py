"""IndexNow (SPEC 5.5): which captures are news, and a real endpoint on loopback receiving the
documented JSON, batched, retried and recorded; the key file the proxy serves."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import httpx
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from snapshotd.capture.service import CaptureService
from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.observe.metrics import Metrics
from snapshotd.pages.fingerprints import fingerprint
from snapshotd.render.renderer import CaptureResult
from snapshotd.search.indexnow import IndexNow, indexnow_due
from snapshotd.server.app import create_app
from tests.servers import serve_asgi
from tests.test_api import TOKEN, RefusingRenderer

KEY = "4f3c2b1a-0e9d-8c7b"
PRIVATE = Settings(indexnow_private=True)


class Endpoint:
    """The IndexNow endpoint's requests, and its answers in turn (the last one from then on)."""

    def __init__(self, server: HTTPServer, *statuses: int) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.types: list[str] = []
        self.statuses = list(statuses or (200,))
        server.expect_request("/indexnow", method="POST").respond_with_handler(self.answer)
        self.url = server.url_for("/indexnow")

    def answer(self, request: Request) -> Response:
        self.bodies.append(json.loads(request.data))
        self.types.append(request.headers.get("Content-Type", ""))
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return Response("", status=status)


def site_for(endpoint: str, **kw: Any) -> SiteSettings:
    return SiteSettings(
        name="shop", origin="http://127.0.0.1:9", hosts=("shop.test",), indexnow_key=KEY,
        indexnow_endpoint=endpoint, **kw,
    )


async def until(check: Any) -> None:
    """Wait for ``check()`` to be true (the timeout only stops a hang)."""
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(0.01)


async def test_changes_are_posted_in_one_batch_of_the_documented_json(httpserver: HTTPServer):
    endpoint = Endpoint(httpserver, 202)
    metrics = Metrics()
    sender = IndexNow(PRIVATE, every=0.05, metrics=metrics)
    site = site_for(endpoint.url)
    for path in ("/a", "/b?x=1", "/a"):
        sender.tell(site, path)
    await until(lambda: sender.report("shop")["posts"] == 1)
    assert endpoint.bodies == [{
        "host": "shop.test",
        "key": KEY,
        "keyLocation": f"http://shop.test/{KEY}.txt",
        "urlList": ["http://shop.test/a", "http://shop.test/b?x=1"],
    }]
    assert endpoint.types[0].startswith("application/json")
    record = sender.report("shop")
    assert (record["sent"], record["failed"], record["waiting"], record["last_status"]) == (
        2, 0, 0, 202,
    )
    assert metrics.indexnow_urls.labels("sent")._value.get() == 2
    # A site without a key tells nothing.
    sender.tell(replace(site, name="quiet", indexnow_key=""), "/c")
    assert sender.report("quiet")["waiting"] == 0 and "quiet" not in sender._senders
    await sender.aclose()


async def test_a_post_holds_at_most_10000_urls_and_waiting_is_bounded(httpserver: HTTPServer):
    endpoint = Endpoint(httpserver)
    sender = IndexNow(PRIVATE, every=0.05, max_waiting=10_003)
    site = site_for(endpoint.url)
    for n in range(10_004):
        sender.tell(site, f"/p{n}")
    await until(lambda: sender.report("shop")["posts"] == 2)
    assert [len(b["urlList"]) for b in endpoint.bodies] == [10_000, 3]
    assert endpoint.bodies[1]["urlList"][-1] == "http://shop.test/p10002"
    record = sender.report("shop")
    assert (record["sent"], record["dropped"]) == (10_003, 1)
    await sender.aclose()


async def test_no_answer_429_and_5xx_are_tried_again_other_errors_are_not(
    httpserver: HTTPServer,
):
    endpoint = Endpoint(httpserver, 503, 429, 200)
    sender = IndexNow(PRIVATE, every=0.05, retries=(0.05, 0.05, 0.05))
    sender.tell(site_for(endpoint.url), "/a")
    await until(lambda: sender.report("shop")["posts"] == 1)
    assert len(endpoint.bodies) == 3 and sender.report("shop")["sent"] == 1
    await sender.aclose()

    httpserver.clear()
    refused = Endpoint(httpserver, 403)
    sender = IndexNow(PRIVATE, every=0.05, retries=(0.05, 0.05))
    sender.tell(site_for(refused.url), "/a")
    await until(lambda: sender.report("shop")["posts"] == 1)
    record = sender.report("shop")
    assert len(refused.bodies) == 1
    assert (record["failed"], record["last_status"], record["last_error"]) == (
        1, 403, "answered 403",
    )
    await sender.aclose()


async def test_the_address_policy_keeps_a_loopback_endpoint_out_unless_allowed(
    httpserver: HTTPServer,
):
    endpoint = Endpoint(httpserver)
    sender = IndexNow(Settings(), every=0.05, retries=(0.05,))
    sender.tell(site_for(endpoint.url), "/a")
    await until(lambda: sender.report("shop")["posts"] == 1)
    record = sender.report("shop")
    assert endpoint.bodies == [] and record["failed"] == 1
    assert record["last_error"].startswith("refused")
    await sender.aclose()


PAGE = " ".join(f"word{n}" for n in range(30))


@pytest.mark.parametrize(
    ("before_status", "before", "status", "after", "listed", "due"),
    [
        (None, None, 200, "a", True, True),  # a new page
        (200, "a", 200, "a", True, False),  # recaptured, nothing changed
        (200, "a", 200, "b", True, True),  # its main text changed
        (200, "a", 404, None, False, True),  # gone
        (404, None, 404, None, False, False),  # still gone
        (404, None, 410, None, False, False),
        (410, None, 200, "a", True, True),  # back
        (None, None, 200, "a", False, False),  # a copy of another page
        (200, "a", 301, None, False, False),  # now a redirect: not one of IndexNow's
    ],
)
def test_which_captures_are_news(before_status, before, status, after, listed, due):
    prints = {k: fingerprint(f"<main>{PAGE} {k}</main>") for k in ("a", "b")}
    assert indexnow_due(
        before_status, prints.get(before), status, prints.get(after), listed=listed
    ) is due


async def test_the_capture_service_tells_of_new_changed_and_gone_pages(store):
    told: list[str] = []

    class Told(IndexNow):
        def tell(self, site: SiteSettings, path: str) -> None:
            told.append(path)

    answers = [(200, PAGE), (200, PAGE), (200, PAGE + " more"), (404, "gone"), (404, "gone")]
    current: list[tuple[int, str]] = []

    class Renderer:
        async def capture(self, url: str, site: SiteSettings, profile: str = "desktop"):
            status, text = current[-1]
            return CaptureResult(url=url, final_url=url, status=status,
                                 html=f"<main>{text}</main>")

    site = site_for("https://indexnow.test/indexnow", devices="mobile")
    settings = Settings(sites=(site,))
    capture = CaptureService(settings, store, Renderer(), indexnow=Told(settings))
    for n, answer in enumerate(answers):
        current.append(answer)
        await store.enqueue("shop", "/p", 1, force=True)
        record = await store.claim_path("shop", "/p", capture.owner, 60)
        assert (await capture.run(site, record)).stored
        assert len(told) == [1, 1, 2, 3, 3][n], n
    assert told == ["/p"] * 3


async def test_the_proxy_serves_the_key_at_its_key_location(tmp_path):
    site = site_for("https://indexnow.test/indexnow")
    settings = Settings(db=str(tmp_path / "s.db"), api_tokens=(TOKEN,), sites=(site,))
    app = create_app(settings, renderer=RefusingRenderer(), crawler=False)
    with serve_asgi(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            host = {"Host": "shop.test"}
            r = await client.get(f"/{KEY}.txt", headers=host)
            assert (r.status_code, r.text) == (200, KEY)
            assert r.headers["content-type"].startswith("text/plain")
            assert (await client.get("/other-key-0000.txt", headers=host)).status_code == 502
            auth = {"Authorization": f"Bearer {TOKEN}"}
            shown = (await client.get("/_snapshotd/api/v1/sites/shop", headers=auth)).json()
            assert shown["indexnow"]["posts"] == 0
            assert shown["settings"]["indexnow_key"] == KEY


async def test_the_api_refuses_an_endpoint_the_policy_will_never_let_be_called(tmp_path):
    from tests.test_api import AUTH, make_settings, running

    body = {"origin": "http://127.0.0.1:9", "indexnow_key": KEY,
            "indexnow_endpoint": "http://127.0.0.1:9/indexnow"}
    async with running(make_settings(tmp_path)) as env:
        r = await env.client.put("/_snapshotd/api/v1/sites/new", json=body, headers=AUTH)
        assert r.status_code == 400 and r.json()["field"] == "indexnow_endpoint"
        assert "indexnow_private" in r.json()["error"]
        # Without a key nothing is called, and the endpoint is only a setting.
        r = await env.client.put(
            "/_snapshotd/api/v1/sites/new", json={**body, "indexnow_key": ""}, headers=AUTH
        )
        assert r.status_code == 201
    async with running(make_settings(tmp_path, indexnow_private=True)) as env:
        r = await env.client.put("/_snapshotd/api/v1/sites/new", json=body, headers=AUTH)
        assert r.status_code == 200
