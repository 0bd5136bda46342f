"""The one way a page speaks to its capture: a native binding the page never sees.

Invariants:
- the page's side is :func:`page_script`: it takes the DevTools binding (``Runtime.addBinding``
  on the slot's own session, never Playwright's ``expose_binding``, whose functions stay on the
  page's window) and removes it from the page's reach before any page script runs; the init
  scripts it wraps speak only through its ``say(kind, text)``, in a closure;
- what a document can say is bounded there: :data:`PER_DOCUMENT` messages of at most
  :data:`MAX_TEXT` characters, of the :data:`KINDS` alone;
- what a capture hears is bounded here whatever the page does (``say`` runs in every frame
  of the page, and a page can make documents): :data:`PER_CAPTURE` messages and
  :data:`PER_CAPTURE_BYTES` bytes; past either, the capture stops listening
  (``Runtime.removeBinding``) and its slot is not used again, so its context, and the binding
  with it, go;
- a message reaches only the capture it was said in: the slot's session is its page's alone,
  and a slot's next capture starts after its wipe, which waits for the old document to be
  gone and for DevTools to answer on that session, so every earlier event has been heard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "BINDING",
    "KINDS",
    "MAX_TEXT",
    "PER_CAPTURE",
    "PER_CAPTURE_BYTES",
    "PER_DOCUMENT",
    "Channel",
    "page_script",
]

BINDING = "__snapshotdChannel"
# ready: onCaptureReady's arguments, as JSON; shared: a shared worker's script URL; device: a
# read (device_probe); shadow: a script made a shadow root (shadow); painted, grown: the main
# frame's document drew its first frame (its height), and two in the tall viewport (viewport).
KINDS = frozenset({"ready", "shared", "device", "shadow", "painted", "grown"})
MAX_TEXT = 16384  # characters of one message
PER_DOCUMENT = 2048  # messages a document may send
PER_CAPTURE = 8192  # messages a capture hears
PER_CAPTURE_BYTES = 4 * 2**20

_PAGE_SCRIPT = """
(() => {
  const binding = window["__BINDING__"];
  // The page never sees the binding: it can neither unhook it nor speak through it.
  try { delete window["__BINDING__"]; } catch (e) {}
  const heard = typeof binding === "function";
  let left = __PER_DOCUMENT__;
  const say = (kind, text) => {
    if (!heard || left <= 0 || typeof text !== "string" || text.length > __MAX_TEXT__) return;
    left--;
    try { binding(kind + " " + text); } catch (e) {}
  };
__PARTS__
})();
"""


def page_script(*parts: str) -> str:
    """The context's init script: ``parts`` (each its own function expression, called once),
    with ``say`` and ``heard`` in their scope."""
    return (
        _PAGE_SCRIPT.replace("__BINDING__", BINDING)
        .replace("__PER_DOCUMENT__", str(PER_DOCUMENT))
        .replace("__MAX_TEXT__", str(MAX_TEXT))
        .replace("__PARTS__", "\n".join(parts))
    )


@dataclass
class Channel:
    """What one capture has heard so far; :meth:`hear` says what a binding event says."""

    messages: int = 0
    bytes: int = 0
    deaf: bool = False  # past the capture's bound: nothing more is heard

    def hear(self, event: dict[str, Any]) -> tuple[str, str] | None:
        """The kind and text of a ``Runtime.bindingCalled`` event of the channel, or None
        (another binding, a malformed message, past the bound)."""
        if event.get("name") != BINDING or self.deaf:
            return None
        payload = event.get("payload")
        if not isinstance(payload, str):
            return None
        self.messages += 1
        self.bytes += len(payload)
        if self.messages > PER_CAPTURE or self.bytes > PER_CAPTURE_BYTES:
            self.deaf = True
            return None
        kind, _, text = payload.partition(" ")
        if kind not in KINDS or len(text) > MAX_TEXT:
            return None
        return kind, text
