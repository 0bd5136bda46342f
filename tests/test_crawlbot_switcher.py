"""What a Crawlbot script reads, as it reads it from Diffbot: a new job's defaults and its
download files at Crawlbot's own path. snapshotd runs on uvicorn with a real SQLite file and
no crawler; one page of the job is put in its store as a capture would leave it.
"""

from __future__ import annotations

import asyncio
import csv
import io
import time
from collections.abc import Iterator

import httpx
import pytest

from snapshotd.config.settings import Settings
from snapshotd.server.app import create_app
from snapshotd.store import open_store
from snapshotd.store.outcome import CaptureOutcome
from tests.servers import serve_asgi

# Tokens and job names may both hold "-".
TOKEN = "crawl-bot-token"
V3 = "/_snapshotd/v3/crawl"


@pytest.fixture
def base(tmp_path) -> Iterator[str]:
    settings = Settings(db=str(tmp_path / "c.db"), api_tokens=(TOKEN,))
    with serve_asgi(create_app(settings, crawler=False)) as url:
        yield url


def _store_page(
    db: str, site: str, path: str, duplicate_of: str | None = None,
    html: str = "<html><head><title>A page</title></head><body>a page</body></html>",
) -> None:
    async def run() -> None:
        store = open_store(db)
        await store.open()
        try:
            await store.enqueue_many(site, [(path, 0)], 1, force=True)
            claimed = await store.claim_path(site, path, "test", 60.0)
            assert claimed is not None
            assert await store.complete(
                site, path, "test", CaptureOutcome(html=html, status=200, headers={},
                    final_url="http://127.0.0.1:9" + path, expires_at=time.time() + 3600,
                    duplicate_of=duplicate_of, shared=duplicate_of is not None),
            )
        finally:
            await store.close()

    asyncio.run(run())


def test_a_new_job_takes_crawlbots_max_to_process(base: str) -> None:
    with httpx.Client(base_url=base, trust_env=False) as client:
        made = client.post(V3, data={"token": TOKEN, "name": "my-job",
                                     "seeds": "http://127.0.0.1:9/"})
        assert made.status_code == 200, made.text
        assert made.json()["jobs"][0]["maxToProcess"] == 100_000
        given = client.post(V3, data={"token": TOKEN, "name": "other",
                                      "seeds": "http://127.0.0.1:9/", "maxToProcess": "-1"})
        assert given.json()["jobs"][0]["maxToProcess"] == -1


def test_crawlbots_download_path_gives_the_jobs_data_and_urls(base: str, tmp_path) -> None:
    with httpx.Client(base_url=base, trust_env=False) as client:
        made = client.post(V3, data={"token": TOKEN, "name": "my-job",
                                     "seeds": "http://127.0.0.1:9/"})
        assert made.status_code == 200, made.text
        _store_page(str(tmp_path / "c.db"), "my-job", "/a")
        data = client.get(f"{V3}/download/{TOKEN}-my-job_data.json")
        assert data.status_code == 200, data.text
        assert [row["pageUrl"] for row in data.json()] == ["http://127.0.0.1:9/a"]
        assert data.json() == client.get(f"{V3}/data", params={
            "token": TOKEN, "name": "my-job", "format": "json"}).json()
        urls = client.get(f"{V3}/download/{TOKEN}-my-job_urls.csv")
        assert urls.status_code == 200 and urls.headers["content-type"].startswith("text/csv")
        assert "http://127.0.0.1:9/a" in {r["url"] for r in csv.DictReader(io.StringIO(urls.text))}
        assert client.get(f"{V3}/download/wrong-my-job_data.json").status_code == 401
        assert client.get(f"{V3}/download/{TOKEN}-none_data.json").status_code == 404
        assert client.get(f"{V3}/download/{TOKEN}-my-job_data.xml").status_code == 404


