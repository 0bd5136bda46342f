"""Whether a page looked at its device: what a capture saw the page read, or the network say,
that differs between the device profiles (:mod:`snapshotd.crawlers.devices`).

A page's DOM is what its scripts make of what they are given: the document and the answers
to its requests, the clock, chance, and what they read of the device. Two profiles differ
only in the device (user agent, touch, screen and viewport size, scale factor). So a page
whose scripts read none of it, and whose answers do not vary by device, builds the same DOM
in every profile, and one render stands for all of them; a page that read any of it may
not, and is rendered in each profile (:mod:`snapshotd.capture.profiles`).

Invariants:
- the probe, in every frame's init script, reports each kind of read once, by name, through
  the capture's channel (:mod:`.channel`), which the page cannot reach; the names come from
  :data:`READS` alone;
- what it wraps keeps its behaviour: a wrapper is a Proxy of the browser's own getter,
  function or constructor and returns its answer; one whose every use counts is put back as
  it was once reported (left wrapped if the page froze its prototype);
- a media query counts only when it asks of what differs between the profiles (width,
  height, aspect ratio, orientation, resolution, pointer, hover), not of colour scheme,
  motion or print;
- an answer that can change the DOM (a document, a script, data; not an image, style sheet
  or font) counts when its ``Vary`` names a request header other than those the same for
  every device, and a first document that redirects counts (a phone may be sent elsewhere).

What it cannot see: a test of a property's presence (``"ontouchstart" in window``), which no
script can intercept, and reads in workers. :mod:`snapshotd.capture.profiles` checks its
judgement by rendering every profile of some pages it judged alike.
"""

from __future__ import annotations

__all__ = ["BUILDS_THE_PAGE", "PROBE_SCRIPT", "READS", "varies_by_device"]

# What the page may read that differs between profiles, as the probe names it.
READS = frozenset(
    [f"navigator.{p}" for p in ("userAgent", "appVersion", "platform", "userAgentData",
                                "maxTouchPoints")]
    + [f"screen.{p}" for p in ("width", "height", "availWidth", "availHeight", "orientation")]
    + [f"window.{p}" for p in ("innerWidth", "innerHeight", "outerWidth", "outerHeight",
                               "devicePixelRatio", "visualViewport", "orientation", "scrollX",
                               "scrollY", "pageXOffset", "pageYOffset")]
    + [f"element.{p}" for p in ("clientWidth", "clientHeight", "scrollWidth", "scrollHeight",
                                "scrollTop", "scrollLeft", "offsetWidth", "offsetHeight",
                                "offsetTop", "offsetLeft", "offsetParent", "innerText",
                                "currentSrc", "width", "height", "x", "y",
                                "getBoundingClientRect", "getClientRects", "checkVisibility",
                                "computedStyleMap", "getBBox", "getCTM", "getScreenCTM")]
    + ["range.getBoundingClientRect", "range.getClientRects", "document.elementFromPoint",
       "document.elementsFromPoint", "document.createEvent(TouchEvent)", "getComputedStyle",
       "matchMedia", "IntersectionObserver", "ResizeObserver", "vary", "redirect"]
)

# The media features whose answer differs between the profiles.
_DEVICE_MEDIA = r"width|height|aspect-ratio|orientation|resolution|pixel-ratio|pointer|hover"

