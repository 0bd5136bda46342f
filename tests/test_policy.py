"""The SSRF guard's pure decisions: no request is ever sent from here."""

from __future__ import annotations

import pytest

from snapshotd.net.address_policy import check_url, is_origin, parse_host

ORIGIN = "http://127.0.0.1:3000"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:3000/",
        "http://127.0.0.1:3000/a?b=1#c",
        "http://127.0.0.1.:3000/",  # trailing dot
        "http://2130706433:3000/",  # the origin written as one number
        "http://0x7f.0.0.1:3000/",
        "http://example.com/",
        "https://93.184.216.34/x",
        "http://172.32.0.1/",  # just outside 172.16/12
        "http://100.128.0.1/",  # just outside 100.64/10
        "data:text/plain,hello",
        "blob:http://127.0.0.1:3000/0b6b6d0e",
    ],
)
def test_allowed(url: str) -> None:
    assert check_url(url, ORIGIN) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://10.0.0.1/", "private"),
        ("http://10.255.255.255:8080/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://172.31.255.254/", "private"),
        ("http://192.168.0.1/", "private"),
        ("http://169.254.1.1/", "link-local"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://100.64.0.1/", "CGNAT"),
        ("http://100.127.255.254/", "CGNAT"),
        ("http://[fc00::1]/", "private"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://[fdff:ffff::1]/", "private"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fe80::1%25eth0]/", "link-local"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://0/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:7f00:1]/", "loopback"),
        ("http://[::ffff:10.0.0.1]/", "private"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://[2002:a9fe:a9fe::1]/", "metadata"),  # 6to4 around 169.254.169.254
        ("http://[64:ff9b::a00:1]/", "private"),  # NAT64 around 10.0.0.1
        ("http://2130706433/", "loopback"),
        ("http://017700000001/", "loopback"),
        ("http://0x7f000001/", "loopback"),
        ("http://0x7f.1/", "loopback"),
        ("http://127.1/", "loopback"),
        ("http://127.0.0.2:3000/", "loopback"),
        ("http://127.0.0.1:3001/", "loopback"),  # another port is another origin
        ("https://127.0.0.1:3000/", "loopback"),  # so is another scheme
        ("http://0xa9.0xfe.0xa9.0xfe/", "metadata"),
        ("http://2852039166/", "metadata"),
        ("http://localhost/", "loopback"),
        ("http://LOCALHOST.:3000/", "loopback"),
        ("http://api.localhost/", "loopback"),
        ("http://224.0.0.1/", "multicast"),
        ("http://1.2.3.256/", "invalid host"),
        ("file:///etc/passwd", "scheme file"),
        ("ftp://example.com/", "scheme ftp"),
        ("javascript:alert(1)", "scheme javascript"),
        ("chrome://settings", "scheme chrome"),
        ("/relative", "not an absolute URL"),
    ],
)
def test_refused(url: str, reason: str) -> None:
    why = check_url(url, ORIGIN)
    assert why is not None and reason in why


def test_a_private_origin_is_allowed_for_its_own_site_only() -> None:
    origin = "http://10.1.2.3:8000"
    assert check_url("http://10.1.2.3:8000/app.js", origin) is None
    assert check_url("http://10.1.2.3:8001/", origin) is not None
    assert check_url("http://10.1.2.4:8000/", origin) is not None


def test_default_ports() -> None:
    assert check_url("http://192.168.1.5/", "http://192.168.1.5:80") is None
    assert check_url("https://192.168.1.5:443/", "https://192.168.1.5") is None
    assert is_origin("localhost", 80, "http://localhost", "http")
    assert not is_origin("localhost", 80, "http://localhost", "https")


@pytest.mark.parametrize(
    ("host", "canonical"),
    [("2130706433", "127.0.0.1"), ("0x7f.1", "127.0.0.1"), ("[::FFFF:127.0.0.1]", "::ffff:7f00:1")],
)
def test_hosts_read_as_a_browser_reads_them(host: str, canonical: str) -> None:
    assert str(parse_host(host)) == canonical
