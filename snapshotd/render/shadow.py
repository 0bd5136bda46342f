"""Taking a captured page's HTML, with every shadow root in it as declarative shadow DOM.

A crawler's renderer shows the flat tree: what every shadow root draws, open or closed, with
the host's children in its slots. Serialised as ``outerHTML``, a page keeps its light DOM
alone; so the snapshot holds each root as ``<template shadowrootmode="open|closed">``, which
the HTML parser of every evergreen browser turns back into the same root without a script
(SPEC 4.1).

Invariants:

- a page with no shadow root is serialised as it always was, in one call to the page (the
  doctype and ``outerHTML``);
- a page has shadow roots when its main-world scripts created one (``attachShadow``,
  ``setHTMLUnsafe``, ``parseHTMLUnsafe``, reported once through the page's channel,
  :mod:`.channel`), when an open
  one is in its document, or when the document its server sent declares one
  (``shadowrootmode``, a closed root no script can see). Such a page's roots, closed
  ones included, are found by DevTools (``DOM.getDocument`` with ``pierce``; Chromium's own
  roots of ``<input>``, ``<details>``, ``<video>`` are not the page's and are left out), and
  the document is serialised by ``getHTML({shadowRoots})`` in an isolated world, whose
  functions the page cannot replace;
- a root's constructed style sheets (``adoptedStyleSheets``), and the document's, are written
  into the snapshot as ``<style>`` elements (after the root's own styles, as they cascade;
  ``media`` kept, disabled sheets left out), so what the component hides stays hidden. They
  are added to the live document only for the serialisation, in the same task, and removed
  before it ends: nothing is drawn with them, though a page's MutationObserver sees them come
  and go;
- what a page can still hide: a root made with an ``attachShadow`` taken from a realm the
  init script has not reached (an iframe's, before it ran there), on a page that makes no
  other root and declares none. Imperatively assigned slots (``slotAssignment: "manual"``)
  and custom states (``:state()``) have no declarative form: such a root is kept, its
  slotting and states as the markup alone gives them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from playwright.async_api import CDPSession, Page, Response
from playwright.async_api import Error as PlaywrightError

from snapshotd.pages.flat_tree import has_shadow_roots
from snapshotd.render.renderer import line_of

__all__ = ["SHADOW_SCRIPT", "serialize"]

# Run inside :func:`.channel.page_script`: reports, once, that a script made a shadow root
# (or parsed markup that may declare one); each wrapper is a Proxy of the browser's
# function, put back once it has reported.
SHADOW_SCRIPT = r"""
(() => {
  if (!heard) return;  // a frame the capture does not hear (another process's)
  const wrapped = [];
  let said = false;
  const report = () => {
    if (said) return;
    said = true;
    say("shadow", "");
    for (const [target, prop, own] of wrapped) {
      try { Object.defineProperty(target, prop, own); } catch (e) {}
    }
  };
  const method = (target, prop) => {
    const own = target && Object.getOwnPropertyDescriptor(target, prop);
    if (!own || typeof own.value !== "function" || !own.configurable) return;
    const value = new Proxy(own.value, {
      apply(original, self, args) { report(); return Reflect.apply(original, self, args); },
    });
    Object.defineProperty(target, prop, { ...own, value });
    wrapped.push([target, prop, own]);
  };
  method(Element.prototype, "attachShadow");
  method(Element.prototype, "setHTMLUnsafe");
  method(window.ShadowRoot && ShadowRoot.prototype, "setHTMLUnsafe");
  method(Document, "parseHTMLUnsafe");
})();
"""

# The main world's fast way, for a page without shadow roots: null when an open one is there.
_LIGHT = """() => {
  const d = document.doctype;
  const head = d ? new XMLSerializer().serializeToString(d) : "";
  const all = document.getElementsByTagName("*");
  for (let i = 0; i < all.length; i++) if (all[i].shadowRoot) return null;
  return head + (document.documentElement ? document.documentElement.outerHTML : "");
}"""

# In the isolated world, with an array of every root of the page.
_WITH_ROOTS = """function (roots) {
  const added = [];
  const inline = (where, sheets) => {
    for (const sheet of sheets || []) {
      if (sheet.disabled) continue;
      let text = "";
      try { text = Array.from(sheet.cssRules, (rule) => rule.cssText).join("\\n"); }
      catch (e) { continue; }
      const style = document.createElement("style");
      if (sheet.media && sheet.media.mediaText) style.media = sheet.media.mediaText;
      style.textContent = text;
      where.append(style);
      added.push(style);
    }
  };
  try {
    for (const root of roots) inline(root, root.adoptedStyleSheets);
    if (document.head) inline(document.head, document.adoptedStyleSheets);
    const d = document.doctype;
    const head = d ? new XMLSerializer().serializeToString(d) : "";
    const html = document.documentElement;
    return head + (html ? html.getHTML({ serializableShadowRoots: true, shadowRoots: roots })
                        : "");
  } finally {
    for (const style of added) style.remove();
  }
}"""

_WORLD = "snapshotd"
_GROUP = "snapshotd-shadow"
_CHUNK = 500  # roots resolved at once, and handed to the isolated world in one call


def _roots(node: dict[str, Any], found: list[int]) -> None:
    """The backend ids of the page's shadow roots under ``node`` (not its frames')."""
    todo = [node]
    while todo:
        node = todo.pop()
        for root in node.get("shadowRoots", ()):
            if root.get("shadowRootType") in ("open", "closed"):
                found.append(root["backendNodeId"])
            todo.append(root)
        todo.extend(node.get("children", ()))
        if "templateContent" in node:
            todo.append(node["templateContent"])


async def _with_roots(cdp: CDPSession) -> str:
    """The document with every shadow root, serialised from an isolated world."""
    frame = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]
    world = await cdp.send("Page.createIsolatedWorld", {"frameId": frame, "worldName": _WORLD})
    context = world["executionContextId"]
    try:
        tree = await cdp.send("DOM.getDocument", {"depth": -1, "pierce": True})
        found: list[int] = []
        _roots(tree["root"], found)
        roots = await cdp.send(
            "Runtime.evaluate",
            {"expression": "[]", "contextId": context, "objectGroup": _GROUP},
        )
        holder = roots["result"]["objectId"]
        for start in range(0, len(found), _CHUNK):  # sent together, gathered in one array
            resolved = await asyncio.gather(
                *(
                    cdp.send(
                        "DOM.resolveNode",
                        {"backendNodeId": b, "executionContextId": context, "objectGroup": _GROUP},
                    )
                    for b in found[start : start + _CHUNK]
                )
            )
            await cdp.send(
                "Runtime.callFunctionOn",
                {
                    "functionDeclaration": "function (...roots) { this.push(...roots); }",
                    "objectId": holder,
                    "arguments": [{"objectId": r["object"]["objectId"]} for r in resolved],
                },
            )
        document = await cdp.send(
            "Runtime.evaluate",
            {"expression": "document", "contextId": context, "objectGroup": _GROUP},
        )
        answer = await cdp.send(
            "Runtime.callFunctionOn",
            {
                "functionDeclaration": _WITH_ROOTS,
                "objectId": document["result"]["objectId"],
                "arguments": [{"objectId": holder}],
                "returnByValue": True,
            },
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            why = details.get("exception", {}).get("description") or details.get("text", "")
            raise PlaywrightError(f"serialising shadow roots: {line_of(str(why), 'no reason')}")
        return str(answer["result"].get("value", ""))
    finally:
        # The DOM agent would otherwise keep reporting every change of the page.
        with contextlib.suppress(PlaywrightError):
            await cdp.send("Runtime.releaseObjectGroup", {"objectGroup": _GROUP})
        with contextlib.suppress(PlaywrightError):
            await cdp.send("DOM.disable")


async def _declares_roots(document: Response | None) -> bool:
    """Whether the document the server sent declares a shadow root."""
    if document is None:
        return False
    try:
        body = await document.body()
    except PlaywrightError:  # no body kept (a redirect, an evicted answer)
        return False
    return has_shadow_roots(body.decode("utf-8", "replace"))


async def serialize(
    page: Page, cdp: CDPSession, scripted_roots: bool, document: Response | None = None
) -> str:
    """The page's HTML; its shadow roots as declarative ones when it has any (the module's
    rules). ``scripted_roots``: the page's scripts made a shadow root; ``document``: the
    answer that brought the page."""
    if not scripted_roots:
        # Both at once: the page's answer and the document's body are each a round trip.
        light, declared = await asyncio.gather(page.evaluate(_LIGHT), _declares_roots(document))
        if light is not None and not declared:
            return str(light)
    return await _with_roots(cdp)
