"""Loading settings: TOML file, then ``SNAPSHOTD_*`` environment, then command-line flags.

Nothing here does I/O except reading the config file in :func:`load_settings`. Every value
is checked as :mod:`snapshotd.config.values` says, a site's numbers within
:data:`~snapshotd.config.settings.SITE_RANGES`, whichever source gave it (a site from the
API, Crawlbot or the store is read by :func:`site_from_mapping`).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from snapshotd.config.settings import (
    CHOICES,
    MAINTENANCE_EVERY,
    NEVER,
    SANDBOX_SETTINGS,
    SITE_NAME,
    SITE_RANGES,
    BrowserSettings,
    Settings,
    SiteSettings,
)
from snapshotd.config.values import (
    MAX_RULES_BYTES,
    ConfigError,
    check_type,
    coerce_env,
    kind_of,
    parse_bool,
    parse_duration,
    parse_header,
    parse_servers,
    ranged,
)
from snapshotd.crawlers.bots import BOT_CATEGORIES
from snapshotd.http_text.urls import (
    origin_parts,
    redact,
    valid_host,
)
from snapshotd.patterns.crawl_patterns import PatternError, compile_regex

__all__ = [
    "ConfigError",
    "load_settings",
    "parse_bool",
    "parse_duration",
    "site_from_mapping",
    "site_to_mapping",
]


def _network(where: str, text: Any) -> str:
    """A ``render_clients`` entry (an address or a network, ``10.0.0.0/8``), written as the
    network it names."""
    try:
        return str(ipaddress.ip_network(str(text).strip(), strict=False))
    except ValueError:
        raise ConfigError(
            f"{where}: server.render_clients: {text!r} is not an address or network"
        ) from None

_SERVER_KINDS = {
    "host": "str",
    "port": "int",
    "db": "str",
    "api_tokens": "list",
    "render_tokens": "list",
    "miss_wait": "float",
    "maintenance_every": "float",
    "workers": "int",
    "notify_private": "bool",
    "indexnow_private": "bool",
    "smtp": "str",
    "smtp_from": "str",
    "rules_dir": "str",
    "worker_header": "bool",
    "seo4ajax_hosts": "list",
    "seo4ajax_port": "int",
    "crawlbot_port": "int",
    "trusted_proxies": "list",
    "forwarded_header": "str",
    "bot_ranges": "list",
    "bot_ranges_every": "float",
    "dns_servers": "list",
    "render_clients": "list",
}
# Token lists that also take one token from a variable of their own.
_ONE_TOKEN_VARIABLE = {
    "api_tokens": "SNAPSHOTD_API_TOKEN",
    "render_tokens": "SNAPSHOTD_RENDER_TOKEN",
}
_SITE_KEYS = {f.name for f in fields(SiteSettings)} - {
    "learned_params",
    "bots_add",
    "bots_remove",
    "bots_categories",
} | {"bots"}


_BROWSER_KINDS = {f.name: kind_of(f.type) for f in fields(BrowserSettings)}


def _section(
    where: str, name: str, raw: Mapping[str, Any], kinds: Mapping[str, str], env: Mapping[str, str]
) -> dict[str, Any]:
    """One table's values, checked against ``kinds``, with ``SNAPSHOTD_<KEY>`` over them."""
    unknown = set(raw) - set(kinds)
    if unknown:
        raise ConfigError(f"{where}: unknown key {name}.{sorted(unknown)[0]}")
    values: dict[str, Any] = {}
    for key, kind in kinds.items():
        if key in raw:
            values[key] = check_type(f"{where}: {name}.{key}", raw[key], kind)
        env_key = f"SNAPSHOTD_{key.upper()}"
        if env_key in env:
            raw_env = env[env_key] if kind == "list" else coerce_env(key, env[env_key], kind)
            values[key] = check_type(env_key, raw_env, kind)
    return values


