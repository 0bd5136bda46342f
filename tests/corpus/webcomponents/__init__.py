"""The web-component corpus: pages built from real npm libraries (Lit, Shoelace, Ionic's
Stencil components, FAST, Material Web) and hand-written ones (open, closed, nested,
slot-fallback, constructed-style, form-associated and server-declared roots; light-DOM
controls), each with what its snapshot must hold.

``PAGES``: (path, kind, phrases), kind ``shadow`` or ``light``; the phrases are text the page
shows from its shadow roots (or light DOM), which its snapshot must hold.
"""

from __future__ import annotations

PAGES: list[tuple[str, str, tuple[str, ...]]] = [
    ("/open", "shadow", ("Written by the shore warden", "Morning tide pools")),
    ("/closed", "shadow", ("The reading room opens at nine",)),
    ("/nested", "shadow", ("Barley soup", "Serves four hungry walkers",
                           "Soak the barley overnight", "Stir and taste",
                           "Leftovers keep three days")),
    ("/adopted", "shadow", ("Returns are taken within thirty days",)),
    ("/form", "shadow", ("We write once a week",)),
    ("/declarative", "shadow", ("Next train to the coast",)),
    ("/declared-closed", "shadow", ("The last ferry to the island",)),
    ("/probe", "shadow", ("photos of the harbour",)),
    ("/many", "shadow", ("Packet 1 of 1200", "Packet 501 of 1200", "Packet 1200 of 1200")),
    ("/lit-shop?id=1", "shadow", ("Kettle K2", "Boils a litre in ninety seconds")),
    ("/lit-shop?id=2", "shadow", ("Teapot T7", "A cast iron pot")),
    ("/shoelace", "shadow", ("Green tea", "Black tea", "Cups")),
    ("/ionic", "shadow", ("Ridge walk", "Lake loop")),
    ("/fast", "shadow", ("Bergen", "Rain showers through the morning")),
    ("/material", "shadow", ("Notifications", "Save the settings")),
    ("/light", "light", ("Plot seven waters on Mondays",)),
]
# Text a snapshot must not show with scripts off: what the live page hides.
HIDDEN = {
    "/adopted": ("Yes, shipping is free",),
    "/shoelace": ("Pour boiling water over black tea",
                  "A pot takes one spoon for each cup"),
    "/lit-shop?id=1": ("Internal stock code",),
}
# Links each page draws inside its shadow roots.
LINKS = {
    "/open": ("/notes/tide-pools",),
    "/closed": ("/visit/reading-room",),
    "/declared-closed": ("/ferries/winter",),
    "/lit-shop?id=1": ("/lit-shop?id=2", "/lit-shop-about"),
    "/fast": ("/forecast/bergen",),
    "/shoelace": ("/guide/oolong",),
    "/ionic": ("/trails/lake", "/trails/all"),
}
