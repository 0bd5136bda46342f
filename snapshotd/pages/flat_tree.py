"""Shadow roots in captured HTML: the declarative shadow DOM a snapshot holds
(``<template shadowrootmode="open|closed">``, SPEC 4.1), read as a browser renders it.

Pure: HTML in, a parsed tree out. Invariants:

- :func:`composed` is the flat tree a renderer shows: each host's children are replaced by
  its shadow root's content, where every ``<slot>`` holds the host's children assigned to it
  (by their ``slot`` attribute; text and unnamed elements go to the default slot) or, with
  none, its own fallback content; a host's children no slot takes are not shown. Nested roots
  are composed the same way, to any depth. A page without ``shadowrootmode`` is parsed as it
  is, at no extra cost;
- :func:`fragments` reaches the content of every ``<template>`` (a shadow root's or not),
  nested ones included, which a parsed tree's ``css()`` never reaches;
- the work is bounded: each pass composes every root the tree shows, one level of nesting,
  and parses the document once; roots nested deeper than :data:`MAX_DEPTH` (real apps nest
  a dozen at most) stay templates, whose content no reader reads.
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser, LexborNode

__all__ = ["MAX_DEPTH", "ROOT_SELECTOR", "composed", "fragments", "has_shadow_roots"]

ROOT_SELECTOR = "template[shadowrootmode]"
_MARK = "shadowrootmode"
MAX_DEPTH = 32


def has_shadow_roots(html: str) -> bool:
    """Whether ``html`` may declare a shadow root (a cheap test of its text)."""
    return _MARK in html or _MARK.upper() in html.upper()


def fragments(node: LexborHTMLParser | LexborNode) -> list[LexborNode]:
    """The content of every ``<template>`` under ``node``, nested templates included."""
    found: list[LexborNode] = []
    todo = list(node.template_fragments())
    while todo:
        fragment = todo.pop()
        found.append(fragment)
        todo.extend(fragment.template_fragments())
    return found


def _slot_of(node: LexborNode) -> str | None:
    """The slot name a host's child asks for; None for what no slot takes (comments)."""
    if node.is_text_node:
        return ""
    if not node.is_element_node:
        return None
    return (node.attributes.get("slot") or "").strip()


def _compose_one(template: LexborNode) -> None:
    """Replace the children of ``template``'s host by its root's composed content."""
    host = template.parent
    content = template.template_fragments()
    inner = content[0].inner_html if content else ""
    if host is None:
        template.decompose()
        return
    assigned: dict[str, list[str]] = {}
    child = host.child
    while child is not None:
        if child.tag != "template":  # a template shows nothing, in a slot or not
            name = _slot_of(child)
            if name is not None:
                assigned.setdefault(name, []).append(child.html or "")
        child = child.next
    root = LexborHTMLParser(f"<body>{inner or ''}")
    body = root.body
    if body is not None:
        slots = body.css("slot")
        # The first slot of a name, in tree order, takes that name's children; slots are
        # then filled innermost first, so no fallback slot is touched once replaced.
        first: dict[str, int] = {}
        for index, slot in enumerate(slots):
            first.setdefault((slot.attributes.get("name") or "").strip(), index)
        for index in range(len(slots) - 1, -1, -1):
            slot = slots[index]
            name = (slot.attributes.get("name") or "").strip()
            if first[name] == index and name in assigned:
                slot.inner_html = "".join(assigned[name])
            slot.unwrap()
    host.inner_html = (body.inner_html or "") if body is not None else ""


def composed(html: str) -> LexborHTMLParser:
    """``html`` parsed, with its declarative shadow roots composed into the flat tree."""
    tree = LexborHTMLParser(html)
    if not has_shadow_roots(html):
        return tree
    for _ in range(MAX_DEPTH):  # a pass a level of nesting
        templates = tree.css(ROOT_SELECTOR)
        if not templates:
            break
        # Last first: a later root is in an earlier one's host or after it, so composing it
        # never touches a root still to be composed in this pass.
        for template in reversed(templates):
            _compose_one(template)
    return tree
