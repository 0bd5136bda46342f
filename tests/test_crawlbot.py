"""Crawlbot compatibility: the URL crawl pattern syntax, and ``/_snapshotd/v3/crawl`` driving
real crawls (real Chromium, real SQLite, the crawl test site on loopback)."""

from __future__ import annotations

import logging
import socket
import time
from email import message_from_bytes
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from snapshotd.config.settings import BrowserSettings, Settings, SiteSettings
from snapshotd.patterns.crawl_patterns import REGEX_SECONDS, UrlRegex, url_matches
from snapshotd.server.app import create_app
from tests.chromium import require_chromium
from tests.servers import serve_asgi
from tests.sites.shop import Shop
from tests.test_regex_bounds import timed

TOKEN = "crawlbot-token"


@pytest.mark.parametrize(
    ("pattern", "url", "crawled"),
    [
        # Strings separated by ||: a URL containing any of them.
        ("/blog||/news", "http://s.test/blog/1", True),
        ("/blog||/news", "http://s.test/news/", True),
        ("/blog||/news", "http://s.test/about", False),
        # ! excludes URLs containing the string.
        ("!product", "http://s.test/product/7", False),
        ("!product", "http://s.test/category/7", True),
        ("/blog||!draft", "http://s.test/blog/draft-1", False),
        ("/blog||!draft", "http://s.test/blog/1", True),
        ("/blog||!draft", "http://s.test/news/1", False),
        # ^ and $ anchor a string to the start or the end of the URL.
        ("^http://s.test/cat", "http://s.test/cat/1", True),
        ("^http://s.test/cat", "http://o.test/?from=http://s.test/cat", False),
        ("type=product$", "http://s.test/list?type=product", True),
        ("type=product$", "http://s.test/list?type=products", False),
        ("^http://s.test/$", "http://s.test/", True),
        ("^http://s.test/$", "http://s.test/a", False),
        ("", "http://s.test/anything", True),
    ],
)
def test_the_url_crawl_pattern_syntax(pattern: str, url: str, crawled: bool) -> None:
    assert url_matches(url, pattern) is crawled


def test_a_regex_decides_instead_of_the_pattern_and_is_bounded_in_time() -> None:
    assert url_matches("http://s.test/a/1", "/b", r"/a/\d+$")
    assert not url_matches("http://s.test/b/1", "/b", r"/a/\d+$")
    # Accepted (no nested quantifier), but polynomial: far longer than 50 ms on this URL; it
    # is searched once, given at most its time, and taken as not matching.
    slow = UrlRegex("a.*a.*a.*a.*a.*[b-z]$")
    searches = timed(slow)
    assert not url_matches("http://s.test/" + "a" * 1900, "", slow)
    assert len(searches.given) == 1 and searches.given[0] <= REGEX_SECONDS, searches.given


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job(client: httpx.Client, name: str) -> dict:  # type: ignore[type-arg]
    r = client.get("/_snapshotd/v3/crawl", params={"name": name, "token": TOKEN})
    assert r.status_code == 200, r.text
    return r.json()["jobs"][0]  # type: ignore[no-any-return]


def wait_status(client: httpx.Client, name: str, status: int, seen: list[int]) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + 240  # stops a hang: a loaded machine's crawl takes its time
    while time.monotonic() < deadline:
        current = job(client, name)
        code = current["jobStatus"]["status"]
        if not seen or seen[-1] != code:
            seen.append(code)
        if code == status:
            return current
        time.sleep(0.1)
    raise AssertionError(f"{name}: statuses {seen}, never {status}")