def _check_verification(where: str, values: Mapping[str, Any]) -> None:
    """``trusted_proxies``, ``forwarded_header``, ``bot_ranges``, ``bot_ranges_every`` and
    ``dns_servers`` (section 3.4)."""
    from snapshotd.crawlers.client_address import FORWARDED_HEADERS, parse_networks
    from snapshotd.crawlers.families import parse_range_source

    try:
        parse_networks(values.get("trusted_proxies", ()))
    except ValueError as exc:
        raise ConfigError(f"{where}: server.trusted_proxies: {exc}") from None
    header = values.get("forwarded_header", "x-forwarded-for")
    if header not in FORWARDED_HEADERS:
        raise ConfigError(
            f"{where}: server.forwarded_header: expected x-forwarded-for or forwarded, "
            f"got {header!r:.40}"
        )
    for source in values.get("bot_ranges", ()):
        try:
            parse_range_source(source)
        except ValueError as exc:
            raise ConfigError(f"{where}: server.bot_ranges: {exc}") from None
    if not 60 <= values.get("bot_ranges_every", 86400.0) <= 30 * 86400:
        raise ConfigError(f"{where}: server.bot_ranges_every must be 60 s to 30 days")
    try:
        parse_servers(values.get("dns_servers", ()))
    except ValueError as exc:
        raise ConfigError(f"{where}: server.dns_servers: {exc}") from None


def _hosts(value: str | None) -> list[str] | None:
    """``--hosts`` / ``SNAPSHOTD_HOSTS``: host names separated by commas or spaces."""
    if value is None:
        return None
    hosts = [h for h in re.split(r"[\s,]+", value.strip()) if h]
    for host in hosts:
        if not valid_host(host):
            raise ConfigError(f"--hosts: {host!r} is not a host name (like shop.example.com)")
    return hosts


def _origin(key: str, value: str) -> str:
    if re.match(r"[^/?#]*//[^/?#]*@", value):  # said without the value: it holds a password
        raise ConfigError(f"{key}: an origin holds no user name or password (user@host)")
    try:  # the Host header the pass-through writes for it must be a valid one
        parts = urlsplit(value)
        authority = origin_parts(value)[3].decode("ascii")
    except ValueError:  # as for a bracketed host that is no IPv6 address
        parts, authority = urlsplit(""), ""
    if (
        parts.scheme not in ("http", "https")
        or not valid_host(authority)
        or parts.port == 0  # read once the authority held a valid port
    ):
        raise ConfigError(
            f"{key}: expected an http(s) URL like http://127.0.0.1:3000, got {value!r}"
        )
    return f"{parts.scheme}://{parts.netloc}".rstrip("/")


def _http_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # as for a bracketed host that is no IPv6 address
        return False


_INDEXNOW_KEY = re.compile(r"[A-Za-z0-9-]{8,128}")
_PUBLIC_PATH = re.compile(r"/[A-Za-z0-9._~/-]{1,200}")


def check_search_settings(values: Mapping[str, Any], where: str) -> None:
    """``sitemap_path``, ``indexnow_key`` and ``indexnow_endpoint`` (SPEC 5.4, 5.5)."""
    path = values.get("sitemap_path")
    if path and (not _PUBLIC_PATH.fullmatch(path) or path.startswith("/_snapshotd/")):
        raise ConfigError(
            f"{where}.sitemap_path: expected a path such as /sitemap.xml (letters, digits, "
            f"'._~-/', outside /_snapshotd/), got {redact(path)!r:.80}"
        )
    key = values.get("indexnow_key")
    if key and not _INDEXNOW_KEY.fullmatch(key):
        raise ConfigError(
            f"{where}.indexnow_key: expected 8 to 128 of a-z A-Z 0-9 -, got {redact(key)!r:.80}"
        )
    endpoint = values.get("indexnow_endpoint")
    if endpoint is not None and not _http_url(endpoint):
        raise ConfigError(
            f"{where}.indexnow_endpoint: expected an http(s) URL, got {redact(endpoint)!r:.80}"
        )


