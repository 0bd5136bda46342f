"""Site paths and the AJAX crawling scheme's mapping (pure)."""

from __future__ import annotations

import pytest

from snapshotd.urls import (
    BadRequest,
    escaped_fragment_url,
    site_path_from_request,
    site_path_from_url,
    split_site_path,
    valid_host,
)


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
