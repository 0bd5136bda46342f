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
from snapshotd.config.values import ConfigError, parse_servers
from snapshotd.crawlers.client_address import TrustedProxies
from snapshotd.crawlers.families import families, family_of, name_in, parse_range_source
from snapshotd.crawlers.verification import UNVERIFIABLE, UNVERIFIED, VERIFIED, Verifier
from snapshotd.crawlers.verification.ranges import RangeLists, Ranges, parse_ranges
from snapshotd.crawlers.verification.resolver import (
    NEGATIVE_TTL,
    Answer,
    DnsFailure,
    SystemResolver,
    TableResolver,
)
from snapshotd.net.fetch import Fetcher
from snapshotd.services import default_verifier
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
        ("127.0.0.9", {"forwarded": "for=127.0.0.7"}, "127.0.0.9"),  # not the header read
        ("::ffff:127.0.0.9", {"x-forwarded-for": "127.0.0.7:4711"}, "127.0.0.7"),
        ("127.0.0.9", {"x-forwarded-for": "::ffff:192.0.2.1"}, "192.0.2.1"),
    ],
)
def test_the_client_is_the_last_address_a_trusted_front_server_added(peer, headers, client):
    trusted = TrustedProxies(["127.0.0.9", "10.0.0.0/8"])
    assert trusted.client(peer, headers) == client


@pytest.mark.parametrize(
    ("headers", "client"),
    [
        ({"forwarded": 'for=127.0.0.8;proto=http, for="[2001:db8::7]:443"'}, "2001:db8::7"),
        ({"forwarded": "for=_hidden"}, "127.0.0.9"),
        ({"forwarded": "for=127.0.0.7", "x-forwarded-for": "127.0.0.8"}, "127.0.0.7"),
        ({"x-forwarded-for": "127.0.0.8"}, "127.0.0.9"),  # written by the client, not read
    ],
)
def test_a_front_server_writing_forwarded_has_that_header_read_alone(headers, client):
    trusted = TrustedProxies(["127.0.0.9"], header="forwarded")
    assert trusted.client("127.0.0.9", headers) == client


def test_with_no_trusted_proxies_no_header_is_believed():
    assert TrustedProxies().client("127.0.0.9", {"x-forwarded-for": "192.0.2.1"}) == "127.0.0.9"


def test_trusted_proxies_are_checked_where_settings_are_read():
    env = {"SNAPSHOTD_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"}
    assert load_settings(env=env).trusted_proxies == ("127.0.0.1", "10.0.0.0/8")
    with pytest.raises(ConfigError, match="trusted_proxies: 'nginx' is not an address"):
        load_settings(env={"SNAPSHOTD_TRUSTED_PROXIES": "nginx"})
    env = {"SNAPSHOTD_FORWARDED_HEADER": "Forwarded"}
    assert load_settings(env=env).forwarded_header == "forwarded"
    with pytest.raises(ConfigError, match="forwarded_header: expected x-forwarded-for or forw"):
        load_settings(env={"SNAPSHOTD_FORWARDED_HEADER": "x-real-ip"})
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



# A Google Cloud VM's default reverse name and an App Engine fetcher's both forward-confirm:
# their customers choose what they send, User-Agent included.
CLOUD_AND_GOOGLE = TableResolver(
    ptr={"34.66.1.2": ["2.1.66.34.bc.googleusercontent.com."],
         "34.66.1.3": ["34-66-1-3.gae.googleusercontent.com."],
         "66.249.66.1": ["crawl-66-249-66-1.googlebot.com."],
         "66.249.66.2": ["geo-crawl-66-249-66-2.geo.googlebot.com."],
         "66.249.90.77": ["rate-limited-proxy-66-249-90-77.google.com."]},
    addresses={"2.1.66.34.bc.googleusercontent.com.": ["34.66.1.2"],
               "34-66-1-3.gae.googleusercontent.com.": ["34.66.1.3"],
               "crawl-66-249-66-1.googlebot.com.": ["66.249.66.1"],
               "geo-crawl-66-249-66-2.geo.googlebot.com.": ["66.249.66.2"],
               "rate-limited-proxy-66-249-90-77.google.com.": ["66.249.90.77"]},
)


@pytest.mark.parametrize(
    ("address", "claim"),
    [("34.66.1.2", UNVERIFIED), ("34.66.1.3", UNVERIFIED), ("66.249.66.1", VERIFIED),
     ("66.249.66.2", VERIFIED), ("66.249.90.77", VERIFIED)],
)
async def test_a_cloud_customers_forward_confirmed_name_is_no_googlebot(address, claim):
    verifier = Verifier(resolver=CLOUD_AND_GOOGLE)
    for bot in ("Googlebot", "FeedFetcher-Google"):
        assert await verifier.claim(bot, address, wait=5) == claim
    await verifier.close()


def test_every_familys_domains_and_lists_are_the_operators_own():
    for family in families().values():
        assert not family.dns or family.dns_source.startswith("https://"), family.name
        assert not any(name_in(d, ("googleusercontent.com",)) for d in family.dns)
    # Google's user-triggered-fetchers.json holds the addresses customers' App Engine apps
    # fetch from; its Google-controlled fetchers have a list of their own.
    _, sources = parse_range_source("google=published")
    assert not any(s.endswith("/user-triggered-fetchers.json") for s in sources)
    assert any(s.endswith("/user-triggered-fetchers-google.json") for s in sources)


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