def test_a_copy_of_another_page_is_no_object_of_the_data(base: str, tmp_path) -> None:
    with httpx.Client(base_url=base, trust_env=False) as client:
        client.post(V3, data={"token": TOKEN, "name": "job", "seeds": "http://127.0.0.1:9/"})
        _store_page(str(tmp_path / "c.db"), "job", "/a")
        _store_page(str(tmp_path / "c.db"), "job", "/a?ref=1", duplicate_of="/a")
        job = client.get(V3, params={"token": TOKEN, "name": "job"}).json()["jobs"][0]
        assert job["objectsFound"] == 1
        data = client.get(f"{V3}/data", params={"token": TOKEN, "name": "job"}).json()
        assert [row["path"] for row in data] == ["/a"]
        # The URL report has every path, the copy with what it copies.
        report = client.get(f"{V3}/data", params={
            "token": TOKEN, "name": "job", "type": "urls", "format": "json"}).json()
        assert {r["path"]: r["duplicate_of"] for r in report} == {"/a": None, "/a?ref=1": "/a"}


def test_past_the_jobs_bound_a_new_job_gets_crawlbots_error(base: str, monkeypatch) -> None:
    monkeypatch.setattr("snapshotd.api.crawlbot.MAX_JOBS", 2)
    with httpx.Client(base_url=base, trust_env=False) as client:
        for name in ("one", "two"):
            made = client.post(V3, data={"token": TOKEN, "name": name,
                                         "seeds": "http://127.0.0.1:9/"})
            assert made.status_code == 200, made.text
        third = client.post(V3, data={"token": TOKEN, "name": "three",
                                      "seeds": "http://127.0.0.1:9/"})
        assert third.status_code == 400
        assert third.json()["errorCode"] == 505
        assert third.json()["error"] == "Too many collections for token"
        # A job that exists still changes.
        again = client.post(V3, data={"token": TOKEN, "name": "two", "maxHops": "3"})
        assert again.status_code == 200 and again.json()["jobs"][0]["maxHops"] == 3
        names = [j["name"] for j in client.get(V3, params={"token": TOKEN}).json()["jobs"]]
        assert sorted(names) == ["one", "two"]


def test_each_object_has_an_id_that_is_the_same_for_the_same_content(
    base: str, tmp_path
) -> None:
    with httpx.Client(base_url=base, trust_env=False) as client:
        client.post(V3, data={"token": TOKEN, "name": "job", "seeds": "http://127.0.0.1:9/"})
        for path in ("/a", "/b"):  # the same HTML at two URLs, neither marked a copy
            _store_page(str(tmp_path / "c.db"), "job", path)
        _store_page(str(tmp_path / "c.db"), "job", "/c", html="<html><body>other</body></html>")
        rows = client.get(f"{V3}/data", params={"token": TOKEN, "name": "job"}).json()
    ids = {row["path"]: row["diffbotUri"] for row in rows}
    assert ids["/a"] == ids["/b"] != ids["/c"]
    assert all(uri.startswith("page|") for uri in ids.values())


def test_the_job_echoes_its_api_url(base: str) -> None:
    with httpx.Client(base_url=base, trust_env=False) as client:
        made = client.post(V3, data={"token": TOKEN, "name": "job", "seeds": "http://127.0.0.1:9/",
                                     "apiUrl": "https://api.diffbot.com/v3/product"})
        assert made.status_code == 200, made.text
        assert made.json()["warnings"][0].startswith("apiUrl:")
        job = client.get(V3, params={"token": TOKEN, "name": "job"}).json()["jobs"][0]
        assert job["apiUrl"] == "https://api.diffbot.com/v3/product"


def test_a_name_snapshotd_cannot_take_is_refused_by_its_argument(base: str) -> None:
    with httpx.Client(base_url=base, trust_env=False) as client:
        refused = client.post(V3, data={"token": TOKEN, "name": "my job!",
                                        "seeds": "http://127.0.0.1:9/"})
    assert refused.status_code == 400
    assert refused.json()["field"] == "name" and refused.json()["errorCode"] == 400