@pytest.mark.browser
def test_crawl_jobs_through_the_crawlbot_endpoint(tmp_path) -> None:
    browser = BrowserSettings(
        concurrency=2, executable=require_chromium(), javascript_timeout=0.2, render_timeout=60
    )
    settings = Settings(db=str(tmp_path / "c.db"), api_tokens=(TOKEN,), browser=browser)
    shop = Shop(delay=0.1)  # a crawl of a few seconds: its status is seen going 7, then 9
    app = create_app(settings)
    # No check of a page's other profile is drawn at random (test_profiles_recapture draws
    # them), so what a round renders is known.
    app.ctx.capture.profiles.chance = lambda: 1.0
    with serve_asgi(shop.app) as origin, serve_asgi(app) as base, httpx.Client(
        base_url=base, timeout=30, trust_env=False
    ) as client:
        # Refusals first: the token, arguments that would mislead, and unknown ones.
        assert client.get("/_snapshotd/v3/crawl").status_code == 401
        wrong = client.post("/_snapshotd/v3/crawl", data={"token": "nope", "name": "x"})
        assert wrong.status_code == 401
        other_hosts = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "x", "seeds": origin + "/", "restrictDomain": "0",
        })
        assert other_hosts.status_code == 400
        assert other_hosts.json()["field"] == "restrictDomain"
        typo = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "x", "seeds": origin + "/", "maxToCrawll": "5",
        })
        assert typo.status_code == 400 and typo.json()["field"] == "maxToCrawll"
        assert "not an argument snapshotd knows" in typo.json()["error"]
        email = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "x", "seeds": origin + "/", "notifyEmail": "a@b.test",
        })
        assert email.status_code == 400 and "no SMTP server" in email.json()["error"]
        rounds = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "x", "seeds": origin + "/", "maxRounds": "three",
        })
        assert rounds.status_code == 400 and rounds.json()["field"] == "maxRounds"
        null = client.post("/_snapshotd/v3/crawl", json={
            "token": TOKEN, "name": "x", "seeds": origin + "/", "maxToCrawl": None,
        })
        assert null.status_code == 400 and null.json()["field"] == "maxToCrawl"
        assert client.get("/_snapshotd/v3/crawl", params={"token": TOKEN}).json() == {"jobs": []}

        # A job from a form, as Crawlbot's own examples send it (apiUrl and useProxies
        # too: taken, and the answer says what snapshotd does instead); /deep/ is never
        # crawled.
        created = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "shop", "seeds": origin + "/",
            "urlCrawlPattern": "!/deep/", "obeyRobots": "0", "maxHops": "5",
            "apiUrl": "https://api.diffbot.com/v3/product", "useProxies": "1",
        })
        assert created.status_code == 200, created.text
        assert created.json()["response"] == "Successfully added urls for spidering."
        warnings = created.json()["warnings"]
        assert [w.split(":")[0] for w in warnings] == ["apiUrl", "useProxies"]
        assert "extracts nothing" in warnings[0] and "no proxy" in warnings[1]
        seen: list[int] = [created.json()["jobs"][0]["jobStatus"]["status"]]
        done = wait_status(client, "shop", 9, seen)
        assert seen[0] in (0, 7) and seen[-2:] == [7, 9], seen
        assert done["jobStatus"]["message"] == "Job has completed and no repeat is scheduled"
        assert done["objectsFound"] >= 10 and done["urlsHarvested"] >= done["objectsFound"]
        assert done["pageCrawlAttempts"] >= done["pageCrawlSuccesses"] >= done["objectsFound"]
        assert done["jobCompletionTimeUTC"] >= done["jobCreationTimeUTC"] > 0
        assert done["urlCrawlPattern"] == "!/deep/" and done["obeyRobots"] == 0
        assert not any(path.startswith("/deep/") for path in shop.counts()), shop.counts()

        # Paused and resumed: 6, then done again.
        paused = client.get("/_snapshotd/v3/crawl",
                            params={"token": TOKEN, "name": "shop", "pause": "1"})
        assert paused.json()["jobs"][0]["jobStatus"]["status"] == 6
        client.get("/_snapshotd/v3/crawl", params={"token": TOKEN, "name": "shop", "pause": "0"})
        assert job(client, "shop")["jobStatus"]["status"] == 9

        # The data: processed pages as JSON, the URL report as CSV, fetched as given (their
        # download token opens this job's data alone), or with a Bearer token.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert TOKEN not in done["downloadJson"] and TOKEN not in done["downloadUrls"]
        given = client.get(done["downloadJson"])
        assert given.status_code == 200, given.text
        pages = given.json()
        assert len(pages) == done["objectsFound"]
        download = done["downloadJson"].split("downloadToken=")[1].split("&")[0]
        for elsewhere in (
            f"/_snapshotd/v3/crawl/data?name=small&downloadToken={download}",
            f"/_snapshotd/v3/crawl?name=shop&delete=1&token={download}",
            f"/_snapshotd/v3/crawl/data?name=shop&downloadToken=1.{download.split('.')[1]}",
        ):
            assert client.get(elsewhere).status_code == 401, elsewhere
        assert client.get(f"/_snapshotd/api/v1/sites/shop?token={download}").status_code == 401
        home = next(p for p in pages if p["path"] == "/")
        assert home["pageUrl"] == origin + "/" and home["status"] == 200 and home["title"]
        newest = client.get("/_snapshotd/v3/crawl/data",
                            params={"name": "shop", "num": "2", "html": "1"}, headers=auth)
        assert len(newest.json()) == 2 and "<html" in newest.json()[0]["html"].lower()
        urls = client.get(done["downloadUrls"])
        assert urls.headers["content-type"].startswith("text/csv")
        # type=urls without format: Crawlbot's CSV report too.
        plain = client.get("/_snapshotd/v3/crawl/data",
                           params={"name": "shop", "type": "urls"}, headers=auth)
        assert plain.headers["content-type"].startswith("text/csv") and plain.text == urls.text
        header = urls.text.splitlines()[0].split(",")
        assert "duplicate_of" in header and "url" in header
        # Every path the job keeps was found; its pages name more URLs than it keeps.
        assert len(urls.text.splitlines()) - 1 < done["urlsHarvested"]

        # A new round: every captured page queued again, and captured again.
        before = shop.counts()["/"]
        rounded = client.post("/_snapshotd/v3/crawl",
                              json={"token": TOKEN, "name": "shop", "roundStart": 1})
        assert rounded.json()["response"].startswith("Successfully started a new round")
        wait_status(client, "shop", 9, [7])
        # The home page rendered alike in both device profiles and shows the same text:
        # captured again in the first alone.
        assert shop.counts()["/"] == before + 1

        # maxToCrawl reached: 2. No seed could be crawled: 10.
        client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "small", "seeds": origin + "/", "maxToCrawl": "3",
        })
        small = wait_status(client, "small", 2, [])
        assert small["jobStatus"]["message"] == "Job has reached maxToCrawl limit"
        assert len(client.get("/_snapshotd/v3/crawl/data", params={
            "name": "small", "type": "urls", "format": "json"}, headers=auth).json()) == 3
        assert small["urlsHarvested"] > 3  # the home page alone names more
        client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "dead", "seeds": f"http://127.0.0.1:{closed_port()}/",
        })
        wait_status(client, "dead", 10, [])

        # Restart empties the job and crawls it again; delete removes it.
        restarted = client.get("/_snapshotd/v3/crawl",
                               params={"token": TOKEN, "name": "small", "restart": "1"})
        assert restarted.json()["response"] == "Successfully restarted job."
        wait_status(client, "small", 2, [])
        deleted = client.get("/_snapshotd/v3/crawl",
                             params={"token": TOKEN, "name": "small", "delete": "1"})
        assert deleted.json() == {"response": "Successfully deleted job."}
        names = [j["name"] for j in client.get(
            "/_snapshotd/v3/crawl", params={"token": TOKEN}).json()["jobs"]]
        assert names == ["dead", "shop"]


