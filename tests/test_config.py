"""Settings: TOML, environment and flags merged into one frozen object."""

from __future__ import annotations

import math
import re

import pytest

from snapshotd.config.loading import load_settings, site_from_mapping, site_to_mapping
from snapshotd.config.values import ConfigError, parse_duration


def write(tmp_path, text):
    p = tmp_path / "snapshotd.toml"
    p.write_text(text)
    return str(p)


FULL = """
[server]
host = "0.0.0.0"
port = 9000
db = "x.db"
api_tokens = ["t1"]
miss_wait = 2.5

[browser]
concurrency = 3
javascript_timeout = 1.0
block_resources = ["image"]

[[site]]
name = "shop"
origin = "http://127.0.0.1:3000/"
hosts = ["Shop.Example.com"]
rules = "rules/shop.rules"
expire_after = "12h"
ignore = ["/admin/"]
bots = { add = ["mybot"], remove = ["twitterbot"] }

[[site]]
name = "blog"
origin = "https://127.0.0.1:4000"
"""


def test_full_file(tmp_path):
    s = load_settings(write(tmp_path, FULL), env={})
    assert (s.host, s.port, s.db, s.api_tokens, s.miss_wait) == (
        "0.0.0.0",
        9000,
        "x.db",
        ("t1",),
        2.5,
    )
    assert s.browser.concurrency == 3 and s.browser.block_resources == ("image",)
    shop = s.site("shop")
    assert shop.origin == "http://127.0.0.1:3000" and shop.hosts == ("shop.example.com",)
    assert shop.expire_after == 12 * 3600 and shop.rules == str(tmp_path / "rules/shop.rules")
    assert shop.bots_add == ("mybot",) and shop.bots_remove == ("twitterbot",)
    assert s.site_for_host("shop.example.com:8080") is shop
    assert s.site_for_host("other.com") is s.site("blog")  # a site with no hosts takes any
    assert shop.readiness == "adaptive"  # the default


def test_readiness_quiet(tmp_path):
    s = load_settings(write(tmp_path, "[[site]]\norigin='http://x'\nreadiness='quiet'"), env={})
    assert s.sites[0].readiness == "quiet"


def test_env_overrides_file_and_flags_override_env(tmp_path):
    env = {"SNAPSHOTD_PORT": "7000", "SNAPSHOTD_API_TOKEN": "secret", "SNAPSHOTD_CONCURRENCY": "1"}
    s = load_settings(write(tmp_path, FULL), env=env)
    assert s.port == 7000 and "secret" in s.api_tokens and s.browser.concurrency == 1
    s = load_settings(write(tmp_path, FULL), env=env, overrides={"port": 7001})
    assert s.port == 7001


def test_render_tokens_come_from_the_file_and_the_environment(tmp_path):
    config = write(tmp_path, '[server]\nrender_tokens = ["r1", ""]\napi_tokens = ["a1"]\n')
    s = load_settings(config, env={"SNAPSHOTD_RENDER_TOKEN": "r2"})
    assert (s.render_tokens, s.api_tokens) == (("r1", "r2"), ("a1",))
    s = load_settings(config, env={"SNAPSHOTD_RENDER_TOKENS": "r3,r4"})
    assert s.render_tokens == ("r3", "r4")
    assert load_settings(env={}).render_tokens == ()


def test_origin_flag_alone_makes_a_default_site():
    s = load_settings(None, env={}, overrides={"origin": "http://127.0.0.1:3000"})
    assert [(x.name, x.origin) for x in s.sites] == [("default", "http://127.0.0.1:3000")]