def _site(where: str, raw: Mapping[str, Any], base_dir: Path) -> SiteSettings:
    unknown = set(raw) - _SITE_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    values: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(SiteSettings)}
    for key, value in raw.items():
        name = f"{where}.{key}"
        if key == "bots":
            if not isinstance(value, Mapping) or set(value) - {"add", "remove", "categories"}:
                raise ConfigError(
                    f"{name}: expected {{ add = [...], remove = [...], categories = [...] }}"
                )
            values["bots_add"] = check_type(f"{name}.add", value.get("add", []), "list")
            values["bots_remove"] = check_type(f"{name}.remove", value.get("remove", []), "list")
            if "categories" in value:
                categories = check_type(f"{name}.categories", value["categories"], "list")
                for category in categories:
                    if category not in BOT_CATEGORIES:
                        raise ConfigError(
                            f"{name}.categories: unknown category {category!r} "
                            f"(one of {', '.join(BOT_CATEGORIES)})"
                        )
                values["bots_categories"] = categories
        elif key == "expire_after":
            values[key] = math.inf if value == NEVER else ranged(
                name, parse_duration(value, key=name, never=True), "float", *SITE_RANGES[key]
            )
        elif key in SITE_RANGES:
            values[key] = ranged(name, value, kind_of(types[key]), *SITE_RANGES[key])
        elif key == "origin":
            values[key] = _origin(name, check_type(name, value, "str"))
        elif key == "rules_text":
            values[key] = check_type(name, value, "lines")
            if len(values[key].encode()) > MAX_RULES_BYTES:
                raise ConfigError(f"{name}: larger than 1 MiB")
        else:
            values[key] = check_type(name, value, kind_of(types[key]))
    if "origin" not in values:
        raise ConfigError(f"{where}: 'origin' is required")
    if "hosts" in values:
        values["hosts"] = tuple(h.lower().removesuffix(".") for h in values["hosts"])
        for host in values["hosts"]:
            if not valid_host(host):
                raise ConfigError(f"{where}.hosts: {host!r} is not a host name")
    if values.get("rules") and values.get("rules_text"):
        raise ConfigError(f"{where}.rules_text: give rules or rules_text, not both")
    if values.get("rules"):
        rules = Path(values["rules"])
        if not rules.is_absolute():
            rules = base_dir / rules
        values["rules"] = str(rules)
    for key in ("seeds", "sitemaps"):
        for p in values.get(key, ()):
            if not (p.startswith("/") or p.startswith("http://") or p.startswith("https://")):
                raise ConfigError(f"{where}.{key}: {redact(p)!r} must start with '/' or be a URL")
    hook = values.get("notify_webhook")
    if hook and not _http_url(hook):
        raise ConfigError(
            f"{where}.notify_webhook: expected an http(s) URL, got {redact(hook)!r}"
        )
    check_search_settings(values, where)
    mail = values.get("notify_email")
    if mail and not re.fullmatch(r"[^@\s,]+@[^@\s,]+", mail):
        raise ConfigError(f"{where}.notify_email: expected one e-mail address, got {mail!r}")
    for key in ("url_crawl_regex", "url_process_regex"):
        if values.get(key):
            try:
                compile_regex(values[key])
            except PatternError as exc:
                raise ConfigError(f"{where}.{key}: {exc}") from None
    for header in values.get("custom_headers", ()):
        try:
            parse_header(header)
        except ValueError as exc:
            raise ConfigError(f"{where}.custom_headers: {exc}") from None
    for key, choices in CHOICES.items():
        if key in values and values[key] not in choices:
            raise ConfigError(
                f"{where}.{key}: expected one of {', '.join(choices)}, got {values[key]!r:.60}"
            )
    for key in ("user_agent_mobile", "user_agent_desktop"):
        if len(values.get(key, "")) > 1000:
            raise ConfigError(f"{where}.{key}: longer than 1000 characters")
    for name in values.get("ignore_params", ()):
        if not name or "&" in name or "=" in name:
            raise ConfigError(f"{where}.ignore_params: {name!r} is not a parameter name")
    name = values.get("name", "default")
    if not re.fullmatch(SITE_NAME, name):
        raise ConfigError(f"{where}: site name {name!r} may hold only letters, digits, . _ -")
    return SiteSettings(**values)


