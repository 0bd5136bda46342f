"""What strangers cannot teach a site (SPEC 5.2, 5.3): a bot's request for a URL it made up
is captured and served, but what snapshotd learns of query parameters, and which path of a
group of copies is served for all of them, come only from what the crawler found on the site
(real Chromium, a real store, the app on loopback)."""

from __future__ import annotations

import asyncio
import html
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from snapshotd.capture.masters import takes_over
from snapshotd.pages.fingerprints import fingerprint
from snapshotd.store.interface import PathRecord
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.sqlite import SQLiteStore
from tests.chromium import wait_until
from tests.servers import serve_asgi
from tests.test_crawl_jobs import BOT, crawlbot_app
from tests.test_crawlbot import TOKEN, wait_status

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SITE = "/_snapshotd/api/v1/sites/shop"
SPAM = "Cheap pills at spam dot example"


def _words(seed: str) -> str:
    return " ".join(f"{seed}{i}" for i in range(30))


def _page(main: str, header: str = "") -> str:
    return (f"<!doctype html><html><head><title>Shop</title></head><body>"
            f"<header>{header}</header><main>{main}</main></body></html>")


async def home(request: Request) -> Response:
    # The site links its search page only with a query: /search alone is never linked.
    links = "".join(f'<p><a href="{p}">{p}</a></p>'
                    for p in ("/a", "/b", "/search?q=shoes", "/news"))
    return HTMLResponse(_page(f"<h1>Home</h1><p>{_words('home')}</p>{links}"))


async def plain(request: Request) -> Response:
    # Any query is ignored by these pages.
    name = request.url.path.strip("/")
    return HTMLResponse(_page(f"<h1>Page {name}</h1><p>{_words(name)}</p>"))


async def search(request: Request) -> Response:
    q = request.query_params.get("q", "")
    if not q:
        return HTMLResponse(_page("<h1>Search</h1><p>Type a word to search our catalogue "
                                  "of many fine things for sale here today</p>"))
    results = "".join(f"<li>Result {i} for {html.escape(q)}: item {q}{i}</li>" for i in range(12))
    return HTMLResponse(_page(f"<h1>Results for {html.escape(q)}</h1><ul>{results}</ul>"))


async def news(request: Request) -> Response:
    # Who shared the page is shown in its header only, outside its main text.
    ref = request.query_params.get("ref", "")
    header = f"Shared by {html.escape(ref)}" if ref else ""
    return HTMLResponse(_page(f"<h1>News</h1><p>{_words('news')}</p>", header))


APP = Starlette(routes=[
    Route("/", home), Route("/a", plain), Route("/b", plain),
    Route("/search", search), Route("/news", news),
])


def _bot(client: httpx.Client, origin: str, path: str) -> httpx.Response:
    answer = client.get(path, headers={"Host": origin.removeprefix("http://"), "User-Agent": BOT})
    assert answer.status_code == 200, (path, answer.status_code, answer.text)
    return answer


def _wait_path(client: httpx.Client, path: str, state: str = "processed") -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = client.get(f"{SITE}/paths/{path.lstrip('/')}")
        if got.status_code == 200 and got.json()["state"] == state:
            return got.json()  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"{path} never {state}")


def _params(client: httpx.Client) -> dict[str, dict]:  # type: ignore[type-arg]
    return {p["name"]: p for p in client.get(f"{SITE}/params").json()["params"]}


@pytest.mark.browser
def test_bot_requests_for_made_up_variants_do_not_teach_the_site_to_ignore_a_parameter(
    tmp_path: Path,
) -> None:
    with serve_asgi(APP) as origin, serve_asgi(crawlbot_app(str(tmp_path / "s.db"))) as base, \
            httpx.Client(base_url=base, timeout=30, trust_env=False, headers=AUTH) as client:
        site = {"origin": origin, "seeds": ["/"], "obey_robots": False}
        assert client.put(SITE, json=site).status_code == 201
        wait_status(client, "shop", 9, [])
        assert "Results for shoes" in _bot(client, origin, "/search?q=shoes").text
        # Three pages, then the same pages with a parameter the app ignores: each a MISS
        # captured and served.
        for path in ("/", "/a", "/b"):
            assert _bot(client, origin, path).headers["x-snapshotd-cache"] == "HIT"
        for path in ("/?q=abc", "/a?q=abc", "/b?q=abc"):
            answer = _bot(client, origin, path)
            assert answer.headers["x-snapshotd-cache"] == "MISS", path
        # None of it is evidence: q is not learned, and the search keeps its results.
        assert "q" not in _params(client) or _params(client)["q"]["state"] != "ignored"
        served = _bot(client, origin, "/search?q=shoes")
        assert "Results for shoes" in served.text, served.text


