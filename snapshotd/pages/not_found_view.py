"""A site's not-found view: what its app draws for a path that cannot exist, learned from
renders of such paths, and whether a capture shows it (SPEC 5.6). Pure: HTML in, decisions
out; no list of words that say "not found" in any language, only what the site itself draws.

A page is read as its *lines*: each text of its main content as a reader sees it
(:func:`snapshotd.pages.fingerprints.main_content`, shadow roots included), lower-cased, white
space collapsed, each date and time one word, and every part that names the page's own path
(the path, its segments and query values, decoded, a slug's words) the one word ``{path}``.
A line is known with the element it is drawn in (``h1|page not found``), and so is each of its
words (``h1:found``): the same text drawn elsewhere is other text.

Learning (:func:`learn`), from two renders of paths that cannot exist (*probes*) and renders
of the site's real pages (*references*: its first seed, rendered with the probes, and pages
it serves):

- the *chrome* is what the first probe shows that at least half of the references show too:
  the layout every page draws around its content;
- the *view* is the words of the lines both probes show, in order, less the chrome; the words
  of lines only one probe shows (what varies from one such render to the next) are its
  *slack*;
- nothing is learned (a reason instead) from fewer than ``MIN_REFERENCES`` references (the
  layout cannot be told from the view: a side bar the seed lacks would be taken for part of
  it), when the probes share less than ``AGREE`` of their own words (the app draws unknown
  paths differently), when the view holds fewer than ``MIN_VIEW_WORDS`` words, or when one
  of the references would be judged to show it (the app draws a real page, such as its home
  page, for any path it does not know).

Judging (:func:`shows`): a capture shows the view when, its chrome lines set aside, at least
``COVER`` of the view's words are there in order, and at most its slack plus
``max(EXTRA_MIN, EXTRA_SHARE × the view's words)`` words more. So a thin real page (an empty
search, an empty category, one line) does not show it unless it draws the view's own words
where the view draws them, and a real page that quotes them has too much more.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any
from urllib.parse import unquote

from selectolax.lexbor import LexborHTMLParser

from snapshotd.pages.fingerprints import main_content, without_times

__all__ = [
    "AGREE", "COVER", "EXTRA_MIN", "EXTRA_SHARE", "MIN_REFERENCES", "MIN_VIEW_WORDS", "Match",
    "Render", "View", "app_shell", "learn", "page_lines", "shows",
]

COVER = 0.85
EXTRA_MIN = 4
EXTRA_SHARE = 0.5
MIN_VIEW_WORDS = 2
MIN_REFERENCES = 3
AGREE = 0.5
PATH_WORD = "{path}"
_MIN_PART = 3  # shorter parts of a path are not taken for it in a text
_WORD = re.compile(r"\{path\}|\w+")
_EXCERPT = 200


@dataclass(frozen=True)
class Render:
    """A page rendered for learning: the site path asked for and the HTML drawn."""

    path: str
    html: str


@dataclass(frozen=True)
class View:
    """A learned not-found view: its words in order, the chrome lines set aside, its slack,
    and a few of its words as a reader would read them."""

    words: tuple[str, ...]
    chrome: frozenset[str]
    slack: int
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"words": list(self.words), "chrome": sorted(self.chrome), "slack": self.slack,
                "text": self.text}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> View:
        return cls(tuple(str(w) for w in data["words"]), frozenset(map(str, data["chrome"])),
                   int(data["slack"]), str(data.get("text", "")))


@dataclass(frozen=True)
class Match:
    """How a capture shows a view: the view's words found, of how many, and words more."""

    found: int
    of: int
    more: int


def _path_parts(path: str) -> list[str]:
    """What may name ``path`` in a page's text, longest first, lower-cased."""
    whole = unquote(path).lower()
    parts = {whole, whole.split("?", 1)[0], whole.split("#", 1)[0]}
    for part in re.split(r"[/?#!&=]+", whole):
        if len(part) >= _MIN_PART:
            parts.add(part)
            slug = " ".join(re.split(r"[-_+.]+", part)).strip()
            if len(slug) >= _MIN_PART:
                parts.add(slug)
    parts.discard("")
    parts.discard("/")
    return sorted(parts, key=len, reverse=True)


