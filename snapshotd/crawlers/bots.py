"""Which requests come from bots, and which paths are static assets.

Bots are recognised by the crawler-user-agents data set (a maintained list of User-Agent
patterns, each tagged with the kind of bot), grouped into the categories a site switches on
(:data:`BOT_CATEGORIES`), plus a site's own ``add`` substrings less its ``remove`` ones.
Invariants:
- a pattern is the data set's own regular expression, matched case-sensitively as the data
  set specifies; ``add`` and ``remove`` are case-insensitive substrings;
- an in-app browser (an app's marker after a full browser User-Agent) is never taken for the
  app's link-preview bot;
- each answer is remembered per User-Agent string (4,096 at most), so a bot's repeated
  requests cost a dictionary look-up.
"""

from __future__ import annotations

import json
import re
import re._constants as sre_constants
import re._parser as sre_parser
from collections.abc import Iterable
from functools import cache
from importlib.resources import files

__all__ = ["BOT_CATEGORIES", "DEFAULT_BOT_CATEGORIES", "BotMatcher", "is_static_asset"]

# The categories a site switches on, and the data set's tags each one takes in; a tag not
# named here is "other" (monitoring, feed readers, HTTP libraries, archivers, scanners, ...).
BOT_CATEGORIES: tuple[str, ...] = ("search", "social", "ai", "seo", "other")
DEFAULT_BOT_CATEGORIES: tuple[str, ...] = ("search", "social", "ai", "seo")
_TAG_CATEGORY = {
    "search-engine": "search",
    "social-preview": "social",
    "ai-crawler": "ai",
    "seo": "seo",
}

# In-app browsers carrying the name of an app that also has a link-preview bot.
_IN_APP = re.compile(
    r"Tumblr/(?:iPhone|iPad|Android)|\[Pinterest/|NAVER\(inapp|Snapchat/\d|\[FB(?:AN|_IAB)/"
    r"|Instagram \d"
)


@cache
def crawler_patterns() -> tuple[tuple[str, frozenset[str]], ...]:
    """The data set's patterns, each with the categories its tags put it in."""
    path = files("crawleruseragents") / "crawler-user-agents.json"
    entries = json.loads(path.read_text(encoding="utf-8"))
    return tuple(
        (e["pattern"], frozenset(_TAG_CATEGORY.get(t, "other") for t in e.get("tags") or ["-"]))
        for e in entries
    )


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@cache
def _required_literal(pattern: str) -> str | None:
    """The longest run of plain characters every match of ``pattern`` holds (None when it
    has none of 3 characters or more, or sets flags of its own)."""
    if "(?" in pattern:
        return None
    try:
        items = list(sre_parser.parse(pattern))
    except re.error:
        return None
    best: list[str] = []
    run: list[str] = []
    for op, value in items:
        if op is sre_constants.LITERAL:
            run.append(chr(value))
            continue
        best, run = max(best, run, key=len), []
    best = max(best, run, key=len)
    return "".join(best) if len(best) >= 3 else None


class _PatternIndex:
    """Many regular expressions, searched at about the cost of one: each pattern is filed
    under the first three characters of a literal its matches hold, and only the patterns
    whose literal stands in the User-Agent are tried."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self._by_gram: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
        rest: list[str] = []
        for pattern in patterns:
            literal = _required_literal(pattern)
            if literal is None:
                rest.append(pattern)
            else:
                entry = (literal, _compiled(pattern))
                self._by_gram.setdefault(literal[:3], []).append(entry)
        self._rest = re.compile("|".join(f"(?:{p})" for p in rest)) if rest else None

    def find(self, text: str) -> re.Match[str] | None:
        """The first pattern's match in ``text``, or None."""
        by_gram = self._by_gram
        for i in range(len(text) - 2):
            found = by_gram.get(text[i : i + 3])
            if found:
                for literal, regex in found:
                    if text.startswith(literal, i) and (match := regex.search(text)):
                        return match
        return self._rest.search(text) if self._rest else None


class BotMatcher:
    """Matches a User-Agent against the data set's patterns of the ``categories`` switched
    on, plus ``add`` (substrings), less every pattern or added text holding one of
    ``remove`` (in any case)."""

    def __init__(
        self,
        add: Iterable[str] = (),
        remove: Iterable[str] = (),
        categories: Iterable[str] = DEFAULT_BOT_CATEGORIES,
    ) -> None:
        removed = [r.lower() for r in remove if r]
        wanted = set(categories)
        unknown = wanted - set(BOT_CATEGORIES)
        if unknown:
            raise ValueError(f"unknown bot category {sorted(unknown)[0]!r}")

        def kept(text: str) -> bool:
            return not any(r in text.lower() for r in removed)

        self.patterns = tuple(
            p for p, cats in crawler_patterns() if cats & wanted and kept(p)
        )
        self.tokens = tuple(dict.fromkeys(a.lower() for a in add if a and kept(a)))
        self._index = _PatternIndex(self.patterns)
        self._added = (
            re.compile("|".join(re.escape(t) for t in self.tokens)) if self.tokens else None
        )
        self._seen: dict[str, str | None] = {}

    def __call__(self, user_agent: str) -> bool:
        return self.family(user_agent) is not None

    def family(self, user_agent: str) -> str | None:
        """The bot's name as its User-Agent spells what matched (``Googlebot``, ``bingbot``,
        ``GPTBot``), or None when it is no bot."""
        # Bots send the same few User-Agent strings over and over: remember the answers.
        try:
            return self._seen[user_agent]
        except KeyError:
            pass
        found = self._find(user_agent)
        if len(self._seen) >= 4096:
            self._seen.clear()
        self._seen[user_agent] = found
        return found

    def _find(self, user_agent: str) -> str | None:
        if not user_agent:
            return None
        match = None
        if self._added is not None:
            match = self._added.search(user_agent.lower())
        if match is None and not _IN_APP.search(user_agent):
            match = self._index.find(user_agent)
        if match is None:
            return None
        spelled = user_agent[match.start() : match.end()]
        return spelled.strip(" /;:()+-_.") or spelled


# File extensions that are still pages, not assets.
_PAGE_EXTENSIONS = {"html", "htm", "php", "asp", "aspx", "jsp"}
_EXTENSION = re.compile(r"\.([A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*)$")


def is_static_asset(path: str) -> bool:
    """True for ``/app.js``, ``/img/a.PNG``; false for ``/``, ``/a``, ``/a.html``, ``/v1.2/``."""
    last = path.rsplit("/", 1)[-1]
    m = _EXTENSION.search(last)
    return m is not None and m.group(1).lower() not in _PAGE_EXTENSIONS
