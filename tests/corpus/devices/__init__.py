"""The device-profile corpus: real libraries' apps whose page depends on the crawler's device
and viewport (lazy blocks by lozad, an infinite list by react-intersection-observer, a Vue
page with a phone and a desktop layout) and controls that do not (a static page, a Vue page
fetching its content once, a layout switched by CSS alone). Served by :mod:`.server`; read by
tests/test_devices_corpus.py and bench/bench_devices.py.

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
)
