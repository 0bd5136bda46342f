"""Crawlbot's API on a port of its own (``[server] crawlbot_port``): a Crawlbot script
changes its host and its token, nothing else. snapshotd runs on uvicorn on two sockets bound
on port 0, as ``serve`` binds them, with a real SQLite file; the requests are those Diffbot's
documentation and its Python client (``DiffbotCrawl``) send, with their host changed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from snapshotd.config.settings import Settings
from snapshotd.server.app import create_app
from snapshotd.server.run import bind_socket
from tests.servers import serve_asgi
from tests.test_crawlbot_switcher import _store_page

TOKEN = "crawl-port-token"


@dataclass
class Running:
    serve: str  # serve's own port
    crawlbot: str  # crawlbot_port, as a Crawlbot client's base URL
    db: str


@pytest.fixture
def running(tmp_path) -> Iterator[Running]:
    main, crawlbot = bind_socket("127.0.0.1", 0), bind_socket("127.0.0.1", 0)
    ports = main.getsockname()[1], crawlbot.getsockname()[1]
    db = str(tmp_path / "c.db")
    settings = Settings(db=db, api_tokens=(TOKEN,), port=ports[0], crawlbot_port=ports[1])
    with main, crawlbot, serve_asgi(create_app(settings, crawler=False),
                                    sockets=[main, crawlbot]) as serve:
        yield Running(serve, f"http://127.0.0.1:{ports[1]}/", db)


def test_a_crawlbot_client_changes_only_its_host_and_token(running: Running) -> None:
    base = running.crawlbot  # DiffbotClient.base_url, "http://api.diffbot.com/" before
    with httpx.Client(timeout=30, trust_env=False) as http:
        # Diffbot's documented creation: the token in the query, the job in a form body.
        made = http.post(f"{base}v3/crawl?token={TOKEN}", data={
            "name": "docs", "seeds": "http://127.0.0.1:9/", "maxToCrawl": "100",
            "apiUrl": "https://api.diffbot.com/v3/analyze"})
        assert made.status_code == 200, made.text
        assert made.json()["response"] == "Successfully added urls for spidering."
        # DiffbotCrawl(token, name, seeds=..., api="analyze"): one GET with its params.
        started = http.get(f"{base}v3/crawl", params={
            "token": TOKEN, "name": "shop", "seeds": "http://127.0.0.1:9/",
            "apiUrl": f"{base}v3/analyze"})
        assert started.status_code == 200, started.text
        job = started.json()["jobs"][0]
        assert job["name"] == "shop" and job["maxToProcess"] == 100_000
        # Its links are on this port, at the root, and usable as they are.
        assert job["downloadJson"].startswith(f"{base}v3/crawl/data?name=shop&downloadToken=")
        assert job["downloadUrls"].startswith(f"{base}v3/crawl/data?name=shop&downloadToken=")
        _store_page(running.db, "shop", "/a")
        # .status() and .update(maxToCrawl=...): GETs with token and name.
        status = http.get(f"{base}v3/crawl", params={"token": TOKEN, "name": "shop"})
        assert status.json()["jobs"][0]["objectsFound"] == 1
        updated = http.get(f"{base}v3/crawl", params={
            "token": TOKEN, "name": "shop", "maxToCrawl": 7})
        assert updated.json()["jobs"][0]["maxToCrawl"] == 7
        # .download() and .download("csv"): the client's own URL, a double slash included.
        pages = http.get(f"{base}/v3/crawl/download/{TOKEN}-shop_data.json")
        assert pages.status_code == 200, pages.text
        assert [p["pageUrl"] for p in pages.json()] == ["http://127.0.0.1:9/a"]
        as_csv = http.get(f"{base}/v3/crawl/download/{TOKEN}-shop_data.csv")
        assert as_csv.headers["content-type"].startswith("text/csv")
        assert [r["pageUrl"] for r in csv.DictReader(io.StringIO(as_csv.text))] == [
            "http://127.0.0.1:9/a"]
        # The documented data endpoint and the job's own links.
        report = http.get(f"{base}v3/crawl/data", params={
            "token": TOKEN, "name": "shop", "type": "urls"})
        assert "http://127.0.0.1:9/a" in report.text
        assert http.get(job["downloadJson"]).json() == pages.json()
        assert http.get(job["downloadUrls"]).text == report.text
        # The list of jobs, then .restart() and .delete().
        listed = http.get(f"{base}v3/crawl", params={"token": TOKEN}).json()["jobs"]
        assert sorted(j["name"] for j in listed) == ["docs", "shop"]
        restarted = http.get(f"{base}v3/crawl", params={
            "token": TOKEN, "name": "shop", "maxToCrawl": 7, "restart": 1})
        assert restarted.json()["response"] == "Successfully restarted job."
        deleted = http.get(f"{base}v3/crawl", params={
            "token": TOKEN, "name": "shop", "maxToCrawl": 7, "delete": 1})
        assert deleted.json() == {"response": "Successfully deleted job."}


def test_the_crawlbot_port_answers_as_diffbot_and_serves_nothing_else(
    running: Running,
) -> None:
    base = running.crawlbot
    with httpx.Client(timeout=30, trust_env=False) as http:
        for bad in ({}, {"token": "not-this-one"}):
            refused = http.get(f"{base}v3/crawl", params={"name": "shop", **bad})
            assert refused.status_code == 401
            assert refused.json()["errorCode"] == 401 and refused.json()["error"]
        wrong = http.get(f"{base}v3/crawl/download/nope-shop_data.json")
        assert wrong.status_code == 401 and wrong.json()["errorCode"] == 401
        typo = http.get(f"{base}v3/crawl", params={"token": TOKEN, "name": "x", "maxToCrawll": 1})
        assert typo.status_code == 400 and typo.json()["errorCode"] == 400
        assert typo.json()["field"] == "maxToCrawll"
        # Nothing but Crawlbot's endpoints: not the rest of the API, not the proxy.
        for elsewhere in ("/_snapshotd/api/v1/sites", "/_snapshotd/v3/crawl", "/v3/search",
                          "/v3/crawl/other", "/", "/v3/crawl/download/a/b"):
            other = http.get(base.rstrip("/") + elsewhere, params={"token": TOKEN},
                             headers={"Authorization": f"Bearer {TOKEN}"})
            assert other.status_code == 404, elsewhere
            assert other.json()["errorCode"] == 404, elsewhere
        # On serve's own port, Crawlbot's endpoints stay under /_snapshotd/, their links too.
        own = http.post(f"{running.serve}/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "shop", "seeds": "http://127.0.0.1:9/"})
        assert own.json()["jobs"][0]["downloadJson"].startswith(
            f"{running.serve}/_snapshotd/v3/crawl/data?")
        assert http.get(f"{running.serve}/v3/crawl", params={"token": TOKEN}).headers.get(
            "content-type", "") != "application/json"