@pytest.mark.parametrize(
    "text,message",
    [
        ("[server\nport=1", "snapshotd.toml"),
        ("[server]\nport = 'x'", "server.port: expected an integer"),
        ("[server]\nbogus = 1", "unknown key server.bogus"),
        ("[browser]\nconcurrency = 0", "concurrency must be at least 1"),
        ("[[site]]\nname='a'", "'origin' is required"),
        ("[[site]]\norigin='ftp://x'", "expected an http(s) URL"),
        ("[[site]]\norigin='http://%s.test'" % ("a" * 64), "expected an http(s) URL"),
        ("[[site]]\norigin='http://a..b.test'", "expected an http(s) URL"),
        ("[[site]]\norigin='http://exa mple.test'", "expected an http(s) URL"),
        ("[[site]]\norigin='http://a.test:99999'", "expected an http(s) URL"),
        ("[[site]]\norigin='http://a.test:x'", "expected an http(s) URL"),
        ("[[site]]\norigin='http://x'\nexpire_after='7 weeks'", "expire_after"),
        ("[[site]]\norigin='http://x'\nseeds=['nope']", "must start with '/'"),
        ("[[site]]\norigin='http://x'\n[[site]]\norigin='http://y'", "two sites are named"),
        ("[[site]]\norigin='http://x'\ncolour='red'", "unknown key 'colour'"),
        ("[nope]\n", "unknown section [nope]"),
        ("[[site]]\norigin='http://x'\nnew_paths_per_minute=0", "new_paths_per_minute"),
        ("[[site]]\norigin='http://x'\nignore_params=['a=b']", "not a parameter name"),
        ("[[site]]\norigin='http://x'\nignore_params=['']", "not a parameter name"),
        ("[browser]\nmiss_queue = -1", "miss_queue must not be negative"),
        (
            "[[site]]\norigin='http://x'\nreadiness='fast'",
            "site[0].readiness: expected one of adaptive, quiet, got 'fast'",
        ),
        (
            "[[site]]\norigin='http://x'\nverify_bots='sometimes'",
            "site[0].verify_bots: expected one of off, on, strict, got 'sometimes'",
        ),
        (
            "[[site]]\norigin='http://x'\nunverifiable_bots='trusted'",
            "site[0].unverifiable_bots: expected one of unverified, verified, got 'trusted'",
        ),
        (
            "[[site]]\norigin='http://x'\nmiss_answer=503",
            "site[0].miss_answer: expected a string, got 503",
        ),
        ("[server]\ntrusted_proxies=['10.0.0.0/33']", "server.trusted_proxies: '10.0.0.0/33'"),
        ("[server]\nbot_ranges=['google']", "server.bot_ranges: 'google' is not family=URL"),
        ("[server]\nbot_ranges_every=5", "bot_ranges_every must be 60 s to 30 days"),
    ],
)
def test_errors_name_file_and_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(write(tmp_path, text), env={})


def test_an_origin_may_have_a_host_name_in_any_script_or_an_address() -> None:
    for origin in ("http://café.test", "https://[::1]:8443", "http://127.0.0.1:3000"):
        settings = load_settings(overrides={"origin": origin}, env={})
        assert settings.sites[0].origin == origin


def test_missing_file():
    with pytest.raises(ConfigError, match="no such config file"):
        load_settings("/nonexistent/snapshotd.toml", env={})


def test_bad_env_value():
    with pytest.raises(ConfigError, match="SNAPSHOTD_PORT"):
        load_settings(None, env={"SNAPSHOTD_PORT": "eighty"})


@pytest.mark.parametrize(
    "value,seconds", [("30s", 30), ("15m", 900), ("2h", 7200), ("7d", 604800), (5, 5)]
)
def test_durations(value, seconds):
    assert parse_duration(value) == seconds


def test_flood_settings(tmp_path):
    text = "[browser]\nconcurrency = 3\n[[site]]\norigin='http://x'\n"
    s = load_settings(write(tmp_path, text), env={})
    assert s.browser.miss_queue == 12 and s.browser.crawler_reserve == 1
    site = s.sites[0]
    assert site.new_paths_per_minute == 60 and site.ignore_params == ("@tracking",)
    assert site.ignored_params("utm_source") and site.ignored_params("fbclid")
    text = (
        "[browser]\nmiss_queue = 0\n"
        "[[site]]\nname='a'\norigin='http://x'\nignore_params=[]\nnew_paths_per_minute=5\n"
        "[[site]]\nname='b'\norigin='http://x'\nignore_params=['@tracking', 'sid', 'x_*']\n"
        "[[site]]\nname='c'\norigin='http://x'\nignore_params=['sid']\n"
    )
    s = load_settings(write(tmp_path, text), env={})
    assert s.browser.miss_queue == 0 and s.browser.crawler_reserve == 1
    a, b, c = s.sites
    assert a.new_paths_per_minute == 5 and not a.ignored_params("utm_source")
    assert b.ignored_params("utm_source") and b.ignored_params("sid") and b.ignored_params("x_y")
    assert c.ignored_params("sid") and not c.ignored_params("utm_source")