# Wrappers are Proxies of the browser's own functions: a wrapped getter or function keeps its
# name, length and "[native code]" text, a constructor still refuses to be called without
# ``new``, and ``this`` and ``new.target`` reach the original unchanged.
PROBE_SCRIPT = r"""
(() => {
  if (!heard) return;  // a frame the capture does not hear (another process's)
  const seen = new Set();
  const said = (name) => {
    if (seen.has(name)) return false;
    seen.add(name);
    say("device", name);
    return true;
  };
  const restore = (target, prop, own) => {
    try { Object.defineProperty(target, prop, own); } catch (e) {}  // a frozen prototype
  };
  // A getter that reports its first read, then is put back as it was.
  const getter = (target, prop, name) => {
    const own = target && Object.getOwnPropertyDescriptor(target, prop);
    if (!own || typeof own.get !== "function" || !own.configurable) return;
    const get = new Proxy(own.get, {
      apply(original, self, args) {
        if (said(name)) restore(target, prop, own);
        return Reflect.apply(original, self, args);
      },
    });
    Object.defineProperty(target, prop, { ...own, get });
  };
  // A function that reports its first call that counts (every call, without ``counts``, and
  // is then put back as it was).
  const method = (target, prop, name, counts) => {
    const own = target && Object.getOwnPropertyDescriptor(target, prop);
    if (!own || typeof own.value !== "function" || !own.configurable) return;
    const value = new Proxy(own.value, {
      apply(original, self, args) {
        if ((!counts || counts(args)) && said(name) && !counts) restore(target, prop, own);
        return Reflect.apply(original, self, args);
      },
    });
    Object.defineProperty(target, prop, { ...own, value });
  };
  const constructor = (name) => {
    const own = Object.getOwnPropertyDescriptor(window, name);
    if (!own || typeof own.value !== "function") return;
    const value = new Proxy(own.value, {
      construct(original, args, newTarget) {
        if (said(name)) restore(window, name, own);
        return Reflect.construct(original, args, newTarget === value ? original : newTarget);
      },
    });
    Object.defineProperty(window, name, { ...own, value });
  };
  for (const p of ["userAgent", "appVersion", "platform", "userAgentData", "maxTouchPoints"]) {
    getter(Navigator.prototype, p, "navigator." + p);
  }
  for (const p of ["width", "height", "availWidth", "availHeight", "orientation"]) {
    getter(Screen.prototype, p, "screen." + p);
  }
  for (const p of ["innerWidth", "innerHeight", "outerWidth", "outerHeight", "devicePixelRatio",
                   "visualViewport", "orientation", "scrollX", "scrollY", "pageXOffset",
                   "pageYOffset"]) {
    getter(window, p, "window." + p);
  }
  for (const p of ["clientWidth", "clientHeight", "scrollWidth", "scrollHeight", "scrollTop",
                   "scrollLeft"]) {
    getter(Element.prototype, p, "element." + p);
  }
  for (const p of ["offsetWidth", "offsetHeight", "offsetTop", "offsetLeft", "offsetParent",
                   "innerText"]) {
    getter(HTMLElement.prototype, p, "element." + p);
  }
  const image = window.HTMLImageElement && HTMLImageElement.prototype;
  for (const p of ["currentSrc", "width", "height", "x", "y"]) {
    getter(image, p, "element." + p);
  }
  for (const p of ["getBoundingClientRect", "getClientRects", "checkVisibility",
                   "computedStyleMap"]) {
    method(Element.prototype, p, "element." + p);
  }
  const graphics = window.SVGGraphicsElement && SVGGraphicsElement.prototype;
  for (const p of ["getBBox", "getCTM", "getScreenCTM"]) {
    method(graphics, p, "element." + p);
  }
  for (const p of ["getBoundingClientRect", "getClientRects"]) {
    method(Range.prototype, p, "range." + p);
  }
  for (const p of ["elementFromPoint", "elementsFromPoint"]) {
    method(Document.prototype, p, "document." + p);
  }
  method(Document.prototype, "createEvent", "document.createEvent(TouchEvent)",
         (args) => /touch/i.test(String(args[0])));
  method(window, "getComputedStyle", "getComputedStyle");
  method(window, "matchMedia", "matchMedia", (args) => /__MEDIA__/i.test(String(args[0])));
  constructor("IntersectionObserver");
  constructor("ResizeObserver");
})();
""".replace("__MEDIA__", _DEVICE_MEDIA)

# Answers whose kind can change the DOM; an image, a style sheet or a font cannot.
BUILDS_THE_PAGE = frozenset({"document", "script", "xhr", "fetch", "eventsource", "other"})

# Request headers an answer may vary by that are the same for every device profile: any
# other (User-Agent, a client hint, a CDN's device header, a name unknown here) may choose
# the answer by device.
_SAME_FOR_EVERY_DEVICE = frozenset({
    "accept", "accept-encoding", "accept-language", "accept-charset", "origin", "cookie",
    "authorization", "referer", "range", "if-none-match", "if-modified-since",
    "access-control-request-method", "access-control-request-headers", "x-requested-with",
    "content-type", "rsc", "next-router-state-tree", "next-router-prefetch", "next-url",
    "x-snapshotd", "x-prerender",
})


def varies_by_device(vary: str) -> bool:
    """Whether an answer with this ``Vary`` may differ for another device's request."""
    names = {n.strip().lower() for n in vary.split(",")} - {""}
    return bool(names - _SAME_FOR_EVERY_DEVICE)
