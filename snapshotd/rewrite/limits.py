"""Pieces both dialects share: splitting a site path, limits, the time budget."""

from __future__ import annotations

import time

import regex

# Apache answers 414 past its request-line limit (8190); longer site paths are refused alike.
MAX_URL_LENGTH = 8190
# A rewritten path may grow to twice that, as in mod_rewrite, before the rule set is stopped.
MAX_RESULT_LENGTH = 2 * MAX_URL_LENGTH
# Wall time all the patterns of one evaluation may take together.
TIME_BUDGET = 0.1


class Stop(Exception):
    """Evaluation ends now with an HTTP status (unsafe result, too long, too slow)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def split_url(url: str) -> tuple[str, str | None, str]:
    """Split a site path into path, query (None when absent) and "#..." fragment."""
    path, hash_, fragment = url.partition("#")
    fragment = hash_ + fragment
    path, q, query = path.partition("?")
    return path, (query if q else None), fragment


class Budget:
    """The time left for the patterns of one evaluation, by ``clock`` (read once when the
    evaluation begins, then once before each search)."""

    __slots__ = ("deadline",)
    clock = staticmethod(time.monotonic)

    def __init__(self, seconds: float = TIME_BUDGET) -> None:
        self.deadline = self.clock() + seconds

    def search(self, pattern: regex.Pattern[str], text: str) -> regex.Match[str] | None:
        left = self.deadline - self.clock()
        if left <= 0:
            raise Stop(500)
        try:
            return pattern.search(text, timeout=left)
        except TimeoutError:
            raise Stop(500) from None
