"""Which requests come from bots, and which paths are static assets."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["DEFAULT_BOTS", "BotMatcher", "is_static_asset"]

# Case-insensitive substrings of User-Agent headers. Grouped by who sends them.
DEFAULT_BOTS: tuple[str, ...] = (
    # search engines
    "googlebot", "google-inspectiontool", "googleother", "adsbot-google", "mediapartners-google",
    "storebot-google", "apis-google", "feedfetcher-google", "google-site-verification",
    "bingbot", "bingpreview", "msnbot", "adidxbot", "yandex", "baiduspider", "duckduckbot",
    "slurp", "sogou", "exabot", "seznambot", "petalbot", "applebot", "qwantbot", "qwantify",
    "yeti/", "mojeekbot", "coccocbot", "ia_archiver", "naver",
    # AI crawlers and assistants
    "gptbot", "chatgpt-user", "oai-searchbot", "claudebot", "claude-web", "claude-user",
    "claude-searchbot", "anthropic-ai", "perplexitybot", "perplexity-user", "ccbot",
    "amazonbot", "bytespider", "cohere-ai", "youbot", "diffbot", "duckassistbot",
    "meta-externalagent", "mistralai-user",
    # link previews and social networks
    "facebookexternalhit", "facebookcatalog", "facebot", "twitterbot", "linkedinbot",
    "pinterest", "slackbot", "slack-imgproxy", "discordbot", "telegrambot", "whatsapp",
    "skypeuripreview", "redditbot", "embedly", "quora link preview", "outbrain", "vkshare",
    "tumblr", "bitlybot", "flipboard", "iframely", "snapchat", "viber", "mastodon",
    "bluesky", "nuzzel", "w3c_validator", "developers.google.com/+/web/snippet",
    # SEO tools
    "ahrefsbot", "ahrefssiteaudit", "semrushbot", "siteauditbot", "mj12bot", "dotbot",
    "rogerbot", "screaming frog", "sitebulb", "deepcrawl", "oncrawl", "serpstatbot",
    "dataforseobot", "barkrowler", "blexbot", "seokicks", "chrome-lighthouse",
)

# File extensions that are still pages, not assets.
_PAGE_EXTENSIONS = {"html", "htm", "php", "asp", "aspx", "jsp"}
_EXTENSION = re.compile(r"\.([A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*)$")


class BotMatcher:
    """Matches a User-Agent against the default list plus ``add`` less ``remove``."""

    def __init__(self, add: Iterable[str] = (), remove: Iterable[str] = ()) -> None:
        removed = {r.lower() for r in remove}
        tokens = [t for t in (*DEFAULT_BOTS, *(a.lower() for a in add)) if t not in removed]
        self.tokens = tuple(dict.fromkeys(tokens))
        self._re = re.compile("|".join(re.escape(t) for t in self.tokens)) if self.tokens else None

        self._seen: dict[str, bool] = {}

    def __call__(self, user_agent: str) -> bool:
        # Bots send the same few User-Agent strings over and over: remember the answers.
        known = self._seen.get(user_agent)
        if known is None:
            known = bool(self._re and user_agent and self._re.search(user_agent.lower()))
            if len(self._seen) >= 4096:
                self._seen.clear()
            self._seen[user_agent] = known
        return known


    def family(self, user_agent: str) -> str | None:
        """The bot's name as its User-Agent spells the token it matched (``Googlebot``,
        ``bingbot``, ``GPTBot``), or None for no bot."""
        if not (self._re and user_agent):
            return None
        found = self._re.search(user_agent.lower())
        return user_agent[found.start() : found.end()] if found else None


def is_static_asset(path: str) -> bool:
    """True for ``/app.js``, ``/img/a.PNG``; false for ``/``, ``/a``, ``/a.html``, ``/v1.2/``."""
    last = path.rsplit("/", 1)[-1]
    m = _EXTENSION.search(last)
    return m is not None and m.group(1).lower() not in _PAGE_EXTENSIONS
