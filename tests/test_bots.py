"""Bot detection and static assets (pure).

Bot detection is measured over the crawler-user-agents data set (every instance of its
search-engine, social-preview and AI crawler entries) and over real browsers' User-Agent
strings from two registry packages: PyPI's fake-useragent and npm's user-agents.
"""

from __future__ import annotations

import json
import os
from importlib.resources import files
from pathlib import Path

import pytest

from snapshotd.crawlers.bots import BOT_CATEGORIES, BotMatcher, is_static_asset

# In-app browsers whose app is also the name of a link-preview bot (their app's marker after
# a full browser User-Agent). Their formats as the apps send them.
IN_APP = [
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Version/26.6.1 Mobile/15E148 Snapchat/14.25.0.48 (like Safari/8624.5.1.10.3, panda)",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Mobile/15E148 [Pinterest/iOS]",
    "Mozilla/5.0 (Linux; Android 14; SM-S918B Build/UP1A.231005.007; wv) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Version/4.0 Chrome/124.0.6367.82 Mobile Safari/537.36 "
    "[Pinterest/Android]",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Mobile/15E148 NAVER(inapp; search; 2000; 12.3.2; 15PRO)",
    "Mozilla/5.0 (Linux; Android 13; SM-G991N Build/TP1A.220624.014; wv) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Version/4.0 Chrome/122.0.6261.119 Mobile Safari/537.36 "
    "NAVER(inapp; search; 1010; 12.5.3)",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Mobile/15E148 Tumblr/iPhone/33.3/333010/17.4.1/tumblr",
    "Mozilla/5.0 (Linux; Android 12; SM-A525F Build/SP1A.210812.016; wv) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Version/4.0 Chrome/120.0.6099.230 Mobile Safari/537.36 "
    "[FB_IAB/FB4A;FBAV/447.0.0.35.110;]",
    "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 "
    "Chrome/119.0.6045.193 Mobile Safari/537.36 Instagram 309.1.0.41.113 Android (29/10; "
    "420dpi; 1080x2131; samsung; SM-A515F; a51; exynos9611; en_US; 541635863)",
]

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
    # remove drops every pattern holding the text, in any case
    assert not BotMatcher(remove=["Slack"])("Slackbot-LinkExpanding 1.0")


def _crawler_data() -> list[dict]:
    path = files("crawleruseragents") / "crawler-user-agents.json"
    return json.loads(path.read_text(encoding="utf-8"))


TAGS = {"search-engine", "social-preview", "ai-crawler"}


def test_at_least_95_percent_of_the_data_sets_search_social_and_ai_instances_are_bots():
    instances = [
        ua for e in _crawler_data() if TAGS & set(e.get("tags", [])) for ua in e["instances"]
    ]
    assert len(instances) > 500
    m = BotMatcher()
    missed = [ua for ua in instances if not m(ua)]
    share = 1 - len(missed) / len(instances)
    print(f"\ndetected {share:.1%} of {len(instances)} instances; missed {missed[:5]}")
    assert share >= 0.95


@pytest.mark.parametrize(
    ("ua", "category"),
    [
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "search"),
        ("facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", "social"),
        ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2)", "ai"),
        ("Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)", "seo"),
        ("Mozilla/5.0 (compatible; UptimeRobot/2.0; http://www.uptimerobot.com/)", "other"),
    ],
)
def test_categories_can_be_switched(ua: str, category: str) -> None:
    assert BotMatcher(categories=[category])(ua)
    others = [c for c in BOT_CATEGORIES if c != category]
    assert not BotMatcher(categories=others)(ua)
    # an added token is a bot whatever the categories
    assert BotMatcher(add=[ua[:20]], categories=[])(ua)


def test_other_crawlers_are_off_by_default():
    assert not BotMatcher()("curl/8.5.0")
    assert BotMatcher(categories=BOT_CATEGORIES)("curl/8.5.0")


def _browser_corpus() -> list[str]:
    agents = set()
    data = files("fake_useragent") / "data" / "browsers.jsonl"
    for line in data.read_text(encoding="utf-8").splitlines():
        agents.add(json.loads(line)["useragent"])
    npm = Path(__file__).parent / "browser_agents/node_modules/user-agents/dist/user-agents.json"
    if not npm.is_file():
        missing = f"{npm} is missing: run npm ci --prefix {npm.parents[3]}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    agents.update(e["userAgent"] for e in json.loads(npm.read_text(encoding="utf-8")))
    return sorted(agents | set(IN_APP))


def test_no_real_browser_is_taken_for_a_bot():
    corpus = _browser_corpus()
    assert len(corpus) >= 1000
    for app in ("Snapchat", "Pinterest", "NAVER", "Tumblr", "FBAN", "FB_IAB", "Instagram"):
        assert any(app in ua for ua in corpus), app
    m = BotMatcher(categories=BOT_CATEGORIES)  # every category on
    taken = [ua for ua in corpus if m(ua)]
    print(f"\n{len(taken)} of {len(corpus)} browser User-Agents taken for bots")
    assert taken == []


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


@pytest.mark.parametrize(
    ("agent", "family"),
    [
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot"),
        ("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", "bingbot"),
        ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2)", "GPTBot"),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120 Safari/537.36", None),
    ],
)
def test_family_names_the_bot_as_its_user_agent_spells_it(agent, family) -> None:
    assert BotMatcher().family(agent) == family
    assert BotMatcher(add=["bot"]).family("SomeBot/1.0") == "Bot"