def test_hosts_flag_and_variable_name_the_sites_hosts(tmp_path):
    origin = {"origin": "http://127.0.0.1:3000"}
    s = load_settings(overrides={**origin, "hosts": "Shop.test, www.shop.test:8443"}, env={})
    assert s.sites[0].hosts == ("shop.test", "www.shop.test:8443")
    env = {"SNAPSHOTD_ORIGIN": origin["origin"], "SNAPSHOTD_HOSTS": "a.test b.test"}
    s = load_settings(env=env)
    assert s.sites[0].hosts == ("a.test", "b.test")
    # the flag wins over the variable, and over the file's single site
    cfg = tmp_path / "one.toml"
    cfg.write_text(
        '[[site]]\nname = "shop"\norigin = "http://127.0.0.1:3000"\nhosts = ["x.test"]\n'
    )
    s = load_settings(cfg, overrides={"hosts": "y.test"}, env={"SNAPSHOTD_HOSTS": "z.test"})
    assert s.sites[0].name == "shop" and s.sites[0].hosts == ("y.test",)
    assert s.site_for_url("http://y.test/a") is s.sites[0]


def test_bad_hosts_stop_start_up_with_one_line(tmp_path):
    with pytest.raises(ConfigError, match="'a/b' is not a host name"):
        load_settings(overrides={"origin": "http://127.0.0.1:3000", "hosts": "a/b"}, env={})
    cfg = tmp_path / "two.toml"
    cfg.write_text(
        '[[site]]\nname = "a"\norigin = "http://127.0.0.1:1"\n'
        '[[site]]\nname = "b"\norigin = "http://127.0.0.1:2"\n'
    )
    with pytest.raises(ConfigError, match="hosts of one site"):
        load_settings(cfg, env={"SNAPSHOTD_HOSTS": "a.test"})


def test_bot_categories_are_a_site_setting(tmp_path):
    cfg = tmp_path / "bots.toml"
    cfg.write_text(
        '[[site]]\nname = "s"\norigin = "http://127.0.0.1:3000"\n'
        'bots = { categories = ["search", "ai"], remove = ["slack"] }\n'
    )
    site = load_settings(cfg, env={}).sites[0]
    assert site.bots_categories == ("search", "ai") and site.bots_remove == ("slack",)
    assert load_settings(overrides={"origin": "http://127.0.0.1:1"}, env={}).sites[
        0
    ].bots_categories == ("search", "social", "ai", "seo")
    cfg.write_text(
        '[[site]]\nname = "s"\norigin = "http://127.0.0.1:3000"\n'
        'bots = { categories = ["spam"] }\n'
    )
    with pytest.raises(ConfigError, match="unknown category 'spam'"):
        load_settings(cfg, env={})


def test_workers_default_to_one_per_core_up_to_four_and_come_from_file_env_and_flag(tmp_path):
    import os

    cores = len(os.sched_getaffinity(0))
    assert load_settings(env={}).workers == max(1, min(cores, 4))
    path = write(tmp_path, "[server]\nworkers = 3\n")
    assert load_settings(path, env={}).workers == 3
    assert load_settings(path, env={"SNAPSHOTD_WORKERS": "5"}).workers == 5
    assert load_settings(path, env={}, overrides={"workers": 1}).workers == 1
    for bad in ("0", "-1", "257"):
        with pytest.raises(ConfigError, match="server.workers must be between 1 and 256"):
            load_settings(write(tmp_path, f"[server]\nworkers = {bad}\n"), env={})
    with pytest.raises(ConfigError, match="SNAPSHOTD_WORKERS"):
        load_settings(env={"SNAPSHOTD_WORKERS": "many"})


def test_the_maintenance_period_comes_from_file_or_env_within_its_bounds(tmp_path):
    assert load_settings(env={}).maintenance_every == 10.0
    path = write(tmp_path, "[server]\nmaintenance_every = 2.5\n")
    assert load_settings(path, env={}).maintenance_every == 2.5
    assert load_settings(env={"SNAPSHOTD_MAINTENANCE_EVERY": "1"}).maintenance_every == 1.0
    for bad in ("0", "0.1", "3601"):
        with pytest.raises(ConfigError, match="server.maintenance_every must be 0.5 to 3600"):
            load_settings(write(tmp_path, f"[server]\nmaintenance_every = {bad}\n"), env={})


NUMBERS = {
    # key: (a value in range, values out of it)
    "crawl_delay": (2.5, ["nan", "inf", "-inf", "3601", "-1"]),
    "render_timeout": (20, ["nan", "inf", "0", "601"]),
    "javascript_timeout": (0.5, ["nan", "inf", "601"]),
    "repeat": (1.5, ["nan", "inf", "3651"]),
    "seed_recrawl_frequency": (7, ["nan", "inf", "3651"]),
    "max_pages": (5, ["0", str(10**400), "1_000_000_001"]),
    "max_hops": (-1, ["-2", str(10**400)]),
    "max_to_process": (-1, ["-2", "1_000_000_001"]),
    "max_rounds": (0, ["-1", "1_000_001"]),
    "new_paths_per_minute": (60, ["0", "1_000_001"]),
}


