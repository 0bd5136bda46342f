"""sitemaps.py: parsing (pure) and fetching from a real server on loopback."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime

import pytest
from pytest_httpserver import HTTPServer

from snapshotd.crawl.sitemaps import (
    SitemapError,
    decompress,
    fetch_sitemap,
    parse_lastmod,
    parse_sitemap,
)
from snapshotd.net.fetch import Fetcher

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*locs: str, extra: str = "") -> bytes:
    body = "".join(f"<url><loc>{loc}</loc>{extra}</url>" for loc in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{body}</urlset>'.encode()


def index(*locs: str) -> bytes:
    body = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f"<sitemapindex {NS}>{body}</sitemapindex>".encode()


def test_urlset_with_lastmod():
    data = (
        f"<urlset {NS}><url><loc> http://h/a </loc><lastmod>2024-05-01</lastmod>"
        "<changefreq>daily</changefreq></url><url><loc>http://h/b</loc></url>"
        "<url><lastmod>2024-01-01</lastmod></url></urlset>"
    ).encode()
    sitemap = parse_sitemap(data)
    assert sitemap.kind == "urlset" and not sitemap.truncated
    assert [(e.loc, e.lastmod) for e in sitemap.entries] == [
        ("http://h/a", datetime(2024, 5, 1, tzinfo=UTC).timestamp()),
        ("http://h/b", None),
    ]


def test_index_and_gzip_and_no_namespace():
    sitemap = parse_sitemap(gzip.compress(index("http://h/s1.xml", "http://h/s2.xml.gz")))
    assert sitemap.kind == "sitemapindex"
    assert [e.loc for e in sitemap.entries] == ["http://h/s1.xml", "http://h/s2.xml.gz"]
    plain = parse_sitemap(b"<urlset><url><loc>http://h/x</loc></url></urlset>")
    assert [e.loc for e in plain.entries] == ["http://h/x"]


def test_text_sitemap():
    sitemap = parse_sitemap(b"\xef\xbb\xbfhttp://h/a\n\n  https://h/b  \nnot a url\n")
    assert sitemap.kind == "text"
    assert [e.loc for e in sitemap.entries] == ["http://h/a", "https://h/b"]


def test_url_bound_truncates():
    sitemap = parse_sitemap(urlset(*(f"http://h/{i}" for i in range(10))), max_urls=4)
    assert len(sitemap.entries) == 4 and sitemap.truncated


def test_size_bound_plain_and_gzip_bomb():
    with pytest.raises(SitemapError, match="larger than"):
        parse_sitemap(urlset("http://h/a") + b" " * 2000, max_bytes=1000)
    bomb = gzip.compress(b" " * (5 * 1024 * 1024))  # a few KB that grow to 5 MB
    assert len(bomb) < 10_000
    with pytest.raises(SitemapError, match="once uncompressed"):
        decompress(bomb, limit=1024 * 1024)
    assert decompress(gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"<html><body>nope</body></html>", "root element is <html>"),
        (b"<urlset><url><loc>x</loc>", "bad XML"),
        (b"\x1f\x8bnot really gzip", "bad gzip"),
        (
            b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;">]>'
            b"<urlset><url><loc>&b;</loc></url></urlset>",
            "refused XML",
        ),
        (
            b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
            b"<urlset><url><loc>&e;</loc></url></urlset>",
            "refused XML",
        ),
    ],
)
def test_bad_sitemaps(data, message):
    with pytest.raises(SitemapError, match=message):
        parse_sitemap(data)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01", datetime(2024, 5, 1, tzinfo=UTC)),
        ("2024-05-01T10:00:00Z", datetime(2024, 5, 1, 10, tzinfo=UTC)),
        ("2024-05-01T12:00:00+02:00", datetime(2024, 5, 1, 10, tzinfo=UTC)),
        ("yesterday", None),
        ("", None),
    ],
)
def test_lastmod(text, expected):
    assert parse_lastmod(text) == (expected.timestamp() if expected else None)


class Kept:
    """The entries a fetch hands over, file by file."""

    def __init__(self) -> None:
        self.files: list[list[str]] = []

    async def __call__(self, entries) -> None:
        self.files.append([e.loc for e in entries])

    @property
    def locs(self) -> list[str]:
        return [loc for file in self.files for loc in file]


@pytest.fixture
def server():
    s = HTTPServer(host="127.0.0.1", port=0)
    s.start()
    yield s
    s.clear()
    s.stop()


async def test_fetch_follows_a_gzipped_index_on_the_same_site(server):
    base = f"http://127.0.0.1:{server.port}"
    server.expect_request("/index.xml.gz").respond_with_data(
        gzip.compress(
            index(
                f"{base}/s1.xml",
                "/s2.xml.gz",
                "http://127.0.0.2:9/elsewhere.xml",  # another site: never fetched
                f"{base}/missing.xml",
            )
        ),
        content_type="application/gzip",
    )
    server.expect_request("/s1.xml").respond_with_data(urlset(f"{base}/a", f"{base}/b"))
    server.expect_request("/s2.xml.gz").respond_with_data(gzip.compress(urlset(f"{base}/c")))
    kept = Kept()
    async with Fetcher() as client:
        fetched = await fetch_sitemap(
            client,
            f"{base}/index.xml.gz",
            kept,
            origin=base,
            same_site=lambda u: u.startswith(base + "/"),
        )
    assert kept.files == [[f"{base}/a", f"{base}/b"], [f"{base}/c"]]
    assert fetched.urls == 3 and fetched.files == 4 and fetched.failed == 1
    assert any("another site" in e for e in fetched.errors)
    assert any("missing.xml: answered 500" in e for e in fetched.errors)  # no handler
    assert not any("127.0.0.2" in str(r.url) for r, _ in server.log)


async def test_fetch_refuses_an_oversized_download(server):
    base = f"http://127.0.0.1:{server.port}"
    server.expect_request("/big.xml").respond_with_data(urlset(*(["http://h/x"] * 200)))
    kept = Kept()
    async with Fetcher() as client:
        fetched = await fetch_sitemap(
            client,
            f"{base}/big.xml",
            kept,
            origin=base,
            same_site=lambda u: True,
            max_bytes=1000,
        )
    assert kept.files == [] and fetched.urls == 0 and "larger than" in fetched.errors[0]


async def test_fetch_reports_an_unreachable_server():
    kept = Kept()
    async with Fetcher() as client:
        fetched = await fetch_sitemap(
            client,
            "http://127.0.0.1:9/none.xml",
            kept,
            origin="http://127.0.0.1:9",
            same_site=bool,
        )
    assert kept.files == [] and "fetch failed" in fetched.errors[0]


async def test_each_file_is_handed_over_before_the_next_is_fetched(server):
    base = f"http://127.0.0.1:{server.port}"
    server.expect_request("/index.xml").respond_with_data(index("/s1.xml", "/s2.xml"))
    server.expect_request("/s1.xml").respond_with_data(urlset(f"{base}/a"))
    server.expect_request("/s2.xml").respond_with_data(urlset(f"{base}/b"))
    fetched_before: list[list[str]] = []

    async def each(entries) -> None:
        fetched_before.append([r.path for r, _ in server.log])

    async with Fetcher() as client:
        await fetch_sitemap(
            client, f"{base}/index.xml", each, origin=base, same_site=lambda u: True
        )
    assert fetched_before == [["/index.xml", "/s1.xml"], ["/index.xml", "/s1.xml", "/s2.xml"]]


def test_elements_without_a_loc_are_not_kept_while_parsing():
    import tracemalloc

    # 512 KiB of <url/> is about 87,000 elements; kept in the tree, they cost ~10 MB (traced
    # allocations make a parse several times slower: a larger input only lengthens the test).
    count = 512 * 1024 // 6
    data = b"<urlset>" + b"<url/>" * count + b"<x>y</x>" * 1000 + b"</urlset>"
    tracemalloc.start()
    try:
        sitemap = parse_sitemap(data)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sitemap.kind == "urlset" and sitemap.entries == ()
    assert peak < 4 * 1024 * 1024


def test_an_image_sitemap_lists_its_pages_not_its_images():
    data = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
        xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
  <url>
    <loc>https://shop.test/items/1</loc>
    <image:image><image:loc>https://cdn.test/1.jpg</image:loc></image:image>
  </url>
  <url>
    <image:image><image:loc>https://cdn.test/2.jpg</image:loc></image:image>
    <loc>https://shop.test/items/2</loc>
    <lastmod>2024-05-01</lastmod>
  </url>
</urlset>"""
    sitemap = parse_sitemap(data)
    assert [e.loc for e in sitemap.entries] == [
        "https://shop.test/items/1",
        "https://shop.test/items/2",
    ]


async def test_a_failure_to_hand_over_entries_ends_the_fetch_as_an_error(server):
    base = f"http://127.0.0.1:{server.port}"
    server.expect_request("/index.xml").respond_with_data(index("/s1.xml", "/s2.xml"))
    server.expect_request("/s1.xml").respond_with_data(urlset(f"{base}/a"))
    server.expect_request("/s2.xml").respond_with_data(urlset(f"{base}/b"))

    async def each(entries) -> None:
        raise OSError("database is locked")

    async with Fetcher() as client:
        fetched = await fetch_sitemap(
            client, f"{base}/index.xml", each, origin=base, same_site=lambda u: True
        )
    assert fetched.failed == 1 and fetched.urls == 0
    assert fetched.errors == [f"{base}/s1.xml: handing over its entries failed: database is locked"]
    assert [r.path for r, _ in server.log] == ["/index.xml", "/s1.xml"]
