"""Which discovered URLs a site crawls: Crawlbot's URL crawl patterns and regexes.

A pattern is ``||``-separated strings. A URL matches when it contains any of the strings
without ``!`` (or there is none) and none of those with ``!``; ``^`` at the start of a string
anchors it to the start of the URL, ``$`` at its end to the end. A regex, when given, decides
instead of the pattern (``re.search`` semantics on the whole URL, bounded in time).
"""

from __future__ import annotations

from functools import lru_cache

import regex

__all__ = ["PatternError", "check_regex", "url_matches"]

# A regex a page's link cannot hold for longer than this.
REGEX_SECONDS = 0.05


class PatternError(ValueError):
    """A regex that does not compile."""


def _contains(url: str, term: str) -> bool:
    start, end = term.startswith("^"), term.endswith("$") and len(term) > 1
    core = term[1 if start else 0 : -1 if end else None]
    if start and end:
        return url == core
    if start:
        return url.startswith(core)
    if end:
        return url.endswith(core)
    return core in url


def _pattern_matches(pattern: str, url: str) -> bool:
    terms = [t.strip() for t in pattern.split("||") if t.strip()]
    wanted = [t for t in terms if not t.startswith("!")]
    unwanted = [t[1:] for t in terms if t.startswith("!") and len(t) > 1]
    if any(_contains(url, t) for t in unwanted):
        return False
    return not wanted or any(_contains(url, t) for t in wanted)


@lru_cache(maxsize=64)
def _compiled(source: str) -> regex.Pattern[str]:
    try:
        return regex.compile(source)
    except regex.error as exc:
        raise PatternError(f"{source!r} is not a regular expression: {exc}") from None


def check_regex(source: str) -> None:
    """PatternError when ``source`` does not compile."""
    _compiled(source)


def url_matches(url: str, pattern: str = "", regex_source: str = "") -> bool:
    """Whether ``url`` is one to crawl under ``pattern`` or, when given, ``regex_source``. A
    regex that runs out of time does not match."""
    if regex_source:
        try:
            return _compiled(regex_source).search(url, timeout=REGEX_SECONDS) is not None
        except TimeoutError:
            return False
    return _pattern_matches(pattern, url) if pattern else True
