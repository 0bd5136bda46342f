"""Site paths and the AJAX crawling scheme's mapping (pure)."""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest

from snapshotd.config.settings import SiteSettings
from snapshotd.http_text.urls import (
    KEEP_ALL,
    TRACKING,
    BadRequest,
    IgnoredParams,
    has_escaped_fragment,
    site_path_from_request,
    site_path_from_url,
    split_site_path,
    valid_host,
)
from snapshotd.sites import path_policy

# Characters the AJAX crawling scheme escapes when it moves a fragment into the query.
_FRAGMENT_SAFE = re.compile(r"[\x00-\x20#%&+\x7f-\xff]")


def escaped_fragment_url(site_path: str) -> str:
    """The ugly URL the AJAX crawling scheme gives a hashbang site path (the inverse map)."""
    path, query, fragment = split_site_path(site_path)
    if fragment is None:
        return path + (f"?{query}" if query else "")
    escaped = _FRAGMENT_SAFE.sub(
        lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8")), fragment
    )
    query = f"{query}&" if query else ""
    return f"{path}?{query}_escaped_fragment_={escaped}"


@pytest.mark.parametrize(
    "raw_path,query,expected",
    [
        ("/", "", ("/", False)),
        ("/a/b", "x=1", ("/a/b?x=1", False)),
        ("/", "_escaped_fragment_=key=value", ("/#!key=value", True)),
        # the scheme's own example: %26 inside the value is '&' in the fragment
        ("/", "_escaped_fragment_=key1=value1%26key2=value2", ("/#!key1=value1&key2=value2", True)),
        ("/p", "myquery&_escaped_fragment_=%2Fcatalog%2F145", ("/p?myquery#!/catalog/145", True)),
        ("/p", "_escaped_fragment_=/faq&b=2", ("/p?b=2#!/faq", True)),
        ("/p", "_escaped_fragment_=a%2Bb%20c", ("/p#!a+b%20c", True)),
        ("/page", "_escaped_fragment_=", ("/page", True)),  # meta fragment: the path itself
        ("/caf%C3%A9", "", ("/caf%C3%A9", False)),
    ],
)
def test_site_path_from_request(raw_path, query, expected):
    assert site_path_from_request(raw_path, query) == expected


@pytest.mark.parametrize(
    "raw_path,query,status",
    [
        ("/a%00b", "", 400),
        ("/a\x01", "", 400),
        ("/a b", "", 400),
        ("/%FF", "", 400),
        ("/%zz", "", 400),
        ("/", "_escaped_fragment_=%E0%A4", 400),
        ("/", "_escaped_fragment_=%", 400),
        ("/", "_escaped_fragment_=%0d%0a", 400),
        ("/", "q=" + "a" * 10_000, 414),
        ("/" + "a" * 5000, "", 414),
        ("relative", "", 400),
    ],
)
def test_bad_requests(raw_path, query, status):
    with pytest.raises(BadRequest) as info:
        site_path_from_request(raw_path, query)
    assert info.value.status == status


@pytest.mark.parametrize(
    "site_path",
    ["/", "/a?b=1", "/#!/faq", "/p?q=1#!key1=value1&key2=value2", "/#!a%20b+c%25d"],
)
def test_escaped_fragment_round_trip(site_path):
    ugly = escaped_fragment_url(site_path)
    path, _, query = ugly.partition("?")
    assert site_path_from_request(path, query)[0] == site_path


def test_escaped_fragment_url_escapes_as_the_scheme_says():
    assert escaped_fragment_url("/p?q=1#!a=1&b=2") == "/p?q=1&_escaped_fragment_=a=1%26b=2"


def test_split_and_url():
    assert split_site_path("/a?b#!c") == ("/a", "b", "c")
    assert split_site_path("/a") == ("/a", "", None)
    assert site_path_from_url("http://h/a?x=1#!/f") == "/a?x=1#!/f"
    assert site_path_from_url("http://h/a#top") == "/a"
    assert site_path_from_url("mailto:x@y") is None


