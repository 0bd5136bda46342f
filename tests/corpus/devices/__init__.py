"""The device-profile corpus: real libraries' apps whose page depends on the crawler's device
and viewport (lazy blocks by lozad, an infinite list by react-intersection-observer, a Vue
page with a phone and a desktop layout), and controls that do not (a static page, a Vue page
fetching its content once, a layout switched by CSS alone). Served by :mod:`.server`; read by
tests/test_devices_corpus.py and bench/bench_devices.py.

The same, built from other real libraries' browser builds: react-responsive, enquire.js,
lazysizes (its include plugin), Swiper, ua-parser-js, ismobilejs, mobile-detect; a page
reading ``navigator.userAgentData``; and one choosing its text by ``"ontouchstart" in window``,
which the device probe cannot see (:mod:`snapshotd.render.device_probe`).

Each page: (name, path, what depends on the device).
"""

from __future__ import annotations

PAGES: tuple[tuple[str, str, str], ...] = (
    ("lozad blog: blocks load as they come into view", "/blog", "viewport"),
    ("react-intersection-observer list, 48 products", "/catalogue?total=48", "viewport"),
    ("react-intersection-observer list, 600 products", "/catalogue?total=600", "viewport"),
    ("Vue product page, phone and desktop layouts", "/product", "layout"),
    ("control: static page", "/static", ""),
    ("control: Vue page fetching once", "/spa", ""),
    ("control: layout switched by CSS alone", "/cssonly", "css"),
    ("react-responsive: a phone layout by useMediaQuery, an aside by MediaQuery",
     "/responsive", "layout"),
    ("enquire.js: a short menu on a phone, the whole menu wider", "/enquire", "layout"),
    ("lazysizes include plugin: blocks load as they come near the viewport", "/lazysizes",
     "viewport"),
    ("Swiper carousel: slides a view by the window's width", "/carousel", "layout"),
    ("ua-parser-js: an app offer to phones and tablets", "/uaparser", "agent"),
    ("ismobilejs: a phone number to phones", "/ismobile", "agent"),
    ("mobile-detect: a store finder to phones", "/mobiledetect", "agent"),
    ("navigator.userAgentData.mobile: help worded for phones", "/uadata", "agent"),
    ("'ontouchstart' in window: hints for touch (the probe's blind spot)", "/touch", "touch"),
)

# What each kind says of a page's DOM: built from what the probe sees of the device (it must
# report a read), the same in every profile (CSS alone), or built from a test of a property's
# presence, which the probe cannot see (the capture service's periodic check finds it).
DEVICE_DEPENDENT = frozenset({"viewport", "layout", "agent"})
PROBE_BLIND = frozenset({"touch"})
