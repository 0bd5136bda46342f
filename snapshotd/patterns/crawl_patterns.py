"""Which discovered URLs a site crawls: Crawlbot's URL crawl patterns and regexes.

A pattern is ``||``-separated strings. A URL matches when it contains any of the strings
without ``!`` (or there is none) and none of those with ``!``; ``^`` at the start of a string
anchors it to the start of the URL, ``$`` at its end to the end. A regex, when given, decides
instead of the pattern (``re.search`` semantics on the whole URL).

Invariants:
- a regex setting is checked and compiled as the rules files' patterns are
  (:func:`~snapshotd.patterns.bounded_regexes.compile_pattern`): one that can backtrack
  catastrophically is refused where it is set, so it never runs;
- a search is given at most ``REGEX_SECONDS``; each regex setting (:class:`UrlRegex`, one
  per site) at most ``SHARE_SECONDS`` of each second, whoever asks (a bot's request, the
  crawler); and inside :func:`regex_budget` (the links of one page, the entries of one
  sitemap file) all searches together are given its seconds. A search that runs out of time
  does not match; a budget that saw any logs one line when it ends, outside one a regex logs
  one line a second at most.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import regex

from snapshotd.patterns.bounded_regexes import PatternError, compile_pattern

__all__ = [
    "PatternError",
    "RegexBudget",
    "UrlRegex",
    "compile_regex",
    "regex_budget",
    "url_matches",
]

log = logging.getLogger("snapshotd.web.patterns")

# A regex a URL cannot hold for longer than this.
REGEX_SECONDS = 0.05
# The matching time of all the URLs one page links to, or one sitemap file lists.
PAGE_REGEX_SECONDS = 0.25
# The matching time one regex setting is given in each second, however many ask.
SHARE_SECONDS = 0.1


class RegexBudget:
    """Matching time left for a batch of URLs, and the searches that ran out of it."""

    __slots__ = ("first", "left", "missed")

    def __init__(self, seconds: float) -> None:
        self.left = seconds
        self.missed = 0
        self.first = ""


_budget: ContextVar[RegexBudget | None] = ContextVar("regex_budget", default=None)


@contextmanager
def regex_budget(what: str, seconds: float = PAGE_REGEX_SECONDS) -> Iterator[RegexBudget]:
    """Give the searches made inside (in this task) ``seconds`` of matching time together;
    ``what`` names the batch in the one log line said when some ran out of time."""
    budget = RegexBudget(seconds)
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)
        if budget.missed:
            log.warning(
                "regex ran out of time on %d URLs of %s, taken as not matching (first %.200s)",
                budget.missed, what, budget.first,
            )


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


class UrlRegex:
    """A regex setting, compiled once, and the matching time it took in its current second:
    whoever asks, it is given at most ``SHARE_SECONDS`` of each second (of ``clock``, the
    one that says when a second begins)."""

    __slots__ = ("clock", "pattern", "said", "since", "spent")

    def __init__(self, source: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.pattern = compile_regex(source)
        self.clock = clock
        self.since = self.spent = 0.0
        self.said = False  # whether a search ran out of time this second (logged once)

    def left(self, now: float) -> float:
        """Its matching time left in the second under way (a new one starts with all)."""
        if now - self.since >= 1.0:
            self.since, self.spent, self.said = now, 0.0, False
        return SHARE_SECONDS - self.spent


def compile_regex(source: str) -> regex.Pattern[str]:
    """A regex setting compiled; PatternError says why it cannot be one."""
    return compile_pattern(source)


def _search(rx: UrlRegex, url: str) -> bool:
    budget = _budget.get()
    started = time.perf_counter()
    seconds = min(REGEX_SECONDS, rx.left(rx.clock()))
    if budget is not None:
        seconds = min(seconds, budget.left)
    try:
        if seconds <= 0:
            raise TimeoutError
        return rx.pattern.search(url, timeout=seconds) is not None
    except TimeoutError:
        if budget is not None:
            budget.missed += 1
            budget.first = budget.first or url
        elif not rx.said:
            rx.said = True
            log.warning(
                "regex %r ran out of time on %.200s, taken as not matching (one line a "
                "second at most)", rx.pattern.pattern, url,
            )
        return False
    finally:
        elapsed = time.perf_counter() - started
        rx.spent += elapsed
        if budget is not None:
            budget.left -= elapsed


def url_matches(url: str, pattern: str = "", regex_: UrlRegex | str | None = None) -> bool:
    """Whether ``url`` is one to crawl under ``pattern`` or, when given, ``regex_`` (compiled,
    or its source). A regex that runs out of time does not match."""
    if regex_:
        return _search(UrlRegex(regex_) if isinstance(regex_, str) else regex_, url)
    return _pattern_matches(pattern, url) if pattern else True