@pytest.mark.parametrize(
    "host,ok",
    [
        ("example.com", True),
        ("shop.example.com:8080", True),
        ("127.0.0.1:80", True),
        ("[::1]:8080", True),
        ("bad host", False),
        ("a/b", False),
        ("x" * 300, False),
        ("", False),
        ("exa mple.com", False),
        ("-bad.com", False),
    ],
)
def test_valid_host(host, ok):
    assert valid_host(host) is ok


# --- Ignored query parameters: not part of a page's identity --------------------------------

SHOP = IgnoredParams(("@tracking", "sessionid", "sort_*"))


@pytest.mark.parametrize(
    ("raw_path", "query", "ignore", "expected"),
    [
        ("/about", "utm_source=x", TRACKING, "/about"),
        ("/about", "utm_source=x&utm_medium=y&fbclid=z&gclid=1&msclkid=2", TRACKING, "/about"),
        ("/p", "b=2&utm_medium=x&a=%2F+1", TRACKING, "/p?b=2&a=%2F+1"),  # bytes kept
        ("/p", "z=1&_ga=2&a=3&_gl=4&m", TRACKING, "/p?z=1&a=3&m"),  # order kept
        ("/p", "a=1&&b=2", TRACKING, "/p?a=1&&b=2"),  # nothing dropped, nothing changed
        ("/p", "a=1&&utm_id=3&", TRACKING, "/p?a=1"),  # dropped: empty ones go too
        ("/p", "utm%5Fsource=x&q=1", TRACKING, "/p?q=1"),  # the decoded name counts
        ("/p", "UTM_SOURCE=x", TRACKING, "/p?UTM_SOURCE=x"),  # case-sensitive
        ("/p", "utm_source", TRACKING, "/p"),  # no value
        ("/p", "utmost=1&xutm_a=2", TRACKING, "/p?utmost=1&xutm_a=2"),  # globs are whole names
        ("/p", "utm_source=x", KEEP_ALL, "/p?utm_source=x"),
        ("/p", "sessionid=9&sort_by=a&sort=b&fbclid=1", SHOP, "/p?sort=b"),
        ("/p", "utm_source=x", IgnoredParams(("sessionid",)), "/p?utm_source=x"),  # replaced
        ("/p", "ids[]=1&x=2", IgnoredParams(("ids[]",)), "/p?x=2"),  # only * is special
        # the fragment is the page's own: nothing is dropped from it
        ("/", "utm_id=x&_escaped_fragment_=/a%3Futm_id%3Dy", TRACKING, "/#!/a?utm_id=y"),
        ("/", "_escaped_fragment_=&fbclid=1", TRACKING, "/"),
    ],
)
def test_ignored_params_are_dropped_from_the_site_path(raw_path, query, ignore, expected):
    assert site_path_from_request(raw_path, query, ignore)[0] == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h/a?utm_source=x#!/f", "/a#!/f"),
        ("/a?x=1&fbclid=2#top", "/a?x=1"),
        ("https://h/?_escaped_fragment_=/faq&gclid=1", "/#!/faq"),
    ],
)
def test_site_path_from_url_goes_through_the_same_mapping(url, expected):
    assert site_path_from_url(url) == expected


def test_a_bad_target_in_a_url_is_a_bad_request():
    with pytest.raises(BadRequest):
        site_path_from_url("http://h/a%zz")


# --- One page, one site path: every way of naming a page gives the same one ------------------

SITE = SiteSettings(name="s", origin="http://127.0.0.1:3000")


