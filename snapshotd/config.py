"""Settings: TOML file, then ``SNAPSHOTD_*`` environment, then command-line flags.

Built once at the edge (the CLI), frozen, and passed down. Nothing here does I/O except
reading the config file in :func:`load_settings`. Every value is checked as
:mod:`snapshotd.setting_values` says, a site's numbers within ``SITE_RANGES``, whichever
source gave it (a site from the API, Crawlbot or the store is read by
:func:`site_from_mapping`).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from snapshotd.bots import BOT_CATEGORIES, DEFAULT_BOT_CATEGORIES
from snapshotd.links import normalize_url
from snapshotd.patterns import PatternError, UrlRegex, compile_regex, url_matches
from snapshotd.rewrite.common import MAX_RULES_BYTES
from snapshotd.setting_values import (
    ConfigError,
    check_type,
    coerce_env,
    kind_of,
    parse_bool,
    parse_duration,
    ranged,
)
from snapshotd.urls import (
    TRACKING_WORD,
    BadRequest,
    IgnoredParams,
    origin_parts,
    redact,
    site_path_from_url,
    valid_host,
)

__all__ = [
    "BrowserSettings",
    "ConfigError",
    "Settings",
    "SiteSettings",
    "load_settings",
    "parse_bool",
    "parse_duration",
    "site_from_mapping",
    "site_to_mapping",
]


READINESS = ("adaptive", "quiet")
SITE_NAME = r"[A-Za-z0-9_.-]{1,100}"


@dataclass(frozen=True)
class BrowserSettings:
    concurrency: int = 2
    executable: str = ""
    javascript_timeout: float = 3.0
    render_timeout: float = 30.0
    block_resources: tuple[str, ...] = ("image", "media", "font")
    recycle_after: int = 500
    # Proxy misses that may wait for a render slot; -1 (unset) is 4 x concurrency.
    miss_queue: int = -1

    def __post_init__(self) -> None:
        if self.miss_queue < 0:
            object.__setattr__(self, "miss_queue", 4 * self.concurrency)

    def timeouts(self, site: SiteSettings) -> tuple[float, float]:
        """A site's ``javascript_timeout`` and ``render_timeout``: its own, else these."""
        return (
            site.javascript_timeout if site.javascript_timeout >= 0 else self.javascript_timeout,
            site.render_timeout if site.render_timeout > 0 else self.render_timeout,
        )

    @property
    def miss_slots(self) -> int:
        """Render slots proxy misses may hold at once: one is always left to the crawler."""
        return max(self.concurrency - 1, 1)


