"""Device profiles: the screen, input and user agent a snapshot is rendered with, and which
profile each bot is served.

Invariants:

- A snapshot's identity is (site, path, profile). There are two profiles, ``mobile`` and
  ``desktop`` (:data:`PROFILES`), data rather than code: the width, normal height, device
  scale factor, touch and mobile flags Chromium is given, and the crawler whose renderer the
  profile stands for (its user agent, with the Chromium version filled in as Google's
  evergreen renderer does). The page's ``navigator.userAgent`` is the crawler's; the
  ``User-Agent`` header its requests carry is, unless the site says otherwise, the same
  device's browser without the crawler's name (:meth:`Profile.header_agent`).
- ``mobile`` is Googlebot Smartphone's renderer: the Nexus 5X its user agent names (412 px
  wide, device scale factor 2.625, touch, a mobile viewport). ``desktop`` is Googlebot
  desktop's: 1,024 px wide, scale factor 1, no touch.
- A page is first laid out at the normal height, then in a viewport as tall as the crawler's
  (the site's ``viewport_height_mobile`` / ``viewport_height_desktop``, measured at about
  12,000 and 9,000 px), so what enters view in that height loads as it does for the crawler.
- Which profile a bot gets follows its user agent, by the rule MDN gives for telling a mobile
  browser: ``Mobi`` anywhere in the user agent (Googlebot Smartphone, Bingbot's mobile form,
  every crawler that presents itself as a phone) is ``mobile``; anything else (desktop
  crawlers, link previewers, AI and SEO bots) is ``desktop``. A site's ``devices`` setting
  may serve one profile to every bot instead (``mobile`` or ``desktop``); with ``per_bot``
  (the default) it keeps both.
- Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from snapshotd.pages.fingerprints import fingerprint

__all__ = [
    "DEVICES_CHOICES",
    "ORIGIN_AGENT_CHOICES",
    "PROFILES",
    "PROFILE_NAMES",
    "Profile",
    "is_mobile_agent",
    "profile_for_agent",
    "renders_alike",
    "profiles_served",
    "served_profile",
]

# A site's ``devices`` setting: each bot its own profile, or one profile for all.
DEVICES_CHOICES = ("per_bot", "mobile", "desktop")
PROFILE_NAMES = ("mobile", "desktop")

# Google's documented user agents of its two renderers; CHROME is the renderer's version.
_GOOGLEBOT_SMARTPHONE = (
    "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/{chrome} Mobile Safari/537.36 "
    "(compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
)
_GOOGLEBOT_DESKTOP = (
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Googlebot/2.1; "
    "+http://www.google.com/bot.html) Chrome/{chrome} Safari/537.36"
)
# The same renderers' browsers, without the crawler's name: what the origin's requests carry.
_CHROME_ANDROID = (
    "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/{chrome} Mobile Safari/537.36"
)
_CHROME_LINUX = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/{chrome} Safari/537.36"
)
# A site's ``origin_user_agent``: the User-Agent header of a capture's requests.
ORIGIN_AGENT_CHOICES = ("browser", "crawler")


@dataclass(frozen=True)
class Profile:
    """How a page is rendered for one kind of crawler."""

    name: str
    width: int
    height: int  # the normal height, the first layout's
    device_scale_factor: float
    is_mobile: bool
    has_touch: bool
    user_agent: str  # a template: {chrome} is the renderer's version
    browser_agent: str  # the same device's browser, without the crawler's name
    tall_setting: str  # the site setting holding the crawler's viewport height
    agent_setting: str  # the site setting that overrides the user agent

    def agent(self, chrome_version: str, override: str = "") -> str:
        """The user agent the page and its origin see."""
        return override or self.user_agent.format(chrome=chrome_version or "0.0.0.0")

    def header_agent(self, chrome_version: str, override: str = "", *, crawler: bool) -> str:
        """The ``User-Agent`` header of a capture's requests: the site's override where it
        has one, else the crawler's when ``crawler`` (``origin_user_agent = "crawler"``), else
        the device's browser without the crawler's name, so that no middleware in the origin
        takes snapshotd's renderer for a bot and sends its request back to a renderer."""
        if override or crawler:
            return self.agent(chrome_version, override)
        return self.browser_agent.format(chrome=chrome_version or "0.0.0.0")

    def context_options(self, chrome_version: str, override: str = "") -> dict[str, Any]:
        """Playwright's ``new_context`` options for this profile at its normal height."""
        return {
            "viewport": {"width": self.width, "height": self.height},
            "screen": {"width": self.width, "height": self.height},
            "device_scale_factor": self.device_scale_factor,
            "is_mobile": self.is_mobile,
            "has_touch": self.has_touch,
            "user_agent": self.agent(chrome_version, override),
        }


PROFILES: dict[str, Profile] = {
    "mobile": Profile(
        name="mobile",
        width=412,
        height=732,
        device_scale_factor=2.625,
        is_mobile=True,
        has_touch=True,
        user_agent=_GOOGLEBOT_SMARTPHONE,
        browser_agent=_CHROME_ANDROID,
        tall_setting="viewport_height_mobile",
        agent_setting="user_agent_mobile",
    ),
    "desktop": Profile(
        name="desktop",
        width=1024,
        height=768,
        device_scale_factor=1.0,
        is_mobile=False,
        has_touch=False,
        user_agent=_GOOGLEBOT_DESKTOP,
        browser_agent=_CHROME_LINUX,
        tall_setting="viewport_height_desktop",
        agent_setting="user_agent_desktop",
    ),
}


def is_mobile_agent(user_agent: str) -> bool:
    """Whether a user agent presents itself as a phone (MDN: ``Mobi`` anywhere in it)."""
    return "Mobi" in user_agent


def renders_alike(
    a: tuple[int, dict[str, str], str], b: tuple[int, dict[str, str], str]
) -> bool:
    """Whether two profiles' captures (status, honoured headers, HTML) show a crawler the same
    page: the same status and headers and the same main text (:mod:`snapshotd.pages.fingerprints`'s
    fingerprint), so one copy serves both."""
    if a[0] != b[0] or a[1] != b[1]:
        return False
    return a[2] == b[2] or fingerprint(a[2]).text_hash == fingerprint(b[2]).text_hash


def profile_for_agent(user_agent: str) -> str:
    """The profile whose renderer a user agent's own would resemble."""
    return "mobile" if is_mobile_agent(user_agent) else "desktop"


def profiles_served(devices: str) -> tuple[str, ...]:
    """The profiles a site with this ``devices`` setting keeps snapshots of."""
    return PROFILE_NAMES if devices == "per_bot" else (devices,)


def served_profile(devices: str, user_agent: str) -> str:
    """The profile a request with ``user_agent`` is served on a site with ``devices``."""
    return profile_for_agent(user_agent) if devices == "per_bot" else devices
