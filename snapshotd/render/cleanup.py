"""Clean a captured page: what a bot should get, and what the page said about itself.

Pure: HTML text in, :class:`Cleaned` out.

- With ``strip_scripts``, executable scripts go (classic and module scripts, import maps,
  speculation rules, script preloads), in the document and inside every ``<template>``,
  declarative shadow roots included; data blocks such as JSON-LD stay, since they are what
  crawlers read. With the scripts that define its custom elements gone, a snapshot would show
  every one as undefined: its ``<style>`` sheets' ``:defined`` is read as matching every
  element and ``:not(:defined)`` none, as on the live page once they were defined (a style
  that hides undefined elements does not hide the snapshot's).
- Prerender's ``<meta name="prerender-status-code">`` and ``<meta name="prerender-header">``
  tags, and Rendertron's ``<meta name="render:status_code">``, are read and always removed.
  Only the Location, Link, X-Robots-Tag and Content-Language headers are honoured; the first
  status tag with a valid code wins.
- A body is empty when it holds no visible text and no media or embedded content, read in the
  flat tree a renderer shows (:func:`snapshotd.pages.flat_tree.composed`): content drawn only in
  shadow roots counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from selectolax.lexbor import LexborHTMLParser, LexborNode

from snapshotd.pages.flat_tree import composed, fragments, has_shadow_roots

__all__ = ["HONOURED_HEADERS", "Cleaned", "clean", "is_executable_script"]

HONOURED_HEADERS = {
    "location": "Location",
    "link": "Link",
    "x-robots-tag": "X-Robots-Tag",
    "content-language": "Content-Language",
}

# https://mimesniff.spec.whatwg.org/#javascript-mime-type
_JS_TYPES = {
    "application/ecmascript",
    "application/javascript",
    "application/x-ecmascript",
    "application/x-javascript",
    "text/ecmascript",
    "text/javascript",
    "text/javascript1.0",
    "text/javascript1.1",
    "text/javascript1.2",
    "text/javascript1.3",
    "text/javascript1.4",
    "text/javascript1.5",
    "text/jscript",
    "text/livescript",
    "text/x-ecmascript",
    "text/x-javascript",
}
_EXECUTABLE_TYPES = _JS_TYPES | {"module", "importmap", "speculationrules"}
_IGNORED_TEXT_PARENTS = {"script", "style", "template", "noscript", "title"}
_CONTENT_TAGS = {
    "img",
    "picture",
    "svg",
    "video",
    "audio",
    "canvas",
    "iframe",
    "object",
    "embed",
    "input",
    "select",
    "textarea",
    "button",
}


@dataclass(frozen=True)
class Cleaned:
    """A cleaned capture. ``status`` is None unless a status meta tag set one."""

    html: str
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    empty: bool = False


def is_executable_script(attributes: dict[str, str | None]) -> bool:
    """Whether a ``<script>`` with these attributes would run (HTML's script types)."""
    if "type" not in attributes:
        return True
    kind = (attributes.get("type") or "").strip().lower()
    if kind == "":
        # An empty type falls back to the legacy language attribute.
        language = attributes.get("language")
        if language is None or not language.strip():
            return True
        return f"text/{language.strip().lower()}" in _JS_TYPES
    return kind.split(";", 1)[0].strip() in _EXECUTABLE_TYPES


def _meta_name(node: LexborNode) -> str:
    return (node.attributes.get("name") or "").strip().lower()


def _is_empty(tree: LexborHTMLParser) -> bool:
    body = tree.body
    if body is None:
        return True
    for node in body.traverse(include_text=True):
        if node.tag == "-text":
            parent = node.parent
            if parent is not None and parent.tag in _IGNORED_TEXT_PARENTS:
                continue
            if (node.text_content or "").strip():
                return False
        elif node.tag in _CONTENT_TAGS:
            return False
    return True


def _status(content: str | None) -> int | None:
    try:
        code = int((content or "").strip())
    except ValueError:
        return None
    return code if 200 <= code <= 599 else None


_DEFINED = re.compile(r":not\(\s*:defined\s*\)|:defined\b", re.IGNORECASE)


def _as_defined(match: re.Match[str]) -> str:
    return ":not(*)" if match.group(0).lower().startswith(":not") else ":is(*)"


def _strip_scripts(part: LexborHTMLParser | LexborNode) -> bool:
    """Remove what would run from ``part`` (a document or a template's content), and have
    its style sheets take its custom elements as defined."""
    changed = False
    for script in part.css("script"):
        if is_executable_script(script.attributes):
            script.decompose()
            changed = True
    for link in part.css("link[rel]"):
        rel = (link.attributes.get("rel") or "").lower().split()
        as_ = (link.attributes.get("as") or "").strip().lower()
        if "modulepreload" in rel or ("preload" in rel and as_ == "script"):
            link.decompose()
            changed = True
    for style in part.css("style"):
        text = style.text()
        if ":defined" in text.lower():
            style.inner_html = _DEFINED.sub(_as_defined, text)
            changed = True
    return changed


def clean(html: str, *, strip_scripts: bool = True) -> Cleaned:
    """Strip what a bot must not run and read Prerender's meta tags."""
    tree = LexborHTMLParser(html)
    changed = False
    status: int | None = None
    headers: dict[str, str] = {}

    for meta in tree.css("meta[name]"):
        name = _meta_name(meta)
        if name in ("prerender-status-code", "render:status_code"):
            if status is None:
                status = _status(meta.attributes.get("content"))
        elif name == "prerender-header":
            key, sep, value = (meta.attributes.get("content") or "").partition(":")
            canonical = HONOURED_HEADERS.get(key.strip().lower())
            value = value.strip()
            if sep and canonical and value:
                if canonical == "Link" and canonical in headers:
                    headers[canonical] += ", " + value
                else:
                    headers.setdefault(canonical, value)
        else:
            continue
        meta.decompose()
        changed = True

    if strip_scripts:
        parts: list[LexborHTMLParser | LexborNode] = [tree, *fragments(tree)]
        for part in parts:
            changed = _strip_scripts(part) or changed

    html = (tree.html or "") if changed else html
    empty = _is_empty(composed(html) if has_shadow_roots(html) else tree)
    return Cleaned(
        html=html,
        status=status,
        headers=headers,
        empty=empty,
    )
