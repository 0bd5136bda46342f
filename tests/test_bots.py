"""Bot detection and static assets (pure)."""

from __future__ import annotations

import pytest

from snapshotd.bots import BotMatcher, is_static_asset

BOTS = [
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
    "Twitterbot/1.0",
    "LinkedInBot/1.0 (compatible; Mozilla/5.0; Apache-HttpClient +http://www.linkedin.com)",
    "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
    "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)",
    "WhatsApp/2.23.20.0",
    "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2)",
    "Mozilla/5.0 (compatible; ClaudeBot/1.0; +claudebot@anthropic.com)",
    "Mozilla/5.0 (compatible; PerplexityBot/1.0)",
    "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
    "Mozilla/5.0 (compatible; SemrushBot/7~bl; +http://www.semrush.com/bot.html)",
    "Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)",
    "DuckDuckBot/1.1; (+http://duckduckgo.com/duckduckbot.html)",
    "Mozilla/5.0 (Macintosh) AppleWebKit/605.1.15 (KHTML, like Gecko) Applebot/0.1",
    "Screaming Frog SEO Spider/19.0",
]
PEOPLE = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
    "",
]


@pytest.mark.parametrize("ua", BOTS)
def test_bots_are_detected(ua):
    assert BotMatcher()(ua)


@pytest.mark.parametrize("ua", PEOPLE)
def test_people_are_not(ua):
    assert not BotMatcher()(ua)


def test_add_and_remove():
    m = BotMatcher(add=["MyCrawler"], remove=["twitterbot"])
    assert m("mycrawler/1.0")
    assert not m("Twitterbot/1.0")
    assert m("Twitterbot/1.0") is False  # the remembered answer is the same
    assert BotMatcher()("Twitterbot/1.0")


@pytest.mark.parametrize(
    "path,asset",
    [
        ("/", False),
        ("/items/3", False),
        ("/index.html", False),
        ("/page.php", False),
        ("/a.ASPX", False),
        ("/price/1.5", False),
        ("/v1.2/", False),
        ("/app.js", True),
        ("/img/logo.PNG", True),
        ("/font.woff2", True),
        ("/feed.xml", True),
    ],
)
def test_static_assets(path, asset):
    assert is_static_asset(path) is asset
