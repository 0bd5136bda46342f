"""Crawler verification alone: client addresses, published range lists, the families' DNS
rules, the cache, and dnspython against a real DNS server on loopback (answering from a
table, so no made-up name reaches the system's resolver)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import AsyncIterator

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from snapshotd.config.loading import load_settings
from snapshotd.config.values import ConfigError
from snapshotd.net.fetch import Fetcher
from snapshotd.verify import UNVERIFIABLE, UNVERIFIED, VERIFIED, Verifier
from snapshotd.verify.ranges import RangeLists, Ranges, parse_ranges
from snapshotd.verify.resolver import DnsFailure, SystemResolver, TableResolver
from snapshotd.web.client_address import TrustedProxies
from snapshotd.web.crawler_families import family_of, name_in, parse_range_source
from tests.servers import serve_asgi

# The shape Google, Bing, Apple and OpenAI publish, with documentation addresses.
PUBLISHED = json.dumps({
    "creationTime": "2026-11-01T00:00:00.000000",
    "prefixes": [{"ipv4Prefix": "192.0.2.0/28"}, {"ipv6Prefix": "2001:db8:1::/64"}],
})

# --------------------------------------------------------------------------- client address


@pytest.mark.parametrize(
    ("peer", "headers", "client"),
    [
        ("127.0.0.8", {"x-forwarded-for": "127.0.0.7"}, "127.0.0.8"),  # untrusted: ignored
        ("127.0.0.9", {"x-forwarded-for": "127.0.0.7"}, "127.0.0.7"),
        ("127.0.0.9", {"x-forwarded-for": "127.0.0.8, 127.0.0.7"}, "127.0.0.7"),  # the last
        ("127.0.0.9", {"x-forwarded-for": "127.0.0.7, 10.1.2.3"}, "127.0.0.7"),  # trusted hop
        ("127.0.0.9", {"x-forwarded-for": "127.0.0.7, unknown"}, "127.0.0.9"),  # no address
        ("127.0.0.9", {"x-forwarded-for": "garbage"}, "127.0.0.9"),
        ("127.0.0.9", {}, "127.0.0.9"),
        ("127.0.0.9", {"forwarded": 'for=127.0.0.8;proto=http, for="[2001:db8::7]:443"'},
         "2001:db8::7"),
        ("127.0.0.9", {"forwarded": "for=_hidden"}, "127.0.0.9"),
        ("::ffff:127.0.0.9", {"x-forwarded-for": "127.0.0.7:4711"}, "127.0.0.7"),
        ("127.0.0.9", {"x-forwarded-for": "::ffff:192.0.2.1"}, "192.0.2.1"),
    ],
)
def test_the_client_is_the_last_address_a_trusted_front_server_added(peer, headers, client):
    trusted = TrustedProxies(["127.0.0.9", "10.0.0.0/8"])
    assert trusted.client(peer, headers) == client


def test_with_no_trusted_proxies_no_header_is_believed():
    assert TrustedProxies().client("127.0.0.9", {"x-forwarded-for": "192.0.2.1"}) == "127.0.0.9"


def test_trusted_proxies_are_checked_where_settings_are_read():
    env = {"SNAPSHOTD_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"}
    assert load_settings(env=env).trusted_proxies == ("127.0.0.1", "10.0.0.0/8")
    with pytest.raises(ConfigError, match="trusted_proxies: 'nginx' is not an address"):
        load_settings(env={"SNAPSHOTD_TRUSTED_PROXIES": "nginx"})
    with pytest.raises(ConfigError, match="bot_ranges: unknown family 'altavista'"):
        load_settings(env={"SNAPSHOTD_BOT_RANGES": "altavista=published"})
    with pytest.raises(ConfigError, match="bot_ranges: 'ftp://x' *: expected an http"):
        load_settings(env={"SNAPSHOTD_BOT_RANGES": "google=ftp://x"})


# --------------------------------------------------------------------------- families


def test_families_are_data_and_a_name_matches_only_under_its_domain():
    assert family_of("Googlebot").name == "google"
    assert family_of("bingbot").name == "bing"
    assert family_of("GPTBot").name == "openai"
    assert family_of("facebookexternalhit") is None
    google = family_of("Googlebot").dns
    assert name_in("crawl-66-249-66-1.googlebot.com.", google)
    assert name_in("GoogleBot.COM", google)
    assert not name_in("crawl.evilgooglebot.com", google)
    assert not name_in("googlebot.com.evil.test", google)


def test_published_names_the_families_own_lists():
    name, sources = parse_range_source("google=published")
    assert name == "google" and all(s.startswith("https://developers.google.com/") for s in sources)
    assert parse_range_source("bing=/etc/snapshotd/bingbot.json") == (
        "bing", ("/etc/snapshotd/bingbot.json",)
    )
    with pytest.raises(ValueError, match="yandex publishes no range list"):
        parse_range_source("yandex=published")


# --------------------------------------------------------------------------- ranges


def test_published_json_and_plain_lists_are_read():
    assert [str(n) for n in parse_ranges(PUBLISHED)] == ["192.0.2.0/28", "2001:db8:1::/64"]
    assert [str(n) for n in parse_ranges("# DuckDuckBot\n192.0.2.9\n\n198.51.100.0/24 # x\n")] == [
        "192.0.2.9/32", "198.51.100.0/24"
    ]
    for bad in ('{"prefixes": 3}', "not a network", '{"prefixes": [{"ipv4Prefix": 7}]}'):
        with pytest.raises(ValueError):
            parse_ranges(bad)


def test_a_range_look_up_is_exact_at_the_edges():
    ranges = Ranges(parse_ranges("192.0.2.0/28\n192.0.2.16/28\n2001:db8::/126"))
    inside = ["192.0.2.0", "192.0.2.15", "192.0.2.31", "2001:db8::3"]
    outside = ["192.0.1.255", "192.0.2.32", "2001:db8::4", "::1"]
    assert all(ipaddress.ip_address(a) in ranges for a in inside)
    assert not any(ipaddress.ip_address(a) in ranges for a in outside)


async def test_range_lists_load_from_files_and_keep_what_they_had_when_a_reload_fails(tmp_path):
    path = tmp_path / "googlebot.json"
    path.write_text(PUBLISHED)
    lists = RangeLists([("google", str(path))], every=3600)
    await lists.load()
    assert lists.lookup("google", ipaddress.ip_address("192.0.2.3")) is True
    assert lists.lookup("google", ipaddress.ip_address("192.0.2.99")) is False
    assert lists.lookup("bing", ipaddress.ip_address("192.0.2.3")) is None
    path.write_text("{broken")
    await lists.load()
    assert lists.lookup("google", ipaddress.ip_address("192.0.2.3")) is True
    path.write_text("198.51.100.0/24\n")
    await lists.load()
    assert lists.lookup("google", ipaddress.ip_address("192.0.2.3")) is False
    assert lists.lookup("google", ipaddress.ip_address("198.51.100.1")) is True


async def test_range_lists_at_a_url_are_fetched_through_the_fetcher_and_reloaded():
    served = {"n": 0}

    async def ranges(request: Request) -> PlainTextResponse:
        served["n"] += 1
        return PlainTextResponse("192.0.2.0/24" if served["n"] == 1 else "198.51.100.0/24")

    with serve_asgi(Starlette(routes=[Route("/bingbot.json", ranges)])) as base:
        url = f"{base}/bingbot.json"
        # Judged by the address policy: a loopback URL is refused for a public list...
        refused = RangeLists([("bing", url)], every=60)
        await refused.load()
        assert served["n"] == 0 and refused.families() == set()
        # ...and fetched when the fetch is judged for that origin.
        async with Fetcher() as fetcher:
            lists = RangeLists([("bing", url)], fetcher=fetcher, every=60, origin=base)
            await lists.load()
            assert lists.lookup("bing", ipaddress.ip_address("192.0.2.1")) is True
            lists.every = 0.05  # the schedule, made short
            await lists.start()
            while served["n"] < 3:
                await asyncio.sleep(0.02)
            await lists.close()
            assert lists.lookup("bing", ipaddress.ip_address("198.51.100.1")) is True


# --------------------------------------------------------------------------- the verifier


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def google_table(**kw) -> TableResolver:
    return TableResolver(
        ptr={"192.0.2.1": ["crawl-192-0-2-1.googlebot.com"],
             "192.0.2.2": ["crawl-192-0-2-1.googlebot.com"],  # forward says another
             "192.0.2.3": ["crawl.evil.test"]},
        addresses={"crawl-192-0-2-1.googlebot.com": ["192.0.2.1"],
                   "crawl.evil.test": ["192.0.2.3"]},
        **kw,
    )


async def test_reverse_then_forward_dns_verifies_and_the_answer_is_kept_for_its_ttl():
    clock = Clock()
    resolver = google_table(ttl=120)
    verifier = Verifier(resolver=resolver, clock=clock)
    assert verifier.now("Googlebot", "192.0.2.1") is None  # asked in the background
    assert await verifier.claim("Googlebot", "192.0.2.1", wait=5) == VERIFIED
    assert await verifier.claim("Googlebot", "192.0.2.2", wait=5) == UNVERIFIED
    assert await verifier.claim("Googlebot", "192.0.2.3", wait=5) == UNVERIFIED
    assert await verifier.claim("facebookexternalhit", "192.0.2.1", wait=5) == UNVERIFIABLE
    asked = len(resolver.queries)
    clock.t += 119
    assert verifier.now("Googlebot", "192.0.2.1") == VERIFIED
    assert len(resolver.queries) == asked  # from the cache
    clock.t += 2
    assert verifier.now("Googlebot", "192.0.2.1") is None  # expired: asked again
    await verifier.close()


async def test_ranges_verify_at_once_and_either_way_counts(tmp_path):
    path = tmp_path / "google.json"
    path.write_text(PUBLISHED)
    resolver = google_table()
    verifier = Verifier(RangeLists([("google", str(path))]), resolver)
    await verifier.start()
    assert verifier.now("Googlebot", "192.0.2.9") == VERIFIED  # in the ranges, no DNS
    assert resolver.queries == []
    assert verifier.now("Googlebot", "198.51.100.1") is None  # not in them: DNS decides
    await verifier.close()


async def test_a_family_with_ranges_only_is_unverified_outside_them(tmp_path):
    path = tmp_path / "gptbot.json"
    path.write_text(PUBLISHED)
    verifier = Verifier(RangeLists([("openai", str(path))]), google_table())
    assert verifier.now("GPTBot", "192.0.2.1") == UNVERIFIABLE  # nothing loaded yet
    await verifier.start()
    assert verifier.now("GPTBot", "192.0.2.1") == VERIFIED
    assert verifier.now("GPTBot", "198.51.100.1") == UNVERIFIED
    await verifier.close()


async def test_a_failed_look_up_is_unverified_for_a_short_while_only():
    clock = Clock()
    verifier = Verifier(resolver=google_table(fail=["192.0.2.1"]), clock=clock, timeout=0.2)
    assert await verifier.claim("Googlebot", "192.0.2.1", wait=5) == UNVERIFIED
    clock.t += 31
    assert verifier.now("Googlebot", "192.0.2.1") is None
    await verifier.close()


async def test_a_hanging_look_up_ends_at_its_time_out_and_a_claim_waits_only_its_wait():
    # A look-up with an hour's time-out: the claim ends at its own wait, the look-up goes on.
    verifier = Verifier(resolver=google_table(hang=["192.0.2.1"]), timeout=3600)
    assert await verifier.claim("Googlebot", "192.0.2.1", wait=0.05) == UNVERIFIED
    assert verifier.now("Googlebot", "192.0.2.1") is None  # still looking up
    await verifier.close()
    # A short time-out ends the look-up (2 x timeout), and its outcome is kept.
    verifier = Verifier(resolver=google_table(hang=["192.0.2.1"]), timeout=0.1)
    assert await verifier.claim("Googlebot", "192.0.2.1", wait=0.05) == UNVERIFIED
    for _ in range(600):  # 60 s at most: only stops a hang
        if verifier.now("Googlebot", "192.0.2.1") is not None:
            break
        await asyncio.sleep(0.1)
    assert verifier.now("Googlebot", "192.0.2.1") == UNVERIFIED
    await verifier.close()


# --------------------------------------------------------------------------- dnspython


class TableDns(asyncio.DatagramProtocol):
    """A DNS server on loopback answering PTR, A and AAAA from tables; names in ``silent``
    get no answer."""

    def __init__(self, records: dict[tuple[str, str], tuple[list[str], int]],
                 silent: set[str]) -> None:
        self.records, self.silent = records, silent
        self.asked: list[tuple[str, str]] = []

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:  # type: ignore[no-untyped-def]
        query = dns.message.from_wire(data)
        question = query.question[0]
        name = question.name.to_text()
        kind = dns.rdatatype.to_text(question.rdtype)
        self.asked.append((name, kind))
        if name in self.silent:
            return
        response = dns.message.make_response(query)
        found = self.records.get((name, kind))
        if found is None:
            known = any(n == name for n, _ in self.records)
            response.set_rcode(dns.rcode.NOERROR if known else dns.rcode.NXDOMAIN)
        else:
            values, ttl = found
            response.answer.append(dns.rrset.from_text(name, ttl, "IN", kind, *values))
        self.transport.sendto(response.to_wire(), addr)


@pytest.fixture
async def table_dns() -> AsyncIterator[tuple[TableDns, int]]:
    records = {
        ("1.66.249.66.in-addr.arpa.", "PTR"): (["crawl-66-249-66-1.googlebot.com."], 300),
        ("crawl-66-249-66-1.googlebot.com.", "A"): (["66.249.66.1"], 120),
        ("2.66.249.66.in-addr.arpa.", "PTR"): (["crawl-66-249-66-1.googlebot.com."], 300),
    }
    loop = asyncio.get_running_loop()
    server = TableDns(records, silent={"3.66.249.66.in-addr.arpa."})
    transport, _ = await loop.create_datagram_endpoint(
        lambda: server, local_addr=("127.0.0.1", 0)
    )
    try:
        yield server, transport.get_extra_info("sockname")[1]
    finally:
        transport.close()


async def test_dnspython_asks_the_name_servers_and_keeps_the_shortest_ttl(table_dns):
    server, port = table_dns
    clock = Clock()
    resolver = SystemResolver(0.5, nameservers=["127.0.0.1"], port=port)
    verifier = Verifier(resolver=resolver, clock=clock, timeout=0.5)
    assert await verifier.claim("Googlebot", "66.249.66.1", wait=5) == VERIFIED
    assert await verifier.claim("Googlebot", "66.249.66.2", wait=5) == UNVERIFIED
    assert ("crawl-66-249-66-1.googlebot.com.", "A") in server.asked
    assert ("crawl-66-249-66-1.googlebot.com.", "AAAA") in server.asked
    clock.t += 119
    assert verifier.now("Googlebot", "66.249.66.1") == VERIFIED
    clock.t += 2  # the A record's 120 s, not the PTR's 300 s
    assert verifier.now("Googlebot", "66.249.66.1") is None
    await verifier.close()


async def test_dnspython_time_outs_are_failures_and_private_addresses_are_never_asked(table_dns):
    server, port = table_dns
    resolver = SystemResolver(0.3, nameservers=["127.0.0.1"], port=port)
    with pytest.raises(DnsFailure):
        await resolver.reverse("66.249.66.3")
    asked = len(server.asked)
    assert await resolver.reverse("127.0.0.7") == ((), 600.0)
    assert await resolver.reverse("10.1.2.3") == ((), 600.0)
    assert len(server.asked) == asked