def _masker(path: str) -> re.Pattern[str] | None:
    parts = _path_parts(path)
    if not parts:
        return None
    return re.compile("|".join(rf"(?<!\w){re.escape(p)}(?!\w)" for p in parts))


def page_lines(html: str, path: str) -> list[str]:
    """The lines of a page at ``path`` (the module's rules), as ``tag|text``."""
    root = main_content(html)
    if root is None:
        return []
    masker = _masker(path)
    lines = []
    for node in root.traverse(include_text=True):
        if node.tag != "-text":
            continue
        text = " ".join((node.text_content or "").lower().split())
        if not text:
            continue
        text = without_times(text)
        if masker is not None:
            text = masker.sub(PATH_WORD, text)
        parent = node.parent
        lines.append(f"{parent.tag if parent is not None else 'body'}|{text}")
    return lines


def _words(lines: Sequence[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        tag, _, text = line.partition("|")
        out.extend(f"{tag}:{w}" for w in _WORD.findall(text))
    return out


def _found(view: Sequence[str], words: Sequence[str]) -> int:
    """How many of ``view``'s words ``words`` holds, in order."""
    matcher = SequenceMatcher(None, view, words, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks())


def _allowed_more(view: View) -> int:
    return view.slack + max(EXTRA_MIN, int(EXTRA_SHARE * len(view.words)))


def shows(view: View, html: str, path: str) -> Match | None:
    """How the page at ``path`` drawn as ``html`` shows ``view``; None when it does not."""
    own = _words([line for line in page_lines(html, path) if line not in view.chrome])
    allowed = _allowed_more(view)
    if not view.words or len(own) - len(view.words) > allowed:
        return None  # too much more whatever it holds of the view
    found = _found(view.words, own)
    more = len(own) - found
    if found < COVER * len(view.words) or more > allowed:
        return None
    return Match(found, len(view.words), more)


def learn(probes: tuple[Render, Render], references: Sequence[Render]) -> View | str:
    """The view the two ``probes`` show, told from the real pages ``references`` (the first
    one the site's seed), or why none can be learned."""
    first, second = (page_lines(p.html, p.path) for p in probes)
    seen = [set(page_lines(r.html, r.path)) for r in references]
    quorum = max(1, (len(seen) + 1) // 2)
    chrome = frozenset(
        line for line in set(first) if sum(line in lines for lines in seen) >= quorum
    )
    own_first = [line for line in first if line not in chrome]
    own_second = [line for line in second if line not in chrome]
    matcher = SequenceMatcher(None, own_first, own_second, autojunk=False)
    both = [own_first[b.a + i] for b in matcher.get_matching_blocks() for i in range(b.size)]
    words = _words(both)
    most = max(len(_words(own_first)), len(_words(own_second)))
    if len(references) < MIN_REFERENCES:
        return f"{len(references)} real pages are too few to tell the layout from the view"
    if most < MIN_VIEW_WORDS:
        return "the page drawn for a path that cannot exist shows nothing a real page does not"
    if len(words) < AGREE * most:
        return "two paths that cannot exist are drawn as different pages"
    if len(words) < MIN_VIEW_WORDS:
        return "the page drawn for a path that cannot exist says too little of its own"
    slack = most - len(words)
    text = " ".join(line.partition("|")[2] for line in both)[:_EXCERPT]
    view = View(tuple(words), chrome, slack, text)
    for reference in references:  # the seed, and a home page a catch-all route draws
        if shows(view, reference.html, reference.path) is not None:
            return f"the real page {reference.path} looks like the page drawn for a path " \
                   "that cannot exist"
    return view


_ASSET_RELS = {"stylesheet", "modulepreload", "preload"}


def app_shell(html: str) -> str:
    """What names an app's build in its document as served, before any script ran: a hash of
    the scripts and style sheets it loads (bundlers name them by their content); "" when it
    loads none."""
    tree = LexborHTMLParser(html)
    assets = {node.attributes.get("src") or "" for node in tree.css("script[src]")}
    for link in tree.css("link[href]"):
        if _ASSET_RELS & set((link.attributes.get("rel") or "").lower().split()):
            assets.add(link.attributes.get("href") or "")
    assets.discard("")
    if not assets:
        return ""
    return hashlib.sha256("\n".join(sorted(assets)).encode()).hexdigest()[:24]
