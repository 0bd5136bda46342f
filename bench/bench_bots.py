"""Bot detection: who is taken for a bot, and how fast, against the previous matcher.

    python bench/bench_bots.py
    python bench/bench_bots.py --requests 500000

The previous matcher (about 90 hand-picked, case-insensitive substrings, kept below as the
baseline) and ``snapshotd.crawlers.bots.BotMatcher`` (the crawler-user-agents data set) are measured
in the same run on the same strings:

- detection: the share of the data set's search-engine, social-preview and AI crawler
  instances each recognises, and how many of the real browsers' User-Agent strings (PyPI's
  fake-useragent data, plus npm's user-agents data when ``make test`` installed it) each
  takes for a bot;
- first sight: the time to judge each distinct string once (no memo), as a ratio;
- a request stream: ``--requests`` User-Agents drawn from those strings with a Zipf-like
  skew (a few bots and browsers send most requests), through each matcher's per-UA memo,
  as a ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from importlib.resources import files
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from snapshotd.crawlers.bots import BOT_CATEGORIES, BotMatcher  # noqa: E402

# The previous matcher's list, the baseline.
PREVIOUS_TOKENS: tuple[str, ...] = (
    # search engines
    "googlebot", "google-inspectiontool", "googleother", "adsbot-google", "mediapartners-google",
    "storebot-google", "apis-google", "feedfetcher-google", "google-site-verification",
    "bingbot", "bingpreview", "msnbot", "adidxbot", "yandex", "baiduspider", "duckduckbot",
    "slurp", "sogou", "exabot", "seznambot", "petalbot", "applebot", "qwantbot", "qwantify",
    "yeti/", "mojeekbot", "coccocbot", "ia_archiver", "naver",
    # AI crawlers and assistants
    "gptbot", "chatgpt-user", "oai-searchbot", "claudebot", "claude-web", "claude-user",
    "claude-searchbot", "anthropic-ai", "perplexitybot", "perplexity-user", "ccbot",
    "amazonbot", "bytespider", "cohere-ai", "youbot", "diffbot", "duckassistbot",
    "meta-externalagent", "mistralai-user",
    # link previews and social networks
    "facebookexternalhit", "facebookcatalog", "facebot", "twitterbot", "linkedinbot",
    "pinterest", "slackbot", "slack-imgproxy", "discordbot", "telegrambot", "whatsapp",
    "skypeuripreview", "redditbot", "embedly", "quora link preview", "outbrain", "vkshare",
    "tumblr", "bitlybot", "flipboard", "iframely", "snapchat", "viber", "mastodon",
    "bluesky", "nuzzel", "w3c_validator", "developers.google.com/+/web/snippet",
    # SEO tools
    "ahrefsbot", "ahrefssiteaudit", "semrushbot", "siteauditbot", "mj12bot", "dotbot",
    "rogerbot", "screaming frog", "sitebulb", "deepcrawl", "oncrawl", "serpstatbot",
    "dataforseobot", "barkrowler", "blexbot", "seokicks", "chrome-lighthouse",
)


class PreviousMatcher:
    """The previous matcher: substrings of the lower-cased User-Agent, answers remembered."""

    def __init__(self) -> None:
        self._re = re.compile("|".join(re.escape(t) for t in PREVIOUS_TOKENS))
        self._seen: dict[str, bool] = {}

    def __call__(self, user_agent: str) -> bool:
        known = self._seen.get(user_agent)
        if known is None:
            known = bool(user_agent and self._re.search(user_agent.lower()))
            if len(self._seen) >= 4096:
                self._seen.clear()
            self._seen[user_agent] = known
        return known


def bot_instances() -> list[str]:
    data = json.loads((files("crawleruseragents") / "crawler-user-agents.json").read_text())
    tags = {"search-engine", "social-preview", "ai-crawler"}
    return [ua for e in data if tags & set(e.get("tags", [])) for ua in e["instances"]]


def browsers() -> list[str]:
    agents = set()
    for line in (files("fake_useragent") / "data" / "browsers.jsonl").read_text().splitlines():
        agents.add(json.loads(line)["useragent"])
    npm = ROOT / "tests/browser_agents/node_modules/user-agents/dist/user-agents.json"
    if npm.is_file():
        agents.update(e["userAgent"] for e in json.loads(npm.read_text()))
    return sorted(agents)


def per_string_us(make, strings: list[str], *, memo: bool, rounds: int = 3) -> float:
    """Best microseconds per string over ``rounds``; without ``memo`` each is judged afresh."""
    best = float("inf")
    for _ in range(rounds):
        matcher = make()
        start = time.perf_counter()
        for ua in strings:
            if not memo:
                matcher._seen.clear()
            matcher(ua)
        best = min(best, time.perf_counter() - start)
    return best / len(strings) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    args = parser.parse_args()
    bots, people = bot_instances(), browsers()
    previous, current = PreviousMatcher(), BotMatcher()
    every = BotMatcher(categories=BOT_CATEGORIES)
    print(f"data set instances (search, social preview, AI): {len(bots)}")
    print(f"real browser User-Agents: {len(people)}")
    for name, m in (("previous", previous), ("snapshotd", current)):
        found = sum(m(ua) for ua in bots)
        taken = sum(m(ua) for ua in people)
        print(f"  {name:10} detects {found / len(bots):6.1%}   browsers taken for bots: {taken}")
    print(f"  {'all five categories on':22} browsers taken for bots: {sum(map(every, people))}")

    strings = bots + people
    old_us = per_string_us(PreviousMatcher, strings, memo=False)
    new_us = per_string_us(BotMatcher, strings, memo=False)
    print(f"first sight, per string: previous {old_us:.1f} us, snapshotd {new_us:.1f} us "
          f"(ratio {new_us / old_us:.2f})")

    rng = random.Random(13)
    weights = [1 / (i + 1) for i in range(len(strings))]
    pool = strings[:]
    rng.shuffle(pool)
    stream = rng.choices(pool, weights=weights, k=args.requests)
    old_s = per_string_us(PreviousMatcher, stream, memo=True)
    new_s = per_string_us(BotMatcher, stream, memo=True)
    print(f"{args.requests:,} requests from {len(strings):,} User-Agents through the memo: "
          f"previous {old_s:.2f} us, snapshotd {new_s:.2f} us (ratio {new_s / old_s:.2f})")


if __name__ == "__main__":
    main()