@pytest.mark.parametrize("key", sorted(NUMBERS))
def test_every_number_is_finite_and_within_its_range_or_the_file_is_refused_naming_it(
    tmp_path, key
):
    good, bad = NUMBERS[key]
    site = "[[site]]\norigin = 'http://127.0.0.1:3000'\n"
    assert getattr(load_settings(write(tmp_path, f"{site}{key} = {good}\n"), env={}).sites[0],
                   key) == good
    for value in bad:
        with pytest.raises(ConfigError, match=rf"site\[0\]\.{key}: must be from "):
            load_settings(write(tmp_path, f"{site}{key} = {value}\n"), env={})


def test_never_is_how_a_snapshot_that_never_expires_is_spelled_and_zero_is_refused(tmp_path):
    site = "[[site]]\norigin = 'http://127.0.0.1:3000'\n"
    never = load_settings(write(tmp_path, site + "expire_after = 'never'\n"), env={}).sites[0]
    assert never.expire_after == math.inf
    assert never.refresh_after == 7 * 86400  # its sitemaps and failures still come round
    assert site_to_mapping(never)["expire_after"] == "never"  # JSON, and read back the same
    assert site_from_mapping(site_to_mapping(never)) == never
    assert load_settings(write(tmp_path, site + "expire_after = '1m'\n"), env={})
    for value in ("0", "'0'", "'0s'", "59", "'59s'", "0.5"):
        with pytest.raises(ConfigError, match=r"site\[0\]\.expire_after: must be from 60 to "):
            load_settings(write(tmp_path, f"{site}expire_after = {value}\n"), env={})
    for value in ("'Never'", "'forever'", "'-1'", "true"):
        with pytest.raises(ConfigError, match=r"expire_after: expected a duration like .*'never'"):
            load_settings(write(tmp_path, f"{site}expire_after = {value}\n"), env={})


def test_a_duration_too_long_to_be_a_date_is_refused_however_it_is_written(tmp_path):
    site = "[[site]]\norigin = 'http://127.0.0.1:3000'\n"
    assert load_settings(write(tmp_path, site + "expire_after = '3650d'\n"), env={})
    for value in ("'3651d'", "'" + "9" * 400 + "'", "9" * 400, "inf", "nan", "1e300"):
        with pytest.raises(ConfigError, match=r"site\[0\]\.expire_after: must be from 60 to "):
            load_settings(write(tmp_path, f"{site}expire_after = {value}\n"), env={})
    # A number past what a float holds, as a JSON body may carry one.
    with pytest.raises(ConfigError, match=r"site\.expire_after: "):
        site_from_mapping({"origin": "http://a.test", "expire_after": 10**400})
    with pytest.raises(ConfigError, match=r"site\.crawl_delay: "):
        site_from_mapping({"origin": "http://a.test", "crawl_delay": 10**400})


def test_server_and_browser_numbers_from_the_file_or_the_environment_must_be_finite(tmp_path):
    for text in ("[server]\nmiss_wait = nan", "[browser]\nrender_timeout = inf",
                 "[browser]\njavascript_timeout = nan"):
        with pytest.raises(ConfigError, match="must be a finite number"):
            load_settings(write(tmp_path, text), env={})
    for name in ("SNAPSHOTD_MISS_WAIT", "SNAPSHOTD_RENDER_TIMEOUT"):
        with pytest.raises(ConfigError, match=f"{name}: must be a finite number"):
            load_settings(env={name: "nan"})


@pytest.mark.parametrize(
    "key,value",
    [("seeds", ["/\ud800"]), ("seeds", ["/a\nb"]), ("hosts", ["a.test\x00"]),
     ("page_process_pattern", "x\ud800"), ("notify_email", "a@b.test\r\nBcc: c@d.test"),
     ("ignore", ["/\x1b[2J"]), ("url_crawl_pattern", "\x7f"), ("bots", {"add": ["\udfff"]})],
)
def test_text_with_a_lone_surrogate_or_a_control_character_is_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=rf"site\.{key}[.:\[]") as caught:
        site_from_mapping({"origin": "http://a.test", key: value})
    assert "\n" not in str(caught.value) and "\ud800" not in str(caught.value)
    str(caught.value).encode("utf-8")  # the message itself can be written anywhere


def test_an_origin_with_a_user_name_or_password_is_refused() -> None:
    for origin in ("http://user:pass@127.0.0.1:3000", "http://user@127.0.0.1", "http://@a.test"):
        with pytest.raises(ConfigError, match="no user name or password") as caught:
            site_from_mapping({"origin": origin})
        assert "pass" not in str(caught.value).replace("password", "")


