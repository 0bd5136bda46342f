"""A site's own sitemap built from its snapshots (SPEC 5.4): on a real SQLite file, served by
a real server on loopback, checked against the sitemaps.org schemas."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from lxml import etree

from snapshotd.config.settings import Settings, SiteSettings
from snapshotd.pages.fingerprints import fingerprint
from snapshotd.search.own_sitemap import build_sitemap, part_of, wants_gzip
from snapshotd.server.app import create_app
from snapshotd.store.outcome import CaptureOutcome
from snapshotd.store.sqlite import SQLiteStore
from tests.conftest import Clock
from tests.servers import serve_asgi
from tests.test_api import TOKEN, RefusingRenderer

SCHEMAS = Path(__file__).parent / "sitemaps_org"
NS = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
SITE = SiteSettings(
    name="shop", origin="http://127.0.0.1:9", hosts=("shop.test",), sitemap_path="/sitemap.xml"
)
TEXT = " ".join(f"word{n}" for n in range(30))


def valid(body: bytes, schema: str) -> etree._Element:
    """The document, after the schema found it valid."""
    doc = etree.fromstring(body)
    xsd = etree.XMLSchema(etree.parse(str(SCHEMAS / schema)))
    assert xsd.validate(doc), xsd.error_log
    return doc


def entries(doc: etree._Element, tag: str = "url") -> list[tuple[str, str]]:
    return [
        (e.findtext("s:loc", namespaces=NS), e.findtext("s:lastmod", namespaces=NS))
        for e in doc.findall(f"s:{tag}", NS)
    ]


async def _capture(store: Any, path: str, html: str, status: int = 200, **kw: Any) -> None:
    await store.enqueue("shop", path, 1, force=True)
    assert await store.claim_path("shop", path, "me", 60)
    assert await store.complete(
        "shop", path, "me", CaptureOutcome(html=html, status=status, headers={}, final_url="u",
            expires_at=9e9, print_=fingerprint(html), **kw),
    )


async def _filled(db: str, clock: Clock) -> None:
    async with SQLiteStore(db, clock=clock) as store:
        clock.now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
        await _capture(store, "/", f"<main>{TEXT}</main>")
        await _capture(store, "/a?x=1&y=2", "<main>page a</main>")
        await _capture(store, "/copy", f"<main>{TEXT}</main>", duplicate_of="/")
        await _capture(store, "/gone", "<main>no such page</main>", status=404)
        clock.now += 3600
        await _capture(store, "/", f"<main>{TEXT}</main>")  # the same text: lastmod stays
        await _capture(store, "/a?x=1&y=2", "<main>page a, changed</main>")


async def test_the_operator_and_the_public_path_serve_a_valid_sitemap(tmp_path):
    db = str(tmp_path / "s.db")
    await _filled(db, Clock())
    settings = Settings(db=db, api_tokens=(TOKEN,), sites=(SITE,))
    app = create_app(settings, renderer=RefusingRenderer(), crawler=False)
    with serve_asgi(app) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            api = "/_snapshotd/api/v1/sites/shop/sitemap"
            assert (await client.get(api)).status_code == 401
            auth = {"Authorization": f"Bearer {TOKEN}", "Accept-Encoding": "identity"}
            r = await client.get(api, headers=auth)
            assert r.status_code == 200 and r.headers["content-type"].startswith("application/xml")
            want = [
                ("http://shop.test/", "2023-11-14T22:13:20+00:00"),
                ("http://shop.test/a?x=1&y=2", "2023-11-14T23:13:20+00:00"),
            ]
            assert entries(valid(r.content, "sitemap.xsd")) == want
            assert "&amp;" in r.text  # the query's & escaped
            # The public path, for anyone, a bot or a person; gzip when asked for.
            public = {"Host": "shop.test", "Accept-Encoding": "gzip"}
            r = await client.get("/sitemap.xml", headers=public)
            assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
            assert r.headers["vary"] == "Accept-Encoding"
            assert entries(valid(r.content, "sitemap.xsd")) == want  # httpx undid the gzip
            head = await client.head("/sitemap.xml", headers=public)
            assert head.status_code == 200 and head.content == b""
            assert (await client.get("/sitemap.xml?part=2", headers=public)).status_code == 404
            assert (await client.get("/sitemap.xml?q=1", headers=public)).status_code == 400
            assert (await client.get(f"{api}?part=x", headers=auth)).status_code == 400
    # A site that did not ask for a public sitemap has none: the path is the origin's.
    quiet = create_app(
        Settings(db=db, api_tokens=(TOKEN,), sites=(replace(SITE, sitemap_path=""),)),
        renderer=RefusingRenderer(), crawler=False,
    )
    with serve_asgi(quiet) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            r = await client.get("/sitemap.xml", headers={"Host": "shop.test"})
            assert r.status_code == 502  # passed through to an origin that is not there


async def test_past_the_part_size_it_is_an_index_of_valid_parts(tmp_path):
    clock = Clock()
    async with SQLiteStore(str(tmp_path / "s.db"), clock=clock) as store:
        for n in range(5):
            clock.now = 1_700_000_000.0 + n * 86400
            await _capture(store, f"/p{n}", f"<main>page {n}</main>")
        address = "https://shop.test/sitemap.xml"
        index = await build_sitemap(store, SITE, address, None, gzipped=False, part_urls=2)
        assert index is not None
        assert entries(valid(index.body, "siteindex.xsd"), "sitemap") == [
            (f"{address}?part=1", "2023-11-15T22:13:20+00:00"),
            (f"{address}?part=2", "2023-11-17T22:13:20+00:00"),
            (f"{address}?part=3", "2023-11-18T22:13:20+00:00"),
        ]
        seen = []
        for part in (1, 2, 3):
            got = await build_sitemap(store, SITE, address, part, gzipped=True, part_urls=2)
            assert got is not None and got.headers["Content-Encoding"] == "gzip"
            seen += [loc for loc, _ in entries(valid(gzip.decompress(got.body), "sitemap.xsd"))]
        assert seen == [f"http://shop.test/p{n}" for n in range(5)]
        assert await build_sitemap(store, SITE, address, 4, gzipped=False, part_urls=2) is None


def test_queries_and_encodings():
    assert part_of("") is None and part_of("part=3") == 3
    for bad in ("part=", "part=-1", "part=1&x=2", "x=1", "part=١", "part=99999999"):
        try:
            part_of(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
    assert wants_gzip("gzip, deflate") and wants_gzip("br;q=1, gzip;q=0.5")
    assert not wants_gzip("gzip;q=0") and not wants_gzip("identity") and not wants_gzip("")


def test_the_search_settings_are_checked():
    from snapshotd.config.loading import ConfigError, site_from_mapping

    origin = {"origin": "http://127.0.0.1:9"}
    site = site_from_mapping(
        {**origin, "sitemap_path": "/maps/site.xml", "indexnow_key": "a1-" * 4}
    )
    assert (site.sitemap_path, site.indexnow_key) == ("/maps/site.xml", "a1-" * 4)
    for key, value in (
        ("sitemap_path", "sitemap.xml"), ("sitemap_path", "/_snapshotd/x.xml"),
        ("sitemap_path", "/a?b"), ("indexnow_key", "short"), ("indexnow_key", "k" * 129),
        ("indexnow_key", "key with spaces"), ("indexnow_endpoint", "ftp://x.test/"),
    ):
        try:
            site_from_mapping({**origin, key: value})
        except ConfigError as exc:
            assert key in str(exc)
            continue
        raise AssertionError((key, value))


async def test_no_page_no_sitemap_and_a_url_past_the_schema_s_bound_is_left_out(tmp_path):
    async with SQLiteStore(str(tmp_path / "s.db"), clock=Clock()) as store:
        address = "http://shop.test/sitemap.xml"
        assert await build_sitemap(store, SITE, address, None, gzipped=False) is None
        long = "/" + "x" * (2048 - len("http://shop.test/"))
        await _capture(store, long, "<main>long but within</main>")
        await _capture(store, long + "y", "<main>one past the bound</main>")
        got = await build_sitemap(store, SITE, address, None, gzipped=False)
        assert got is not None
        assert [loc for loc, _ in entries(valid(got.body, "sitemap.xsd"))] == [
            "http://shop.test" + long
        ]
