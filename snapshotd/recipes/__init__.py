"""Front-server recipes (``nginx.conf``, ``apache.conf``, ``Caddyfile``, ``haproxy.cfg``;
also in docs/integrations/) and
``snapshotd recipe``, which prints one with its ``{{SLOT}}`` slots filled for a site.

Invariant: the text printed is the shipped file, only its slots replaced, so what
tests/test_integrations.py runs is what a user gets.
"""

from __future__ import annotations

from importlib.resources import files
from urllib.parse import urlsplit

from snapshotd.config.settings import Settings, SiteSettings

__all__ = ["RECIPES", "fill_recipe", "recipe_text"]

RECIPE_FILES = {
    "nginx": "nginx.conf", "apache": "apache.conf", "caddy": "Caddyfile", "haproxy": "haproxy.cfg"
}
RECIPES = tuple(RECIPE_FILES)
# Caddy's default is the site's names: Caddy then serves them over HTTPS with a certificate
# it gets and renews.
DEFAULT_LISTEN = {"nginx": "80", "apache": "*:80", "haproxy": ":80"}


def recipe_text(name: str) -> str:
    return (files(__name__) / RECIPE_FILES[name]).read_text(encoding="utf-8")


def fill_recipe(
    name: str, settings: Settings, site: SiteSettings, listen: str | None = None
) -> str:
    """The recipe for ``site`` behind this snapshotd; raises ValueError for what it cannot
    be written for (an https origin, no ``hosts``)."""
    origin = urlsplit(site.origin)
    if origin.scheme != "http":
        raise ValueError(f"the recipes reach the app over http; {site.origin} is not")
    if not site.hosts:
        raise ValueError(f"site {site.name!r} names no hosts: give --hosts shop.example.com")
    host = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(settings.host, settings.host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    values = {
        "LISTEN": listen or DEFAULT_LISTEN.get(name) or ", ".join(site.hosts),
        # nginx and HAProxy take every name; Apache's ServerName takes one.
        "SERVER_NAME": site.hosts[0] if name == "apache" else " ".join(site.hosts),
        "APP": origin.netloc,
        "SNAPSHOTD": f"{host}:{settings.port}",
    }
    text = recipe_text(name)
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    return text