@pytest.mark.parametrize(
    ("key", "value"),
    [("notify_webhook", "ftp://ops:hunter2@127.0.0.1/hook"),
     ("sitemaps", ["ftp://ops:hunter2@127.0.0.1/sitemap.xml"])],
)
def test_a_refused_url_setting_is_named_without_its_password(key, value) -> None:
    with pytest.raises(ConfigError, match=rf"site\.{key}") as caught:
        site_from_mapping({"origin": "http://a.test", key: value})
    assert "hunter2" not in str(caught.value) and "127.0.0.1" in str(caught.value)


def test_the_rules_directory_is_taken_from_the_config_files_directory(tmp_path):
    path = write(tmp_path, "[server]\nrules_dir = 'rules'\n")
    assert load_settings(path, env={}).rules_dir == str(tmp_path / "rules")
    assert load_settings(env={}).rules_dir == ""
    with pytest.raises(ConfigError, match=r"site\[0\]\.rules_text: give rules or rules_text"):
        load_settings(write(tmp_path, "[[site]]\norigin = 'http://a.test'\nrules = 'a.rules'\n"
                                      "rules_text = '^/a /b'\n"), env={})
    text = "^/a /b [R=301]\n# a comment\t\r\n"
    assert site_from_mapping({"origin": "http://a.test", "rules_text": text}).rules_text == text
    with pytest.raises(ConfigError, match=r"site\.rules_text: larger than 1 MiB"):
        site_from_mapping({"origin": "http://a.test", "rules_text": "# x\n" * 300_000})
    with pytest.raises(ConfigError, match=r"site\.rules_text: holds a control character"):
        site_from_mapping({"origin": "http://a.test", "rules_text": "^/a /b\x00"})


def test_hosts_of_a_site_are_host_names_wherever_they_come_from(tmp_path):
    site = site_from_mapping({"origin": "http://a.test", "hosts": ["Shop.test", "[::1]:8443"]})
    assert site.hosts == ("shop.test", "[::1]:8443")
    for bad in ("a b", "a/b", "", "user@shop.test"):
        with pytest.raises(ConfigError, match=r"site\.hosts: .* is not a host name"):
            site_from_mapping({"origin": "http://a.test", "hosts": [bad]})


def test_the_seo4ajax_face_takes_host_names_and_a_port_other_than_serves(tmp_path):
    face = "[server]\nport = 8080\nseo4ajax_hosts = ['s4a.internal']\nseo4ajax_port = 8081\n"
    settings = load_settings(write(tmp_path, face), env={})
    assert settings.seo4ajax_hosts == ("s4a.internal",) and settings.seo4ajax_port == 8081
    for bad, says in (
        ("seo4ajax_hosts = ['s4a.internal:80']", "seo4ajax_hosts"),
        ("seo4ajax_hosts = ['http://x']", "seo4ajax_hosts"),
        ("seo4ajax_port = 8080", "seo4ajax_port"),
        ("seo4ajax_port = 70000", "seo4ajax_port"),
        ("seo4ajax_port = -1", "seo4ajax_port"),
    ):
        with pytest.raises(ConfigError, match=says):
            load_settings(write(tmp_path, f"[server]\nport = 8080\n{bad}\n"), env={})


def test_crawlbots_port_is_its_own(tmp_path):
    given = "[server]\nport = 8080\nseo4ajax_port = 8081\ncrawlbot_port = 8082\n"
    assert load_settings(write(tmp_path, given), env={}).crawlbot_port == 8082
    variable = load_settings(write(tmp_path, "[server]\n"), env={"SNAPSHOTD_CRAWLBOT_PORT": "9"})
    assert variable.crawlbot_port == 9
    for bad in ("crawlbot_port = 8080", "seo4ajax_port = 8081\ncrawlbot_port = 8081",
                "crawlbot_port = 70000", "crawlbot_port = -1"):
        with pytest.raises(ConfigError, match="crawlbot_port"):
            load_settings(write(tmp_path, f"[server]\nport = 8080\n{bad}\n"), env={})


@pytest.mark.parametrize(("cores", "captures"), [(1, 2), (2, 2), (3, 3), (4, 4), (16, 4)])
def test_captures_at_once_default_to_one_per_core_from_two_to_four(
    tmp_path, monkeypatch, cores, captures
):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    browser = load_settings(env={}).browser
    assert browser.concurrency == captures and browser.miss_queue == 4 * captures
    path = write(tmp_path, "[browser]\nconcurrency = 1\n")
    assert load_settings(path, env={}).browser.concurrency == 1