class FloodResolver:
    """Google's crawler at 66.249.66.1 (reverse and forward); every other address has no
    name, or (``hang``) its reverse look-up never answers. Counts reverse look-ups."""

    GOOGLEBOT, NAME = "66.249.66.1", "crawl-66-249-66-1.googlebot.com"

    def __init__(self, *, hang: bool) -> None:
        self.hang = hang
        self.reverses = 0

    async def reverse(self, address: str) -> Answer:
        self.reverses += 1
        if address == self.GOOGLEBOT:
            return Answer((self.NAME,), 300.0)
        if self.hang:
            await asyncio.Event().wait()
        return Answer((), NEGATIVE_TTL)

    async def forward(self, name: str) -> Answer:
        return Answer((self.GOOGLEBOT,) if name == self.NAME else (), 300.0)


@pytest.mark.parametrize(
    ("flood", "count", "share"),
    [("192.0.2.{}", 256, 1 / 32), ("2001:db8:1:2::{:x}", 300, 1 / 32),
     ("2001:db8:1:{:x}::1", 300, 1 / 8)],
    ids=["ipv4/24", "ipv6/64", "ipv6/48"],
)
async def test_one_network_cannot_take_the_look_ups_from_a_real_googlebot(flood, count, share):
    resolver = FloodResolver(hang=True)
    verifier = Verifier(resolver=resolver, timeout=60)
    for i in range(count):  # every address of a /24, 300 of a /64, or 300 /64s of a /48
        verifier.now("Googlebot", flood.format(i))
    assert await verifier.claim("Googlebot", FloodResolver.GOOGLEBOT, wait=5) == VERIFIED
    # The hits started a bounded number of look-ups: the network's share, not every slot.
    assert resolver.reverses - 1 == verifier.max_lookups * share < verifier.max_lookups
    # A claim from the flooding network waits for its own network's look-ups, never
    # another's, and is unverified when none frees in time.
    assert await verifier.claim("Googlebot", flood.format(count - 1), wait=0.05) == UNVERIFIED
    await verifier.close()


async def test_one_network_cannot_flush_the_cache_of_others():
    resolver = FloodResolver(hang=False)
    # 100,000 addresses against the default 65,536 entries, scaled down: 6,000 against 4,096.
    verifier = Verifier(resolver=resolver, max_entries=4096)
    assert await verifier.claim("Googlebot", FloodResolver.GOOGLEBOT, wait=5) == VERIFIED
    others = [f"198.51.{i}.7" for i in range(100)]
    for address in others:
        assert await verifier.claim("Googlebot", address, wait=5) == UNVERIFIED
    for i in range(6_000):  # one /64's new addresses, then ones of a /48's 6,000 /64s
        await verifier.claim("Googlebot", f"2001:db8:1:2::{i:x}", wait=5)
    for i in range(6_000):
        await verifier.claim("Googlebot", f"2001:db8:2:{i:x}::1", wait=5)
    asked = resolver.reverses
    assert verifier.now("Googlebot", FloodResolver.GOOGLEBOT) == VERIFIED
    assert all(verifier.now("Googlebot", a) == UNVERIFIED for a in others)
    assert resolver.reverses == asked  # every one of them answered from the cache
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
    resolver = SystemResolver(0.5, nameservers=[f"127.0.0.1:{port}"])
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
    resolver = SystemResolver(0.3, nameservers=[f"127.0.0.1:{port}"])
    with pytest.raises(DnsFailure):
        await resolver.reverse("66.249.66.3")
    asked = len(server.asked)
    assert await resolver.reverse("127.0.0.7") == ((), 600.0)
    assert await resolver.reverse("10.1.2.3") == ((), 600.0)
    assert len(server.asked) == asked


async def test_dns_servers_set_are_the_only_ones_verification_asks(table_dns):
    server, port = table_dns
    settings = load_settings(env={"SNAPSHOTD_DNS_SERVERS": f"127.0.0.1:{port}"})
    assert settings.dns_servers == (f"127.0.0.1:{port}",)
    verifier = default_verifier(settings)
    assert await verifier.claim("Googlebot", "66.249.66.1", wait=5) == VERIFIED
    assert ("1.66.249.66.in-addr.arpa.", "PTR") in server.asked
    assert ("crawl-66-249-66-1.googlebot.com.", "A") in server.asked
    await verifier.close()


@pytest.mark.parametrize(
    ("text", "server"),
    [("127.0.0.1", ("127.0.0.1", 53)), ("127.0.0.1:9653", ("127.0.0.1", 9653)),
     ("[::1]:5353", ("::1", 5353)), ("[::1]", ("::1", 53)), ("::1", ("::1", 53))],
)
def test_a_dns_server_is_an_address_and_a_port(text, server):
    assert load_settings(env={}, overrides={"dns_servers": (text,)}).dns_servers == (text,)
    assert parse_servers([text]) == (server,)


@pytest.mark.parametrize(
    "text", ["ns1.example", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:\uff15\uff13",
             "[::1]5353", "[::1", "::1:53:x", ""],
)
def test_a_bad_dns_server_is_refused_where_settings_are_read(text):
    with pytest.raises(ConfigError, match="server.dns_servers: .* is not address or address:port"):
        load_settings(env={}, overrides={"dns_servers": (text,)})
