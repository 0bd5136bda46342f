"""What a page prints and throws, kept from the process.

Invariants:
- a page's console output is not what it shows: every method of its documents' ``console``
  that prints is a no-op from before the page's first script (:data:`QUIET_SCRIPT`, a part of
  the context's init script, so every frame's document gets it), so no argument, however
  large, is formatted, sent over DevTools or parsed; ``console.createTask`` and ``context``,
  which frameworks call for what they return, are the browser's own;
- a document's uncaught errors and unhandled rejections are not reported either: their events
  are cancelled (the page's own listeners still run), which is what keeps a browser from
  reporting them, whose text (a message, a stack, a rejection's reason) is the page's to make
  as large as it likes;
- the slot's DevTools session has Runtime enabled for the channel (:mod:`.channel`), so
  whatever still gets through (a document no init script reached) reaches the process, where
  nothing keeps it.
"""

from __future__ import annotations

import json

__all__ = ["PRINTS", "QUIET_SCRIPT"]

# The console's methods that print (the Console Standard's, and Chromium's own).
PRINTS = (
    "assert", "clear", "count", "countReset", "debug", "dir", "dirxml", "error", "group",
    "groupCollapsed", "groupEnd", "info", "log", "profile", "profileEnd", "table", "time",
    "timeEnd", "timeLog", "timeStamp", "trace", "warn",
)

QUIET_SCRIPT = (
    """(() => {
  const quiet = window.console;
  if (quiet) {
    for (const name of __PRINTS__) {
      if (typeof quiet[name] !== "function") continue;
      const silent = { [name]() {} }[name];
      try { quiet[name] = silent; } catch (e) {}
    }
  }
  const unreported = (event) => event.preventDefault();
  window.addEventListener("error", unreported);
  window.addEventListener("unhandledrejection", unreported);
})();"""
    .replace("__PRINTS__", json.dumps(PRINTS))
)