@dataclass(frozen=True)
class SiteSettings:
    name: str = "default"
    origin: str = "http://127.0.0.1:3000"
    hosts: tuple[str, ...] = ()
    rules: str = ""  # a rules file (section 6), or:
    rules_text: str = ""  # the rules themselves
    seeds: tuple[str, ...] = ("/",)
    sitemaps: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    expire_after: float = 7 * 86400.0
    capture_new: bool = True
    capture_expired: bool = True
    crawl_links: bool = True
    obey_robots: bool = True
    use_canonical: bool = True
    strip_scripts: bool = True
    max_hops: int = -1
    max_pages: int = 100000
    new_paths_per_minute: int = 60
    ignore_params: tuple[str, ...] = (TRACKING_WORD,)
    crawl_delay: float = 0.0
    wait_for_capture_ready: bool = False
    readiness: str = "adaptive"  # or "quiet" (section 4 of docs/SPEC.md)
    bots_add: tuple[str, ...] = ()
    bots_remove: tuple[str, ...] = ()
    bots_categories: tuple[str, ...] = DEFAULT_BOT_CATEGORIES
    # Which discovered URLs are crawled (Crawlbot's urlCrawlPattern / urlCrawlRegEx).
    url_crawl_pattern: str = ""
    url_crawl_regex: str = ""
    # Which crawled pages are processed, their snapshot kept to serve (Crawlbot's
    # urlProcessPattern / urlProcessRegEx on the URL, pageProcessPattern on the HTML).
    url_process_pattern: str = ""
    url_process_regex: str = ""
    page_process_pattern: str = ""
    # -1: no limit (Crawlbot's maxToProcess).
    max_to_process: int = -1
    # "Name: value" headers the browser sends on the site's own requests (customHeaders).
    custom_headers: tuple[str, ...] = ()
    # Rounds (Crawlbot's repeat and seedRecrawlFrequency, in days; 0: none; maxRounds, 0: no
    # limit; onlyProcessIfNew: a new round renders only what no earlier round processed).
    repeat: float = 0.0
    max_rounds: int = 0
    seed_recrawl_frequency: float = 0.0
    only_process_if_new: bool = True
    # Called with the job's JSON when its crawl ends (Crawlbot's notifyWebhook).
    notify_webhook: str = ""
    # Mailed when its crawl ends, through [server] smtp (Crawlbot's notifyEmail).
    notify_email: str = ""
    # -1 (unset): the [browser] value (BrowserSettings.timeouts).
    javascript_timeout: float = -1.0
    render_timeout: float = -1.0
    # How a duplicate is known: by its HTML ("exact") or by what a reader sees ("content").
    dedup: str = "content"
    # Learn which query parameters do not change a page, and leave links that only scroll
    # their page uncrawled (snapshotd.params).
    learn_params: bool = True
    # Learned or pinned (name, path prefix) pairs from the store, not a setting of its own.
    learned_params: tuple[tuple[str, str], ...] = ()

    def url_for(self, path: str) -> str:
        """The absolute origin URL of a site path (``/a?b#!c``)."""
        return self.origin.rstrip("/") + path

    def crawls(self, path: str) -> bool:
        """Whether a discovered path is one to crawl (``url_crawl_pattern`` and ``_regex``,
        matched against its whole URL)."""
        if not (self.url_crawl_pattern or self.url_crawl_regex):
            return True
        return url_matches(self.url_for(path), self.url_crawl_pattern, self._regexes[0])

    def full(self, processed: int) -> bool:
        """Whether ``processed`` pages reach ``max_to_process`` (never when it is -1)."""
        return 0 <= self.max_to_process <= processed

    def processes(self, path: str) -> bool:
        """Whether a crawled page's URL lets it be processed (its snapshot kept): under
        ``url_process_pattern`` / ``_regex``; its HTML must pass :meth:`processes_html`."""
        if not (self.url_process_pattern or self.url_process_regex):
            return True
        return url_matches(self.url_for(path), self.url_process_pattern, self._regexes[1])

    def processes_html(self, html: str) -> bool:
        """Whether a crawled page's HTML lets it be processed: under ``page_process_pattern``
        (any of its ``||``-separated strings)."""
        if not self.page_process_pattern:
            return True
        return any(t in html for t in self.page_process_pattern.split("||") if t.strip())

    @cached_property
    def _regexes(self) -> tuple[UrlRegex | None, ...]:
        """``url_crawl_regex`` and ``url_process_regex`` compiled, once per site."""
        return tuple(
            UrlRegex(s) if s else None for s in (self.url_crawl_regex, self.url_process_regex)
        )

    @cached_property
    def headers(self) -> dict[str, str]:
        """``custom_headers`` by name."""
        return dict(_header(h) for h in self.custom_headers)

    def is_ignored(self, path: str) -> bool:
        return bool(self.ignore) and any(f and f in path for f in self.ignore)

    @property
    def request_host(self) -> str:
        """The Host its pages are asked for with: the first of ``hosts``, else the origin's."""
        return self.hosts[0] if self.hosts else urlsplit(self.origin).netloc

    def path_of(self, url: str) -> str | None:
        """The site path of a URL or path of this site; None when it is on another site or
        cannot name a page (a link, a canonical, a redirect's location, a sitemap entry)."""
        absolute = normalize_url(url, self.origin.rstrip("/") + "/")
        if absolute is None:
            return None
        parts = urlsplit(absolute)
        origin = urlsplit(normalize_url(self.origin) or self.origin)
        same = (parts.scheme, parts.netloc) == (origin.scheme, origin.netloc) or (
            (parts.hostname or "") in self.hosts
        )
        if not same:
            return None
        try:
            # Validates, maps an ugly ?_escaped_fragment_= link to its #! path, and drops
            # the parameters the site ignores.
            return site_path_from_url(absolute, self.ignored_params)
        except BadRequest:
            return None

    @cached_property
    def ignored_params(self) -> IgnoredParams:
        """The query parameters that are not part of a page's identity (``ignore_params``)."""
        return IgnoredParams(self.ignore_params, self.learned_params)


DAY = 86400.0
# Each number of a site, wherever it comes from (the config file, the API, Crawlbot's
# arguments, ``snapshotd site``, the store), is within its range, ends included: never NaN,
# never infinite. -1 is "unlimited" or "unset" where its range starts there.
SITE_RANGES: dict[str, tuple[float, float]] = {
    "expire_after": (0, 3650 * DAY), "crawl_delay": (0, 3600),
    "javascript_timeout": (0, 600), "render_timeout": (0.1, 600),
    "repeat": (0, 3650), "seed_recrawl_frequency": (0, 3650),  # days
    "max_hops": (-1, 1_000_000), "max_pages": (1, 1_000_000_000),
    "max_to_process": (-1, 1_000_000_000), "max_rounds": (0, 1_000_000),
    "new_paths_per_minute": (1, 1_000_000),
}

MAX_DEFAULT_WORKERS = 4