class Receiver:
    """A loopback webhook receiver that records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], dict]] = []  # type: ignore[type-arg]

        async def hook(request: Request) -> Response:
            self.calls.append((dict(request.headers), await request.json()))
            return Response("ok")

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])


class Mailbox:
    """A real SMTP server (aiosmtpd) on loopback that keeps what it is sent."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[Any] = []
        mailbox = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]  # noqa: N802
                mailbox.messages.append(message_from_bytes(envelope.content))
                return "250 OK"

        self.controller = Controller(Handler(), hostname="127.0.0.1", port=closed_port())

    def __enter__(self) -> str:
        self.controller.start()
        return f"smtp://127.0.0.1:{self.controller.port}"

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()


def run_job_with_webhook(  # type: ignore[no-untyped-def]
    tmp_path, *, allow_private: bool, receiver: Receiver, smtp: str = "", email: str = "",
    told=None,
) -> None:
    """Crawl a job to its end with a webhook, until ``told()`` (by default: until the
    receiver was called), then through one more maintenance."""
    browser = BrowserSettings(
        concurrency=2, executable=require_chromium(), javascript_timeout=0.2, render_timeout=60
    )
    settings = Settings(db=str(tmp_path / f"hook-{allow_private}.db"), api_tokens=(TOKEN,),
                        browser=browser, notify_private=allow_private, smtp=smtp,
                        maintenance_every=1.0)
    with serve_asgi(Shop().app) as origin, serve_asgi(receiver.app) as hook, serve_asgi(
        create_app(settings)
    ) as base, httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
        created = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "shop", "seeds": origin + "/", "maxToCrawl": "4",
            "notifyWebhook": hook + "/hook", **({"notifyEmail": email} if email else {}),
        })
        assert created.status_code == 200, created.text
        wait_status(client, "shop", 2, [])
        # The crawler's maintenance (every second here) notices the end.
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not (told or (lambda: receiver.calls))():
            time.sleep(0.2)
        if allow_private:
            assert job(client, "shop")["sentJobDoneNotification"] == 1
        time.sleep(2.5)  # two maintenances more: still one call for this round


