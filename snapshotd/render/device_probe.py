"""Whether a page looked at its device: what a capture saw the page read, or the network say,
that differs between the device profiles (:mod:`snapshotd.web.devices`).

A page's DOM is what its scripts make of what they are given: the document and the answers
to its requests, the clock, chance, and what they read of the device. Two profiles differ
only in the device (user agent, touch, screen and viewport size, scale factor). So a page
whose scripts read none of it, and whose answers do not vary by user agent, builds the same
DOM in every profile, and one render stands for all of them; a page that read any of it may
not, and is rendered in each profile (:mod:`snapshotd.capture.service`).

Invariants:
- the probe, in every frame's init script, reports each kind of read once, by name, through
  a binding it took before any page script ran; the names come from :data:`READS` alone;
- what it wraps keeps its behaviour: a wrapper calls the browser's own getter or function
  with the page's arguments and returns its answer; a getter or function whose every use
  counts is put back as it was once reported;
- a media query counts only when it asks of what differs between the profiles (width,
  height, aspect ratio, orientation, resolution, pointer, hover), not of colour scheme,
  motion or print;
- an answer counts when its ``Vary`` names the user agent or a client hint of the device,
  and a first document that redirects counts (a phone may be sent elsewhere).

What it cannot see: a test of a property's presence (``"ontouchstart" in window``), which no
script can intercept, and reads in workers. The capture service checks its own judgement by
rendering every profile of some pages it judged alike (``VERIFY_EVERY``).
"""

from __future__ import annotations

import re

__all__ = ["DEVICE_BINDING", "PROBE_SCRIPT", "READS", "varies_by_device"]

DEVICE_BINDING = "__snapshotdDeviceRead"

# What the page may read that differs between profiles, as the probe names it.
READS = frozenset(
    [f"navigator.{p}" for p in ("userAgent", "appVersion", "platform", "userAgentData",
                                "maxTouchPoints")]
    + [f"screen.{p}" for p in ("width", "height", "availWidth", "availHeight", "orientation")]
    + [f"window.{p}" for p in ("innerWidth", "innerHeight", "outerWidth", "outerHeight",
                               "devicePixelRatio", "visualViewport", "orientation", "scrollX",
                               "scrollY", "pageXOffset", "pageYOffset")]
    + [f"element.{p}" for p in ("clientWidth", "clientHeight", "scrollWidth", "scrollHeight",
                                "offsetWidth", "offsetHeight", "offsetTop", "offsetLeft",
                                "offsetParent", "innerText", "currentSrc",
                                "getBoundingClientRect", "getClientRects", "checkVisibility",
                                "computedStyleMap")]
    + ["range.getBoundingClientRect", "range.getClientRects", "document.elementFromPoint",
       "document.elementsFromPoint", "document.createEvent(TouchEvent)", "getComputedStyle",
       "matchMedia", "IntersectionObserver", "ResizeObserver", "vary", "redirect"]
)

# The media features whose answer differs between the profiles.
_DEVICE_MEDIA = r"width|height|aspect-ratio|orientation|resolution|pixel-ratio|pointer|hover"

PROBE_SCRIPT = r"""
(() => {
  const report = window["__BINDING__"];
  if (typeof report !== "function") return;
  const seen = new Set();
  const said = (name) => {
    if (seen.has(name)) return false;
    seen.add(name);
    try { report(name); } catch (e) {}
    return true;
  };
  // A getter that reports its first read, then is put back as it was.
  const getter = (target, prop, name) => {
    const own = target && Object.getOwnPropertyDescriptor(target, prop);
    if (!own || typeof own.get !== "function" || !own.configurable) return;
    Object.defineProperty(target, prop, {
      ...own,
      get() {
        if (said(name)) Object.defineProperty(target, prop, own);
        return own.get.call(this);
      },
    });
  };
  // A function that reports its first call that counts (all, without ``counts``).
  const method = (target, prop, name, counts) => {
    const own = target && Object.getOwnPropertyDescriptor(target, prop);
    if (!own || typeof own.value !== "function" || !own.configurable) return;
    const original = own.value;
    const wrapped = {
      [prop](...args) {
        if ((!counts || counts(args)) && said(name) && !counts) {
          Object.defineProperty(target, prop, own);
        }
        return Reflect.apply(original, this, args);
      },
    }[prop];
    Object.defineProperty(wrapped, "length", { value: original.length });
    Object.defineProperty(target, prop, { ...own, value: wrapped });
  };
  const constructor = (name) => {
    const Original = window[name];
    if (typeof Original !== "function") return;
    const Wrapped = function (...args) {
      said(name);
      return Reflect.construct(Original, args, new.target || Original);
    };
    Wrapped.prototype = Original.prototype;
    Object.defineProperty(window, name, {
      value: Wrapped, writable: true, configurable: true, enumerable: false,
    });
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
  for (const p of ["clientWidth", "clientHeight", "scrollWidth", "scrollHeight"]) {
    getter(Element.prototype, p, "element." + p);
  }
  for (const p of ["offsetWidth", "offsetHeight", "offsetTop", "offsetLeft", "offsetParent",
                   "innerText"]) {
    getter(HTMLElement.prototype, p, "element." + p);
  }
  getter(window.HTMLImageElement && HTMLImageElement.prototype, "currentSrc",
         "element.currentSrc");
  for (const p of ["getBoundingClientRect", "getClientRects", "checkVisibility",
                   "computedStyleMap"]) {
    method(Element.prototype, p, "element." + p);
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
""".replace("__BINDING__", DEVICE_BINDING).replace("__MEDIA__", _DEVICE_MEDIA)

# Request headers by which an answer may be chosen for a device.
_DEVICE_HEADERS = re.compile(
    r"(?:^|,)\s*(?:\*|user-agent|sec-ch-ua(?:-[a-z-]+)?|sec-ch-viewport-[a-z]+|sec-ch-dpr|"
    r"viewport-width|width|dpr|sec-ch-width)\s*(?=,|$)",
    re.IGNORECASE,
)


def varies_by_device(vary: str) -> bool:
    """Whether an answer with this ``Vary`` may differ for another device's request."""
    return bool(_DEVICE_HEADERS.search(vary))