@pytest.mark.browser
def test_a_learned_parameter_is_overturned_by_a_differing_variant_the_crawler_finds(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"

    async def learned_before() -> None:
        # What strangers' requests left in a store: q ignored on every path, not pinned.
        async with SQLiteStore(str(db)) as store:
            await store.put_param("shop", "q", "ignored", "/", pinned=False)

    asyncio.run(learned_before())
    with serve_asgi(APP) as origin, serve_asgi(crawlbot_app(str(db))) as base, \
            httpx.Client(base_url=base, timeout=30, trust_env=False, headers=AUTH) as client:
        site = {"origin": origin, "seeds": ["/"], "obey_robots": False}
        assert client.put(SITE, json=site).status_code == 201
        wait_status(client, "shop", 9, [])
        # The crawler captured the variant its site links to, as it is: q is kept now (the
        # learner's write may follow the round's end by a moment on a loaded machine).
        wait_until(lambda: _params(client)["q"]["state"] == "kept", 60)
        assert _params(client)["q"]["state"] == "kept", _params(client)
        assert _params(client)["q"]["differ"] == ["/search"]
        served = _bot(client, origin, "/search?q=shoes")
        assert "Results for shoes" in served.text, served.text


@pytest.mark.browser
def test_a_strangers_variant_never_becomes_the_page_served_for_the_path_the_crawler_found(
    tmp_path: Path,
) -> None:
    with serve_asgi(APP) as origin, serve_asgi(crawlbot_app(str(tmp_path / "s.db"))) as base, \
            httpx.Client(base_url=base, timeout=30, trust_env=False, headers=AUTH) as client:
        site = {"origin": origin, "seeds": [], "obey_robots": False}
        assert client.put(SITE, json=site).status_code == 201
        # A stranger asks first for a variant whose header shows what it put in the URL.
        spammed = _bot(client, origin, f"/news?ref={SPAM}")
        assert spammed.headers["x-snapshotd-cache"] == "MISS" and SPAM in spammed.text
        # Then the crawler finds /news on the site.
        queued = client.post(f"{SITE}/paths", json={"paths": ["/"]})
        assert queued.status_code == 200, queued.text
        record = _wait_path(client, "/news")
        assert record["duplicate_of"] is None, record
        served = _bot(client, origin, "/news")
        assert served.headers["x-snapshotd-cache"] == "HIT"
        assert "<h1>News</h1>" in served.text and SPAM not in served.text, served.text
        # The stranger's variant is now the copy, served the page the crawler found.
        copy = _bot(client, origin, f"/news?ref={SPAM}")
        assert SPAM not in copy.text, copy.text


async def test_the_store_keeps_whether_the_crawler_found_a_path(store) -> None:  # type: ignore[no-untyped-def]
    await store.enqueue("s", "/asked?q=1", 0, found=False)  # a bot's request
    await store.enqueue("s", "/linked", 1)
    assert not (await store.get_path("s", "/asked?q=1")).found
    assert (await store.get_path("s", "/linked")).found
    # Queued again without being found (a bot again, a new round): the mark stays as it was.
    await store.enqueue_many("s", [("/asked?q=1", 0), ("/linked", 0)], 3, found=False)
    assert not (await store.get_path("s", "/asked?q=1")).found
    assert (await store.get_path("s", "/linked")).found
    # The crawler finds it: for good.
    await store.enqueue("s", "/asked?q=1", 1)
    assert (await store.get_path("s", "/asked?q=1")).found
    await store.enqueue("s", "/other", 0, found=False)
    await store.mark_found("s", "/other")
    assert (await store.get_path("s", "/other")).found
    # Only what the crawler found has prints for learning.
    for path, found in (("/p", True), ("/p?x=1", False)):
        await store.enqueue("s", path, 1, found=found)
        await store.claim_path("s", path, "me", 60)
        await store.complete("s", path, "me", CaptureOutcome(
            html=f"<main>{_words('p')}</main>", status=200,
                             headers={}, final_url=path, expires_at=9e9,
                             print_=fingerprint(f"<main>{_words('p')}</main>")))
    assert (await store.prints("s", ["/p", "/p?x=1"])).keys() == {"/p", "/p?x=1"}
    assert (await store.prints("s", ["/p", "/p?x=1"], found=True)).keys() == {"/p"}


async def test_a_new_master_takes_the_whole_group_of_copies(store) -> None:  # type: ignore[no-untyped-def]
    page = f"<main>{_words('n')}</main>"
    # /n is stored as the master of /n?ref=a's group in the same write that stores it: no
    # reader sees /n processed while the group still stands under a stranger's variant.
    for path, of, takes in (("/n?ref=a", None, None), ("/n?ref=b", "/n?ref=a", None),
                            ("/n", None, "/n?ref=a")):
        await store.enqueue("s", path, 1)
        await store.claim_path("s", path, "me", 60)
        assert await store.complete(
            "s", path, "me", CaptureOutcome(html=page.replace("<main>", f"<main><!-- {path} -->"),
                status=200, headers={}, final_url=path, expires_at=9e9, duplicate_of=of,
                shared=True, print_=fingerprint(page), takes_over=takes))
    for path in ("/n?ref=a", "/n?ref=b"):
        assert (await store.get_path("s", path)).duplicate_of == "/n"
        served = await store.get_snapshot("s", path)
        assert served is not None and "<!-- /n -->" in served.html
    assert (await store.get_path("s", "/n")).duplicate_of is None
    assert await store.find_same_text("s", fingerprint(page).text_hash, "/x") == "/n"


@pytest.mark.parametrize(("path", "found", "master", "master_found", "expected"), [
    # Never a copy of its own variant, whoever found which.
    ("/news", False, "/news?ref=x", True, True),
    ("/news?ref=x", True, "/news", False, False),
    # The crawler's finding before a stranger's.
    ("/b?x=1", True, "/a", False, True),
    ("/b", False, "/a?x=1", True, False),
    # Then fewer parameters, then the first captured.
    ("/b", True, "/a?x=1", True, True),
    ("/b?x=1&y=2", True, "/a?x=1", True, False),
    ("/b", True, "/a", True, False),
])
def test_the_master_of_copies_is_the_crawlers_finding_with_fewest_parameters(
    path: str, found: bool, master: str, master_found: bool, expected: bool
) -> None:
    new = PathRecord("s", path, "processing", 1, found=found)
    old = PathRecord("s", master, "processed", 1, found=master_found)
    assert takes_over(new, old) is expected


async def test_evidence_is_gathered_whichever_of_a_page_and_its_variant_is_captured_first(
    store,  # type: ignore[no-untyped-def]
) -> None:
    from snapshotd.config.settings import SiteSettings
    from snapshotd.sites.param_learner import ParamLearner

    site = SiteSettings(name="s", origin="http://127.0.0.1:9")
    learner = ParamLearner(store)
    pages = {
        # The variant first: the page without q is not captured yet, nothing to compare.
        "/search?q=shoes": f"<main><h1>Results for shoes</h1>{_words('shoes')}</main>",
        "/search": "<main><h1>Search</h1><p>Type a word to search our catalogue</p></main>",
        # A page whose variant shows the same, variant first too.
        "/news?ref=x": f"<main><h1>News</h1>{_words('news')}</main>",
        "/news": f"<main><h1>News</h1>{_words('news')}</main>",
    }
    for path, html_ in pages.items():
        await store.enqueue("s", path, 1)
        await store.claim_path("s", path, "me", 60)
        print_ = fingerprint(html_)
        await store.complete("s", path, "me", CaptureOutcome(
            html=html_, status=200, headers={}, final_url=path, expires_at=9e9, print_=print_))
        record = await store.get_path("s", path)
        assert record is not None
        await learner.rendered(site, record, print_)
    # Each page's capture is compared with its variant's, stored before it.
    assert await store.param_evidence("s") == {
        "q": [("/search", False)], "ref": [("/news", True)],
    }
    assert {p.name: p.state for p in await store.list_params("s")} == {"q": "kept"}


async def test_a_pages_variants_are_read_from_an_index_on_both_engines(store) -> None:  # type: ignore[no-untyped-def]
    """Every capture the crawler stores asks for its page's variants: never by reading
    every path of the site (the paths' byte order, whatever the database's collation)."""
    from snapshotd.store.prints_and_params import _VARIANTS_OF
    from snapshotd.store.sqlite import SQLiteStore

    await store.enqueue_many("s", [(f"/page-{i}", 1) for i in range(3000)], 1)
    if isinstance(store, SQLiteStore):
        import sqlite3

        conn = sqlite3.connect(store.path)
        try:
            plan = " ".join(str(row) for row in conn.execute(
                "EXPLAIN QUERY PLAN " + _VARIANTS_OF.format("?", ""), ("s", "/p?", "/p@", 16)))
        finally:
            conn.close()
        assert "SCAN p" not in plan and "USING INDEX" in plan, plan
    else:
        async with store._db.acquire() as conn:
            await conn.execute("ANALYZE paths")
            rows = await conn.fetch("EXPLAIN " + _VARIANTS_OF.format("$", 'COLLATE "C"'),
                                    "s", "/p?", "/p@", 16)
        plan = " ".join(row[0] for row in rows)
        assert "Seq Scan on paths" not in plan and "paths_bytes" in plan, plan
        assert "'/p?'" in plan.partition("Index Cond")[2], plan  # the range bounds the scan
    assert (await store.variant_prints("s", "/p", 16)) == {}