@pytest.mark.browser
def test_the_webhook_and_the_mail_tell_the_job_has_ended_once_a_round(tmp_path) -> None:
    receiver, mailbox = Receiver(), Mailbox()
    with mailbox as smtp:
        run_job_with_webhook(tmp_path, allow_private=True, receiver=receiver, smtp=smtp,
                             email="ops@shop.test")
    assert len(receiver.calls) == 1, receiver.calls
    [mail] = mailbox.messages
    assert mail["To"] == "ops@shop.test" and mail["From"] == "snapshotd@localhost"
    assert mail["Subject"] == "snapshotd crawl job shop: Job has reached maxToCrawl limit"
    assert f'"urlsHarvested": {receiver.calls[0][1]["urlsHarvested"]}' in mail.get_payload()
    headers, body = receiver.calls[0]
    assert headers["x-crawl-name"] == "shop"
    assert headers["x-crawl-status"] == "Job has reached maxToCrawl limit"
    assert headers["content-type"] == "application/json"
    assert body["name"] == "shop" and body["jobStatus"]["status"] == 2
    # The 4 pages kept name more URLs than that.
    assert body["sentJobDoneNotification"] == 1 and body["urlsHarvested"] > 4


def test_a_webhook_the_policy_will_never_allow_is_refused_when_it_is_set(tmp_path) -> None:
    sentinel = Receiver()
    for private in (False, True):
        settings = Settings(db=str(tmp_path / f"set-{private}.db"), api_tokens=(TOKEN,),
                            notify_private=private)
        with serve_asgi(sentinel.app) as hook, serve_asgi(
            create_app(settings, crawler=False)
        ) as base, httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
            crawlbot = client.post("/_snapshotd/v3/crawl", data={
                "token": TOKEN, "name": "shop", "seeds": "http://127.0.0.1:9/",
                "notifyWebhook": hook + "/hook",
            })
            api = client.put(
                "/_snapshotd/api/v1/sites/other", headers={"Authorization": f"Bearer {TOKEN}"},
                json={"origin": "http://127.0.0.1:9", "notify_webhook": "http://[::1]:9/hook"},
            )
            metadata = client.post("/_snapshotd/v3/crawl", data={
                "token": TOKEN, "name": "meta", "seeds": "http://127.0.0.1:9/",
                "notifyWebhook": "http://169.254.169.254/hook",
            })
            if private:  # the operator's own network: taken (no fetch is made here)
                assert crawlbot.status_code == 200 and api.status_code == 201, api.text
            else:
                assert crawlbot.status_code == 400 and api.status_code == 400
                assert crawlbot.json()["field"] == "notifyWebhook"
                assert "will never let it be called: loopback" in crawlbot.json()["error"]
                assert api.json()["field"] == "notify_webhook"
            assert metadata.status_code == (200 if private else 400)
    assert sentinel.calls == []