def site_from_mapping(raw: Mapping[str, Any], where: str = "site") -> SiteSettings:
    """A site from the keys of a ``[[site]]`` table (the API's JSON, the store's), checked as
    the config file's are; a relative ``rules`` path is taken from the working directory."""
    return _site(where, raw, Path.cwd())


def site_to_mapping(site: SiteSettings) -> dict[str, Any]:
    """The keys of a ``[[site]]`` table that :func:`site_from_mapping` reads back as ``site``
    (JSON-ready: lists, numbers, strings; unset timeouts and no rules_text left out)."""
    out: dict[str, Any] = {}
    for f in fields(SiteSettings):
        value = getattr(site, f.name)
        if f.name.startswith("bots_") or f.name == "learned_params" or (
            f.name.endswith("_timeout") and value < 0
        ) or (f.name == "rules_text" and not value):
            continue
        out[f.name] = list(value) if isinstance(value, tuple) else value
    if math.isinf(site.expire_after):
        out["expire_after"] = NEVER
    out["bots"] = {
        "add": list(site.bots_add),
        "remove": list(site.bots_remove),
        "categories": list(site.bots_categories),
    }
    return out


def load_settings(
    config: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Merge the TOML file, ``SNAPSHOTD_*`` variables and flag ``overrides`` (highest wins).

    ``overrides`` keys are server keys (``host``, ``port``, ``db``, ``miss_wait``,
    ``workers``, ``api_tokens``) plus ``origin``, which replaces the sites with one named
    ``default``, and ``hosts`` (comma-separated), that site's ``hosts``.
    ``None`` values are ignored.
    """
    env = os.environ if env is None else env
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    config = config or env.get("SNAPSHOTD_CONFIG") or None
    data: dict[str, Any] = {}
    base_dir = Path.cwd()
    where = "config"
    if config:
        path = Path(config)
        where = str(path)
        base_dir = path.resolve().parent
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{path}: {exc.strerror}") from None

    unknown = set(data) - {"server", "browser", "site"}
    if unknown:
        raise ConfigError(f"{where}: unknown section [{sorted(unknown)[0]}]")
    server = data.get("server", {})
    browser = data.get("browser", {})
    sites = data.get("site", [])
    if not isinstance(server, Mapping) or not isinstance(browser, Mapping):
        raise ConfigError(f"{where}: [server] and [browser] must be tables")
    if not isinstance(sites, list):
        raise ConfigError(f"{where}: sites are written [[site]]")

    # Each section: file < env < flags.
    server_values = _section(where, "server", server, _SERVER_KINDS, env)
    for key in _SERVER_KINDS:
        if key in overrides:
            value = overrides[key]
            server_values[key] = tuple(value) if key in _ONE_TOKEN_VARIABLE else value
    for key, variable in _ONE_TOKEN_VARIABLE.items():  # one token more, beside the list
        if variable in env and key not in overrides:
            server_values[key] = tuple(
                t for t in (*server_values.get(key, ()), env[variable]) if t
            )
    server_values["render_clients"] = tuple(
        _network(where, n) for n in server_values.get("render_clients", ())
    )
    if server_values.get("rules_dir"):
        server_values["rules_dir"] = str(base_dir / server_values["rules_dir"])
    port = server_values.get("port", 8080)
    if not 0 <= port <= 65535:
        raise ConfigError(f"{where}: server.port {port} is out of range")
    smtp = server_values.get("smtp")
    if smtp and (urlsplit(smtp).scheme not in ("smtp", "smtps") or not urlsplit(smtp).hostname):
        raise ConfigError(f"{where}: server.smtp: expected smtp://host:port, got {smtp!r}")
    if not 0.5 <= server_values.get("maintenance_every", MAINTENANCE_EVERY) <= 3600:
        raise ConfigError(f"{where}: server.maintenance_every must be 0.5 to 3600 seconds")
    for host in server_values.get("seo4ajax_hosts", ()):
        if not valid_host(host) or ":" in host:
            raise ConfigError(f"{where}: server.seo4ajax_hosts: {host!r} is not a host name")
    face_port = server_values.get("seo4ajax_port", 0)
    if not 0 <= face_port <= 65535 or (face_port and face_port == port):
        raise ConfigError(
            f"{where}: server.seo4ajax_port must be 1 to 65535 and not server.port, or 0 (none)"
        )
    crawlbot_port = server_values.get("crawlbot_port", 0)
    if not 0 <= crawlbot_port <= 65535 or (crawlbot_port and crawlbot_port in (port, face_port)):
        raise ConfigError(
            f"{where}: server.crawlbot_port must be 1 to 65535 and neither server.port nor "
            "server.seo4ajax_port, or 0 (none)"
        )
    if not 1 <= server_values.get("workers", 1) <= 256:
        raise ConfigError(f"{where}: server.workers must be between 1 and 256")
    if "forwarded_header" in server_values:  # a header's name, in any case
        server_values["forwarded_header"] = server_values["forwarded_header"].strip().lower()
    _check_verification(where, server_values)

    browser_values = _section(where, "browser", browser, _BROWSER_KINDS, env)
    if "SNAPSHOTD_CHROMIUM" in env and not browser_values.get("executable"):
        browser_values["executable"] = env["SNAPSHOTD_CHROMIUM"]
    if browser_values.get("concurrency", 1) < 1:
        raise ConfigError(f"{where}: browser.concurrency must be at least 1")
    if browser_values.get("recycle_after", 1) < 1:
        raise ConfigError(f"{where}: browser.recycle_after must be at least 1")
    if browser_values.get("miss_queue", 0) < 0:
        raise ConfigError(f"{where}: browser.miss_queue must not be negative")
    if browser_values.get("render_timeout", 1.0) <= 0:
        raise ConfigError(f"{where}: browser.render_timeout must be positive")
    if browser_values.get("sandbox", "auto") not in SANDBOX_SETTINGS:
        raise ConfigError(
            f"{where}: browser.sandbox: expected one of {', '.join(SANDBOX_SETTINGS)}, "
            f"got {browser_values['sandbox']!r:.60}"
        )

    site_list: list[SiteSettings] = []
    origin = overrides.get("origin") or env.get("SNAPSHOTD_ORIGIN")
    hosts = _hosts(overrides.get("hosts") or env.get("SNAPSHOTD_HOSTS"))
    if hosts is not None and not origin and len(sites) != 1:
        raise ConfigError("--hosts names the hosts of one site: give --origin URL with it")
    if origin:
        base = dict(sites[0]) if len(sites) == 1 and isinstance(sites[0], Mapping) else {}
        base["origin"] = origin
        base.setdefault("name", "default")
        if hosts is not None:
            base["hosts"] = hosts
        site_list.append(_site(f"{where}: site[0]" if base else "--origin", base, base_dir))
    else:
        for i, raw in enumerate(sites):
            if not isinstance(raw, Mapping):
                raise ConfigError(f"{where}: site[{i}] must be a table")
            if hosts is not None:
                raw = {**raw, "hosts": hosts}
            site_list.append(_site(f"{where}: site[{i}]", raw, base_dir))
    names = [s.name for s in site_list]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"{where}: two sites are named {name!r}")

    return Settings(
        **server_values,
        browser=BrowserSettings(**browser_values),
        sites=tuple(site_list),
        config_path=str(config or ""),
    )
