"""Site paths and the AJAX crawling scheme's mapping (pure)."""

from __future__ import annotations

import re

import pytest

from snapshotd.urls import (
    KEEP_ALL,
    TRACKING,
    BadRequest,
    IgnoredParams,
    site_path_from_request,
    site_path_from_url,
    split_site_path,
    valid_host,
)

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
        ("/p", "_escaped_fragment_=a%2Bb%20c", ("/p#!a+b c", True)),
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
    ["/", "/a?b=1", "/#!/faq", "/p?q=1#!key1=value1&key2=value2", "/#!a b+c%d"],
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
        ("/p", "b=2&utm_medium=x&a=%41+1", TRACKING, "/p?b=2&a=%41+1"),  # bytes kept
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
