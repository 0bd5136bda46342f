"""What a reader sees of a page: the visible text of its main content, and fingerprints of it
that tell two captures of the same page apart from two different pages (SPEC 5.2).

The page is read in the flat tree a renderer shows (:func:`snapshotd.pages.flat_tree.composed`):
what shadow roots draw is part of it. The main content is the first ``<main>``, ``role=main``
or ``<article>`` element, else the body, without scripts, styles, templates, hidden elements
and the page's chrome (``nav``, ``header``, ``footer``, ``aside``); its text is lower-cased
with runs of white space made one space, and every date and time in it (``2026-11-25``,
``2026-11-25T10:00:00Z``, ``10:00``, ``10:00:01 pm``, ``25/11/2026``) is one and the same word:
a page that only tells the time it was built is the same page a second later. Two captures show
the same page when that text is the same (``text_hash``), or when both hold at least
``NEAR_WORDS`` words and their SimHashes (64 bits, over 3-word shingles) differ in at most
``NEAR_BITS`` bits. A text under ``MIN_WORDS`` words says too little: it is never taken for
another page's.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from selectolax.lexbor import LexborNode

from snapshotd.pages.flat_tree import composed

__all__ = [
    "MIN_WORDS", "NEAR_BITS", "NEAR_WORDS", "Print", "fingerprint", "main_content", "same_page",
    "without_times",
]

MIN_WORDS = 10
NEAR_WORDS = 50
NEAR_BITS = 3
_SHINGLE = 3
_MAX_SHINGLES = 10_000  # the SimHash of a longer text is that of its start
_CHROME = (
    "script, style, noscript, template, svg, nav, header, footer, aside, [hidden], "
    '[aria-hidden="true"]'
)


_TIMES = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:t\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?)?"
    r"|\b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:\s?[ap]m\b)?"
    r"|\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b"
)


@dataclass(frozen=True)
class Print:
    """A capture's fingerprints: the hash of its main text, its SimHash, its word count."""

    text_hash: str
    simhash: int  # signed 64-bit, as the stores keep it
    words: int


def main_content(html: str) -> LexborNode | None:
    """A page's main content as a reader sees it (the module's rules): its first ``<main>``,
    ``role=main`` or ``<article>``, else its body, without the page's chrome and what is not
    shown; None for a page without a body."""
    tree = composed(html)
    root = tree.css_first('main, [role="main"], article') or tree.body
    if root is None:
        return None
    for node in root.css(_CHROME):
        node.decompose()
    return root


def without_times(text: str) -> str:
    """``text`` (lower-cased) with every date and time in it made one and the same word."""
    return _TIMES.sub("<time>", text)


def main_text(html: str) -> str:
    """The normalised visible text of a page's main content."""
    root = main_content(html)
    if root is None:
        return ""
    return without_times(" ".join(root.text(separator=" ").lower().split()))


def _simhash(words: list[str]) -> int:
    weights = [0] * 64
    count = min(max(len(words) - _SHINGLE + 1, 1), _MAX_SHINGLES)
    shingles = [" ".join(words[i : i + _SHINGLE]) for i in range(count)]
    for shingle in shingles:
        h = int.from_bytes(hashlib.blake2b(shingle.encode(), digest_size=8).digest(), "big")
        for bit in range(64):
            weights[bit] += 1 if h >> bit & 1 else -1
    value = sum(1 << bit for bit in range(64) if weights[bit] > 0)
    return value - (1 << 64) if value >= 1 << 63 else value


def fingerprint(html: str) -> Print:
    text = main_text(html)
    words = text.split()
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Print(digest, _simhash(words) if words else 0, len(words))


def same_page(a: Print, b: Print) -> bool:
    """Whether two captures show a reader the same page (see the module's rules)."""
    if min(a.words, b.words) < MIN_WORDS:
        return False
    if a.text_hash == b.text_hash:
        return True
    if min(a.words, b.words) < NEAR_WORDS:
        return False
    return bin((a.simhash ^ b.simhash) & (2**64 - 1)).count("1") <= NEAR_BITS
