"""pages/links.py: links out of captured HTML, table-driven."""

from __future__ import annotations

import pytest

from snapshotd.pages.links import extract_links, normalize_url

PAGE = "http://127.0.0.1:3000/shop/list?page=2"


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("/a", "http://127.0.0.1:3000/a"),
        ("b", "http://127.0.0.1:3000/shop/b"),
        ("../c?x=1", "http://127.0.0.1:3000/c?x=1"),
        ("?page=3", "http://127.0.0.1:3000/shop/list?page=3"),
        ("#top", "http://127.0.0.1:3000/shop/list?page=2"),
        ("/d#section", "http://127.0.0.1:3000/d"),
        ("/#!/faq", "http://127.0.0.1:3000/#!/faq"),
        ("#!/contact", "http://127.0.0.1:3000/shop/list?page=2#!/contact"),
        ("HTTP://EXAMPLE.com:80/X", "http://example.com/X"),
        ("https://example.com:443", "https://example.com/"),
        ("//cdn.example.com/x", "http://cdn.example.com/x"),
        ("/with space/é", "http://127.0.0.1:3000/with%20space/%C3%A9"),
        ("/kept%2Fescape", "http://127.0.0.1:3000/kept%2Fescape"),
        ("  /trimmed  ", "http://127.0.0.1:3000/trimmed"),
        ("mailto:a@example.com", None),
        ("javascript:void(0)", None),
        ("tel:+331234", None),
        ("data:text/html,hi", None),
        ("ftp://example.com/f", None),
        ("", None),
        ("http://[::1]:8080/v6", "http://[::1]:8080/v6"),
        ("http://bad:port/", None),
        # "\\" before the query is "/", as a browser reads the href
        ("/x\\..\\admin/", "http://127.0.0.1:3000/admin/"),
        ("\\\\other.example\\x", "http://other.example/x"),
        ("a\\b?q=\\", "http://127.0.0.1:3000/shop/a/b?q=%5C"),
    ],
)
def test_normalize_url(href, expected):
    assert normalize_url(href, PAGE) == expected


def links_of(body: str, head: str = "", url: str = PAGE):
    return extract_links(f"<html><head>{head}</head><body>{body}</body></html>", url)


def test_anchors_in_document_order_without_repeats_or_nofollow():
    page = links_of(
        '<a href="/b">b</a><a href="/a">a</a><a href="/b#x">b again</a>'
        '<a rel="nofollow" href="/secret">no</a><a rel="external NoFollow" href="/s2">no</a>'
        '<a rel="noopener" href="/c">c</a><a>no href</a><area href="/map-area">'
    )
    assert page.links == (
        "http://127.0.0.1:3000/b",
        "http://127.0.0.1:3000/a",
        "http://127.0.0.1:3000/c",
        "http://127.0.0.1:3000/map-area",
    )
    assert page.canonical is None and page.nofollow is False


def test_link_rels_canonical_prev_next():
    page = links_of(
        '<a href="/x">x</a>',
        head='<link rel="canonical" href="/main"><link rel="canonical" href="/second">'
        '<link rel="prev" href="/p1"><link rel="next" href="/p3">'
        '<link rel="stylesheet" href="/style.css"><link rel="alternate" href="/feed">',
    )
    assert page.canonical == "http://127.0.0.1:3000/main"
    assert page.links == (
        "http://127.0.0.1:3000/p1",
        "http://127.0.0.1:3000/p3",
        "http://127.0.0.1:3000/x",
    )


def test_base_href_changes_resolution():
    page = links_of(
        '<a href="rel">r</a><a href="/abs">a</a>',
        head='<base href="http://127.0.0.1:3000/other/dir/"><base href="/ignored/">',
    )
    assert page.links == ("http://127.0.0.1:3000/other/dir/rel", "http://127.0.0.1:3000/abs")


def test_relative_base_href_resolves_against_page():
    page = links_of('<a href="x">x</a>', head='<base href="/root/">')
    assert page.links == ("http://127.0.0.1:3000/root/x",)


@pytest.mark.parametrize(
    ("meta", "nofollow"),
    [
        ('<meta name="robots" content="nofollow">', True),
        ('<meta name="ROBOTS" content="noindex, NoFollow">', True),
        ('<meta name="robots" content="none">', True),
        ('<meta name="robots" content="noindex">', False),
        ('<meta name="googlebot" content="nofollow">', False),
        ('<meta name="description" content="nofollow">', False),
    ],
)
def test_meta_robots(meta, nofollow):
    page = links_of('<a href="/a">a</a>', head=meta)
    assert page.nofollow is nofollow
    assert page.links == ("http://127.0.0.1:3000/a",)  # the caller decides what nofollow does


def test_hashbang_page_resolves_relative_links_against_its_url():
    page = links_of(
        '<a href="#!/other">o</a><a href="/items">i</a><a href="#plain">p</a>',
        url="http://127.0.0.1:3000/#!/faq",
    )
    assert page.links == (
        "http://127.0.0.1:3000/#!/other",
        "http://127.0.0.1:3000/items",
        "http://127.0.0.1:3000/",
    )


def test_broken_html_does_not_raise():
    page = extract_links('<a href="/ok">x<div><a href=/unquoted>y</a <<<>', PAGE)
    assert "http://127.0.0.1:3000/ok" in page.links
    assert extract_links("", PAGE).links == ()
