"""Settings: the frozen values of the server, the browser and each site. What a site's values
say about a path (whether it is crawled, processed, ignored; the site path of a URL) is
:mod:`snapshotd.sites.path_policy`'s.

Built once at the edge (:mod:`snapshotd.config.loading`), frozen, and passed down. Nothing
here does I/O. ``SITE_RANGES`` bounds a site's numbers, whichever source gave them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import urlsplit

from snapshotd.config.values import (
    ConfigError,
    parse_header,
)
from snapshotd.crawlers.bots import DEFAULT_BOT_CATEGORIES
from snapshotd.crawlers.devices import DEVICES_CHOICES, ORIGIN_AGENT_CHOICES
from snapshotd.http_text.urls import (
    TRACKING_WORD,
    IgnoredParams,
)
from snapshotd.patterns.crawl_patterns import UrlRegex

__all__ = [
    "BrowserSettings",
    "ConfigError",
    "Settings",
    "SiteSettings",
]


READINESS = ("adaptive", "quiet")
# The choices of the settings that take one of a few words.
CHOICES: dict[str, tuple[str, ...]] = {
    "dedup": ("content", "exact"),
    "readiness": READINESS,
    "verify_bots": ("off", "on", "strict"),
    "unverifiable_bots": ("unverified", "verified"),
    "miss_answer": ("503", "origin"),
    "devices": DEVICES_CHOICES,
    "origin_user_agent": ORIGIN_AGENT_CHOICES,
    "soft_404": ("answer", "report", "off"),
}
SITE_NAME = r"(?!\.\.?$)[A-Za-z0-9_.-]{1,100}"  # not "." or "..": a dot segment


# Chromium's sandbox: on unless running as root (auto), always, never.
SANDBOX_SETTINGS = ("auto", "on", "off")


MAX_DEFAULT_CONCURRENCY = 4


def default_concurrency() -> int:
    """Captures at once when none are configured: one per core this process may run on (a
    render keeps a core busy), at least 2 and at most 4; in a ``serve`` of several workers,
    for all of them together (they render through one pool)."""
    return max(2, min(len(os.sched_getaffinity(0)), MAX_DEFAULT_CONCURRENCY))


@dataclass(frozen=True)
class BrowserSettings:
    concurrency: int = field(default_factory=default_concurrency)
    executable: str = ""
    javascript_timeout: float = 3.0
    render_timeout: float = 30.0
    block_resources: tuple[str, ...] = ("image", "media", "font")
    recycle_after: int = 500
    # Proxy misses that may wait for a render slot; -1 (unset) is 4 x concurrency.
    miss_queue: int = -1
    sandbox: str = "auto"  # Chromium's sandbox: one of SANDBOX_SETTINGS

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
    def crawler_reserve(self) -> int:
        """Render slots kept from proxy misses while a crawler capture is under way: one,
        when there are several (misses hold every slot while the crawler has no work)."""
        return 1 if self.concurrency > 1 else 0


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
    # their page uncrawled (snapshotd.sites.param_learner).
    learn_params: bool = True
    # Crawler verification (section 3.4): "off" (every claimant alike, bounded), "on" (a
    # verified crawler is held only to max_pages) or "strict" (an unverified claimant is
    # passed through as a person).
    verify_bots: str = "on"
    # How a crawler that publishes no way to verify it is judged: "unverified" or "verified".
    unverifiable_bots: str = "unverified"
    # What a crawler gets when its page is queued but cannot be had in time: "503" (with
    # Retry-After) or "origin" (the origin's own page).
    miss_answer: str = "503"
    # Which device profiles are rendered and served (snapshotd.crawlers.devices): each bot the one
    # its user agent resembles ("per_bot"), or one for all ("mobile", "desktop").
    devices: str = "per_bot"
    # The crawler's tall viewport, in CSS pixels, a page is laid out in after its first layout.
    viewport_height_mobile: int = 12000
    viewport_height_desktop: int = 9000
    # The user agent the page and its origin see for each profile ("": the crawler's own).
    user_agent_mobile: str = ""
    user_agent_desktop: str = ""
    # Crawlbot's apiUrl as a job was given it, answered back; nothing is extracted with it.
    api_url: str = ""
    # The User-Agent header of a capture's requests, where no user_agent_* is set: the
    # device's browser ("browser") or the crawler's, as the page sees it ("crawler").
    origin_user_agent: str = "browser"
    # Scroll the page to its end in the tall viewport (the crawler never scrolls: opt-in).
    scroll: bool = False
    # Render a page in one profile when it read nothing of its device (capture.profiles);
    # False: every page in every profile the site serves.
    device_probe: bool = True
    # The public path the proxy answers with the site's own sitemap ("": none; SPEC 5.4).
    sitemap_path: str = ""
    # IndexNow (SPEC 5.5): the site's key ("": off) and the endpoint told of its changes.
    indexnow_key: str = ""
    indexnow_endpoint: str = "https://api.indexnow.org/indexnow"
    # The app's not-found view (SPEC 5.6): a capture that shows it is answered 404 ("answer"),
    # only listed ("report"), or not looked for ("off"); answered 410 where the path holds one
    # of ``soft_404_gone``'s strings.
    soft_404: str = "answer"
    soft_404_gone: tuple[str, ...] = ()
    # Learned or pinned (name, path prefix) pairs from the store, not a setting of its own.
    learned_params: tuple[tuple[str, str], ...] = ()

    @property
    def refresh_after(self) -> float:
        """How long until what the site reads again on its own is due (its sitemaps, a path
        that failed five times): ``expire_after``, or 7 days when snapshots never expire."""
        return self.expire_after if math.isfinite(self.expire_after) else 7 * DAY

    @property
    def public_base(self) -> str:
        """Where search engines find the site: the origin's scheme and the site's first host
        (the origin's own without one), no trailing slash."""
        return f"{urlsplit(self.origin).scheme}://{self.request_host}"

    def url_for(self, path: str) -> str:
        """The absolute origin URL of a site path (``/a?b#!c``)."""
        return self.origin.rstrip("/") + path

    @cached_property
    def url_regexes(self) -> tuple[UrlRegex | None, ...]:
        """``url_crawl_regex`` and ``url_process_regex`` compiled, once per site."""
        return tuple(
            UrlRegex(s) if s else None for s in (self.url_crawl_regex, self.url_process_regex)
        )

    @cached_property
    def headers(self) -> dict[str, str]:
        """``custom_headers`` by name."""
        return dict(parse_header(h) for h in self.custom_headers)

    @property
    def request_host(self) -> str:
        """The Host its pages are asked for with: the first of ``hosts``, else the origin's."""
        return self.hosts[0] if self.hosts else urlsplit(self.origin).netloc

    @cached_property
    def ignored_params(self) -> IgnoredParams:
        """The query parameters that are not part of a page's identity (``ignore_params``)."""
        return IgnoredParams(self.ignore_params, self.learned_params)


DAY = 86400.0
# The shortest ``expire_after``: a snapshot fresh for less is recaptured about as soon as it
# is stored (the crawler looks for expired paths every ``maintenance_every``, a capture takes
# seconds), so bots get STALE answers from a crawler that never rests.
MIN_EXPIRE_AFTER = 60.0
# ``expire_after = "never"``: a snapshot is fresh until it is recaptured by hand (the API's
# force, a crawl job's new round, a restart).
NEVER = "never"
# Each number of a site, wherever it comes from (the config file, the API, Crawlbot's
# arguments, ``snapshotd site``, the store), is within its range, ends included: never NaN,
# never infinite. -1 is "unlimited" or "unset" where its range starts there.
SITE_RANGES: dict[str, tuple[float, float]] = {
    "expire_after": (MIN_EXPIRE_AFTER, 3650 * DAY), "crawl_delay": (0, 3600),
    "javascript_timeout": (0, 600), "render_timeout": (0.1, 600),
    "repeat": (0, 3650), "seed_recrawl_frequency": (0, 3650),  # days
    "max_hops": (-1, 1_000_000), "max_pages": (1, 1_000_000_000),
    "max_to_process": (-1, 1_000_000_000), "max_rounds": (0, 1_000_000),
    "new_paths_per_minute": (1, 1_000_000),
    "viewport_height_mobile": (320, 50_000), "viewport_height_desktop": (320, 50_000),
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
    # Tokens that open the render endpoint and nothing else (what a middleware holds).
    render_tokens: tuple[str, ...] = ()
    miss_wait: float = 10.0
    # Seconds between two of the crawler's maintenances (section 5).
    maintenance_every: float = MAINTENANCE_EVERY
    # Lets webhooks reach private and loopback addresses (the operator's own network).
    notify_private: bool = False
    # Lets IndexNow endpoints be private and loopback addresses (the operator's own network).
    indexnow_private: bool = False
    # Where notifyEmail goes out: smtp://[user:password@]host[:port], and its From address.
    smtp: str = ""
    smtp_from: str = "snapshotd@localhost"
    # Where the API may name rules files (a site's ``rules``); none: the API names none.
    rules_dir: str = ""
    # Snapshot answers and healthz tell the pid of the worker that answered (for debugging).
    worker_header: bool = False
    # The SEO4Ajax-compatible face (snapshotd.proxy.seo4ajax_face): requests whose Host names one
    # of these, or taken on this port (0: none), are answered as SEO4Ajax's API answers.
    seo4ajax_hosts: tuple[str, ...] = ()
    seo4ajax_port: int = 0
    # Crawlbot's API at the root of a port of its own (snapshotd.api.crawlbot_port; 0: none).
    crawlbot_port: int = 0
    # Front servers (addresses, networks) whose forwarded_header names the client, and the
    # header they write: "x-forwarded-for" or "forwarded" (section 3.4).
    trusted_proxies: tuple[str, ...] = ()
    forwarded_header: str = "x-forwarded-for"
    # Published address ranges of crawler families, "family=file or URL" (section 3.4).
    bot_ranges: tuple[str, ...] = ()
    # Seconds between two loads of every bot_ranges list.
    bot_ranges_every: float = 86400.0
    # The name servers crawler verification asks, "address" or "address:port"; none: the
    # system's (section 3.4).
    dns_servers: tuple[str, ...] = ()
    # Networks whose clients use the render and screenshot endpoints without a token
    # (Rendertron's middleware sends none); none by default.
    render_clients: tuple[str, ...] = ()
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