def default_workers() -> int:
    """``serve``'s worker processes when none are configured: one per core, up to 4."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_DEFAULT_WORKERS))


MAINTENANCE_EVERY = 10.0


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    db: str = "snapshotd.db"
    workers: int = field(default_factory=default_workers)
    api_tokens: tuple[str, ...] = ()
    miss_wait: float = 10.0
    # Seconds between two of the crawler's maintenances (section 5).
    maintenance_every: float = MAINTENANCE_EVERY
    # Lets webhooks reach private and loopback addresses (the operator's own network).
    notify_private: bool = False
    # Where notifyEmail goes out: smtp://[user:password@]host[:port], and its From address.
    smtp: str = ""
    smtp_from: str = "snapshotd@localhost"
    # Where the API may name rules files (a site's ``rules``); none: the API names none.
    rules_dir: str = ""
    # Snapshot answers and healthz tell the pid of the worker that answered (for debugging).
    worker_header: bool = False
    browser: BrowserSettings = field(default_factory=BrowserSettings)
    sites: tuple[SiteSettings, ...] = ()
    config_path: str = ""

    def site(self, name: str) -> SiteSettings | None:
        for s in self.sites:
            if s.name == name:
                return s
        return None

    def site_for_host(self, host: str) -> SiteSettings | None:
        """The site serving a Host header (port ignored, and a name's trailing dot: it names
        the same host); a site with no hosts serves any."""
        host = host.lower().rsplit(":", 1)[0] if not host.startswith("[") else host.lower()
        host = host.removesuffix(".")
        fallback = None
        for s in self.sites:
            if not s.hosts:
                fallback = fallback or s
            elif host in s.hosts:
                return s
        return fallback

    def site_for_url_host(self, host: str) -> SiteSettings | None:
        """The site whose ``hosts`` (or origin host) names ``host`` explicitly."""
        host = host.lower()
        for s in self.sites:
            if host in s.hosts or host == (urlsplit(s.origin).netloc or "").lower():
                return s
        return None

    def site_for_url(self, url: str) -> SiteSettings | None:
        """The site an absolute URL's host belongs to (:meth:`site_for_url_host`): its
        ``host:port`` first, then its bare host name; any user info is ignored."""
        netloc = urlsplit(url).netloc.lower().rsplit("@", 1)[-1]
        site = self.site_for_url_host(netloc)
        if site is None and not netloc.startswith("["):
            site = self.site_for_url_host(netloc.rsplit(":", 1)[0])
        return site


# ---------------------------------------------------------------------------- loading

_SERVER_KINDS = {
    "host": "str",
    "port": "int",
    "db": "str",
    "api_tokens": "list",
    "miss_wait": "float",
    "maintenance_every": "float",
    "workers": "int",
    "notify_private": "bool",
    "smtp": "str",
    "smtp_from": "str",
    "rules_dir": "str",
    "worker_header": "bool",
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
            values[key] = ranged(name, parse_duration(value, key=name), "float",
                                  *SITE_RANGES[key])
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
            _header(header)
        except ValueError as exc:
            raise ConfigError(f"{where}.custom_headers: {exc}") from None
    if values.get("dedup", "content") not in ("content", "exact"):
        raise ConfigError(f"{where}.dedup: expected content or exact, got {values['dedup']!r}")
    if values.get("readiness", "adaptive") not in READINESS:
        raise ConfigError(
            f"{where}.readiness: expected one of {', '.join(READINESS)}, "
            f"got {values['readiness']!r}"
        )
    for name in values.get("ignore_params", ()):
        if not name or "&" in name or "=" in name:
            raise ConfigError(f"{where}.ignore_params: {name!r} is not a parameter name")
    name = values.get("name", "default")
    if not re.fullmatch(SITE_NAME, name):
        raise ConfigError(f"{where}: site name {name!r} may hold only letters, digits, . _ -")
    return SiteSettings(**values)


# Headers the browser itself decides, or that would change what a request is.
_OWN_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
    "te", "trailer", "proxy-authorization", "proxy-connection", "expect", "x-snapshotd",
})


def _header(text: str) -> tuple[str, str]:
    """A ``custom_headers`` entry, ``Name: value``, as (name, value); ValueError says why
    it cannot be one."""
    name, colon, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not colon or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
        raise ValueError(f"{text!r} is not a header as Name: value")
    if name.lower() in _OWN_HEADERS:
        raise ValueError(f"{name} cannot be set: the browser sends its own")
    if any(c in value for c in "\r\n\0"):
        raise ValueError(f"the value of {name} holds a line break")
    return name, value


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
            server_values[key] = tuple(value) if key == "api_tokens" else value
    if "SNAPSHOTD_API_TOKEN" in env and "api_tokens" not in overrides:
        server_values["api_tokens"] = tuple(
            t for t in (server_values.get("api_tokens", ()) + (env["SNAPSHOTD_API_TOKEN"],)) if t
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
    if not 1 <= server_values.get("workers", 1) <= 256:
        raise ConfigError(f"{where}: server.workers must be between 1 and 256")

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