@pytest.mark.parametrize(
    ("named", "expected"),
    [
        # hex case, escapes of unreserved characters
        ("/caf%c3%a9", "/caf%C3%A9"),
        ("/%7euser/%7Ea", "/~user/~a"),
        ("/a%2Db%2e%5F%41", "/a-b._A"),
        ("/a%2fb", "/a%2Fb"),  # an encoded '/' stays encoded
        ("/p?q=%7e&r=%2f", "/p?q=~&r=%2F"),
        # dot segments
        ("/a/./b/../c", "/a/c"),
        ("/a/b/..", "/a/"),
        ("/../../x", "/x"),
        ("/a/%2E%2E/b", "/b"),
        ("/a/.hidden/..x", "/a/.hidden/..x"),
        # non-ASCII and spaces in a #! fragment, however it is written
        ("/#!/café", "/#!/caf%C3%A9"),
        ("/#!/caf%C3%A9", "/#!/caf%C3%A9"),
        ("/#!/caf%c3%a9", "/#!/caf%C3%A9"),
        ("/#!/x y", "/#!/x%20y"),
        ("/#!/%7ex", "/#!/~x"),
        ("/?_escaped_fragment_=/caf%C3%A9", "/#!/caf%C3%A9"),
        ("/?_escaped_fragment_=/caf%25C3%25A9", "/#!/caf%C3%A9"),  # Google's escaping
        ("/?_escaped_fragment_=/x%20y", "/#!/x%20y"),
        ("/?_escaped_fragment_=100%25", "/#!100%25"),
        ("/?%5Fescaped_fragment_=/a", "/#!/a"),
        # only a parameter named exactly _escaped_fragment_ is the scheme's
        ("/items?q=_escaped_fragment_", "/items?q=_escaped_fragment_"),
        ("/items?x_escaped_fragment_=1", "/items?x_escaped_fragment_=1"),
        # the tracking parameters still go
        ("/a/./b?utm_source=x&k=%7e", "/a/b?k=~"),
        # as a browser loads it: "\\" in the path is "/", before the dot segments go
        ("/x\\..\\admin/", "/admin/"),
        ("/x/..\\admin/", "/admin/"),
        ("/x\\%2e%2E\\admin/", "/admin/"),
        ("/x\\..\\%61dmin/", "/admin/"),
        ("/a%5Cb", "/a%5Cb"),  # an encoded "\\" stays as it is, as in a browser
        # and with the characters it encodes encoded
        ('/a{b}|^`"<>', "/a%7Bb%7D%7C%5E%60%22%3C%3E"),
        ("/p?q='x'&r=\"<>\"", "/p?q=%27x%27&r=%22%3C%3E%22"),
    ],
)
def test_one_site_path_for_each_page(named: str, expected: str) -> None:
    from snapshotd.api.inputs import normalise_site_path

    path, _, query = named.partition("#")[0].partition("?")
    fragment = named.partition("#")[2]
    url = "http://127.0.0.1:3000" + named
    # a link, a sitemap entry, a canonical (the crawler)
    assert path_policy.path_of(SITE, url) == expected
    # a path given to the API (which refuses dot segments with 400)
    if not any(seg in (".", "..") for seg in unquote(path).split("/")):
        assert normalise_site_path(named, TRACKING) == expected
    # an absolute URL (rules eval, the render endpoint)
    assert site_path_from_url(url) == expected
    if not fragment and named.isascii():
        # a request target (the proxy)
        assert site_path_from_request(path, query)[0] == expected


def test_what_a_browser_leaves_alone_in_a_request_target_stays() -> None:
    assert site_path_from_request("/a'b[c]", "q=a\\b&s={}|`^[]")[0] == (
        "/a'b[c]?q=a\\b&s={}|`^[]"
    )


def test_a_request_target_with_raw_bytes_is_one_with_their_escapes() -> None:
    raw = "/caf\u00c3\u00a9"  # the bytes C3 A9 of a request line, read as latin-1
    assert site_path_from_request(raw, "", encoding="latin-1")[0] == "/caf%C3%A9"


@pytest.mark.parametrize(
    ("query", "escaped"),
    [
        ("_escaped_fragment_=", True),
        ("a=1&_escaped_fragment_=/x", True),
        ("%5Fescaped_fragment_=/x", True),
        ("q=_escaped_fragment_", False),
        ("x_escaped_fragment_=1", False),
        ("_escaped_fragment_x=1", False),
        ("", False),
    ],
)
def test_only_the_parameter_named_escaped_fragment_counts(query: str, escaped: bool) -> None:
    assert has_escaped_fragment(query) is escaped
    assert site_path_from_request("/p", query)[1] is escaped