@pytest.mark.parametrize("private", [False, True], ids=["refused", "given-up"])
async def test_a_webhook_refused_or_given_up_is_recorded_and_shown_by_the_job(
    tmp_path, private
) -> None:
    from snapshotd.crawl.job_json import describe_job
    from snapshotd.crawl.notify import Notifier
    from snapshotd.net.fetch import Fetcher
    from snapshotd.store.job_state import claim_notification, job_state
    from snapshotd.store.sqlite import SQLiteStore

    calls: list[str] = []

    async def failing(request: Request) -> Response:
        calls.append(request.url.path)
        return Response("no", status_code=500)

    receiver = Starlette(routes=[Route("/hook", failing, methods=["POST"])])

    async def table(host: str, port: int) -> list[str]:  # hooks.test is this loopback host
        assert host == "hooks.test"
        return ["127.0.0.1"]

    settings = Settings(db=str(tmp_path / "n.db"), notify_private=private)
    with serve_asgi(receiver) as hook:
        url = hook.replace("127.0.0.1", "hooks.test") + "/hook"
        site = SiteSettings(name="shop", origin="http://127.0.0.1:9", notify_webhook=url)
        async with SQLiteStore(settings.db) as store:
            state = await job_state(store, "shop", 0.0)
            assert await claim_notification(store, "shop", state)  # as check() does first
            notifier = Notifier(settings, store, None, retries=(),  # type: ignore[arg-type]
                                http=Fetcher(resolve=table))
            try:
                await notifier._call(site, {"jobStatus": {"message": "done"}}, state)
            finally:
                await notifier.aclose()
            job = await describe_job(store, site, paused=False, created=0.0, v3_url="")
    if private:  # let through, answered 500, given up
        assert calls == ["/hook"]
        assert job["notificationError"] == "webhook failed: answered 500"
    else:  # refused by the policy: nothing sent
        assert calls == []
        assert job["notificationError"] == (
            "webhook not called: refused: hooks.test resolves to loopback address 127.0.0.1"
        )
    assert job["sentJobDoneNotification"] == 0


async def test_a_refused_webhook_is_logged_without_its_user_name_or_password(
    tmp_path, caplog
) -> None:
    from snapshotd.crawl.notify import Notifier

    receiver = Receiver()
    settings = Settings(db=str(tmp_path / "n.db"))  # notify_private off: loopback refused
    with serve_asgi(receiver.app) as hook:
        site = SiteSettings(
            name="shop", origin="http://127.0.0.1:9",
            notify_webhook=hook.replace("http://", "http://ops:hunter2@") + "/hook",
        )
        notifier = Notifier(settings, None, None, retries=())  # type: ignore[arg-type]
        job = {"jobStatus": {"message": "Job has completed and no repeat is scheduled"}}
        with caplog.at_level(logging.WARNING, logger="snapshotd.crawl.notify"):
            await notifier._call(site, job)
        await notifier.aclose()
    assert receiver.calls == []
    [line] = [r.getMessage() for r in caplog.records if r.name == "snapshotd.crawl.notify"]
    assert line == (
        f"webhook not called site=shop url={hook}/hook: refused: loopback address 127.0.0.1"
    )
