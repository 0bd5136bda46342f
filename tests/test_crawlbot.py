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
from snapshotd.server.app import create_app
from snapshotd.web.patterns import url_matches
from tests.chromium import require_chromium
from tests.servers import serve_asgi
from tests.sites.shop import Shop

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
    # Accepted (no nested quantifier), but polynomial: far longer than 50 ms on this URL.
    started = time.monotonic()
    assert not url_matches("http://s.test/" + "a" * 1900, "", "a.*a.*a.*a.*a.*[b-z]$")
    assert time.monotonic() - started < 2


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job(client: httpx.Client, name: str) -> dict:  # type: ignore[type-arg]
    r = client.get("/_snapshotd/v3/crawl", params={"name": name, "token": TOKEN})
    assert r.status_code == 200, r.text
    return r.json()["jobs"][0]  # type: ignore[no-any-return]


def wait_status(client: httpx.Client, name: str, status: int, seen: list[int]) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + 90
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
        concurrency=2, executable=require_chromium(), javascript_timeout=0.2, render_timeout=10
    )
    settings = Settings(db=str(tmp_path / "c.db"), api_tokens=(TOKEN,), browser=browser)
    shop = Shop(delay=0.1)  # a crawl of a few seconds: its status is seen going 7, then 9
    with serve_asgi(shop.app) as origin, serve_asgi(create_app(settings)) as base, httpx.Client(
        base_url=base, timeout=30, trust_env=False
    ) as client:
        # Refusals first: the token, and arguments snapshotd does not carry out.
        assert client.get("/_snapshotd/v3/crawl").status_code == 401
        wrong = client.post("/_snapshotd/v3/crawl", data={"token": "nope", "name": "x"})
        assert wrong.status_code == 401
        api_url = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "x", "seeds": origin + "/", "apiUrl": "http://x/v3/article",
        })
        assert api_url.status_code == 400 and "not applicable" in api_url.json()["error"]
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

        # A job from a form, as Crawlbot's own examples send it; /deep/ is never crawled.
        created = client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "shop", "seeds": origin + "/",
            "urlCrawlPattern": "!/deep/", "obeyRobots": "0", "maxHops": "5",
        })
        assert created.status_code == 200, created.text
        assert created.json()["response"] == "Successfully added urls for spidering."
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

        # The data: processed pages as JSON, the URL report as CSV, with a Bearer token.
        auth = {"Authorization": f"Bearer {TOKEN}"}
        pages = client.get(done["downloadJson"].replace(base, ""), headers=auth).json()
        assert len(pages) == done["objectsFound"]
        home = next(p for p in pages if p["path"] == "/")
        assert home["pageUrl"] == origin + "/" and home["status"] == 200 and home["title"]
        newest = client.get("/_snapshotd/v3/crawl/data",
                            params={"name": "shop", "num": "2", "html": "1"}, headers=auth)
        assert len(newest.json()) == 2 and "<html" in newest.json()[0]["html"].lower()
        urls = client.get(done["downloadUrls"].replace(base, ""), headers=auth)
        assert urls.headers["content-type"].startswith("text/csv")
        header = urls.text.splitlines()[0].split(",")
        assert "duplicate_of" in header and "url" in header
        assert len(urls.text.splitlines()) == done["urlsHarvested"] + 1

        # A new round: every captured page queued again, and captured again.
        before = shop.counts()["/"]
        rounded = client.post("/_snapshotd/v3/crawl",
                              json={"token": TOKEN, "name": "shop", "roundStart": 1})
        assert rounded.json()["response"].startswith("Successfully started a new round")
        wait_status(client, "shop", 9, [7])
        assert shop.counts()["/"] == before + 1

        # maxToCrawl reached: 2. No seed could be crawled: 10.
        client.post("/_snapshotd/v3/crawl", data={
            "token": TOKEN, "name": "small", "seeds": origin + "/", "maxToCrawl": "3",
        })
        small = wait_status(client, "small", 2, [])
        assert small["jobStatus"]["message"] == "Job has reached maxToCrawl limit"
        assert small["urlsHarvested"] == 3
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
        concurrency=2, executable=require_chromium(), javascript_timeout=0.2, render_timeout=10
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
    assert '"urlsHarvested": 4' in mail.get_payload()
    headers, body = receiver.calls[0]
    assert headers["x-crawl-name"] == "shop"
    assert headers["x-crawl-status"] == "Job has reached maxToCrawl limit"
    assert headers["content-type"] == "application/json"
    assert body["name"] == "shop" and body["jobStatus"]["status"] == 2
    assert body["sentJobDoneNotification"] == 1 and body["urlsHarvested"] == 4


@pytest.mark.browser
def test_a_webhook_to_a_loopback_address_is_refused_unless_the_operator_allows_it(
    tmp_path, caplog
) -> None:
    sentinel = Receiver()
    with caplog.at_level(logging.WARNING, logger="snapshotd.crawl.notify"):
        run_job_with_webhook(
            tmp_path, allow_private=False, receiver=sentinel,
            told=lambda: "webhook not called" in caplog.text,
        )
    assert sentinel.calls == []
    assert "webhook not called site=shop" in caplog.text
    assert "refused: loopback" in caplog.text, caplog.text


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
