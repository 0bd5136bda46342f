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


# For each bit of a byte, a table that maps every byte to that bit of it (bytes.translate).
_BIT_OF = [bytes(value >> bit & 1 for value in range(256)) for bit in range(8)]


def _simhash(words: list[str]) -> int:
    """Charikar's SimHash of the text's word shingles: bit ``b`` is set when more shingles'
    64-bit hashes (BLAKE2b, big-endian) have it set than not. Counted a column of hash bytes
    at a time in C (``bytes.translate`` and ``count``), not a bit at a time in Python."""
    count = min(max(len(words) - _SHINGLE + 1, 1), _MAX_SHINGLES)
    hashes = b"".join(
        hashlib.blake2b(" ".join(words[i : i + _SHINGLE]).encode(), digest_size=8).digest()
        for i in range(count)
    )
    value = 0
    for byte in range(8):
        column, shift = hashes[byte::8], 8 * (7 - byte)  # the first byte holds the top bits
        for bit in range(8):
            if 2 * column.translate(_BIT_OF[bit]).count(1) > count:
                value |= 1 << (shift + bit)
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
