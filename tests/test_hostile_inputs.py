"""What a stranger sends that is not what the code expects, over real sockets (snapshotd on
uvicorn as ``serve`` runs it, a real SQLite file, a renderer of fixed pages, a local origin):
each gets a clear 4xx, never a 500 or a traceback in the log."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from tests.test_bot_answers import snapshotd
from tests.test_flood import BOT, TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Iterator[str]:
    with snapshotd(tmp_path_factory.mktemp("hostile")) as (url, _paths):
        yield url


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


# Characters str.isdigit holds for that int() refuses ('²') or reads ('١', fullwidth '１').
UNICODE_DIGITS = ("²", "١٢", "１２")


@pytest.mark.parametrize("digits", UNICODE_DIGITS)
def test_a_download_token_of_unicode_digits_is_refused_as_any_wrong_token(base, caplog, digits):
    with httpx.Client(base_url=base, trust_env=False) as client:
        r = client.get("/_snapshotd/v3/crawl/data", params={
            "name": "s", "downloadToken": f"{digits}.abc",
        })
    assert r.status_code == 401, r.text
    assert r.json()["field"] == "downloadToken"
    assert no_tracebacks(caplog) == []


@pytest.mark.parametrize("code", ["²", "٣٠١", "３０１"])
def test_a_rule_status_of_unicode_digits_is_a_clear_400(base, caplog, code):
    with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
        for rules in (f"^/a /b [R={code}]\n", f"RewriteEngine On\nRewriteRule ^/a /b [R={code}]\n"):
            r = api.put("/_snapshotd/api/v1/sites/t", json={
                "origin": "http://127.0.0.1:9", "rules_text": rules,
            })
            assert r.status_code == 400, (rules, r.text)
            assert r.json()["field"] == "rules_text"
    assert no_tracebacks(caplog) == []


@pytest.mark.parametrize("flag", ["N", "S"])
def test_an_apache_rules_count_of_thousands_of_digits_is_read_as_atoi_would(base, flag):
    with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
        r = api.put("/_snapshotd/api/v1/sites/t", json={
            "origin": "http://127.0.0.1:9",
            "rules_text": f"RewriteEngine On\nRewriteRule ^/a$ /b [{flag}={'9' * 5000}]\n",
        })
        assert r.status_code in (200, 201), r.text


def test_a_rule_comparing_numbers_reads_a_requests_digits_as_httpd_does(tmp_path, caplog):
    rules = (
        "RewriteEngine On\n"
        "RewriteCond %{HTTP_REFERER} -gt5\n"
        "RewriteRule ^/n$ - [G]\n"
    )
    with snapshotd(tmp_path, rules_text=rules) as (url, _paths):
        with httpx.Client(base_url=url, trust_env=False, headers={"User-Agent": BOT}) as bot:
            # Header bytes are read as latin-1: UTF-8 '٩٩' is no digit; '\xa0' is no C space.
            for referer, gone in (
                ("9" * 5000, True), ("-" + "9" * 5000, False), ("+12", True),
                ("٩٩".encode().decode("latin-1"), False), ("\xa07", False), ("²", False),
            ):
                r = bot.get("/n", headers={"Referer": referer.encode("latin-1")})
                assert (r.status_code == 410) is gone, (referer[:8], r.status_code)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []


CRAWL_NUMBERS = (
    "maxHops", "maxToCrawl", "maxToProcess", "crawlDelay", "repeat", "seedRecrawlFrequency",
    "maxRounds", "maxToCrawlPerSubdomain", "maxToProcessPerSubdomain",
)


@pytest.mark.parametrize("number", ["1e309", "-1e309", "NaN", "Infinity", "1" + "0" * 400])
def test_a_crawl_jobs_numbers_in_json_past_any_range_are_read_or_refused(base, caplog, number):
    # Crawlbot reads a negative number of days as none and a per-subdomain limit as a
    # bound on the job's own; any other number past its range is a 400.
    with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
        for arg in CRAWL_NUMBERS:
            body = f'{{"name": "j", "seeds": "http://127.0.0.1:9/", "{arg}": {number}}}'
            r = api.post("/_snapshotd/v3/crawl", content=body,
                         headers={"Content-Type": "application/json"})
            if number in ("NaN", "Infinity", "1e309"):
                assert r.status_code == 400, (arg, r.text)
            assert r.status_code in (200, 400), (arg, r.text)
            if r.status_code == 400:
                assert r.json()["field"] == arg, r.text
    assert no_tracebacks(caplog) == []


def test_a_crawl_jobs_json_nested_too_deeply_is_a_400(base, caplog):
    deep = "[" * 100_000 + "]" * 100_000
    with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
        r = api.post("/_snapshotd/v3/crawl", content=f'{{"name": "j", "customHeaders": {deep}}}',
                     headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "body", r.text
    assert no_tracebacks(caplog) == []


@pytest.mark.parametrize("escaped", ["%2e", "%2e%2e", "%2E%2E"])
def test_a_site_named_by_a_dot_segment_is_refused(base, escaped):
    # A client normalises /sites/.. away: such a site could never be read or deleted.
    with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
        r = api.put(f"/_snapshotd/api/v1/sites/{escaped}", json={"origin": "http://127.0.0.1:9"})
        assert r.status_code == 400 and r.json()["field"] == "site", r.text
        assert api.put("/_snapshotd/api/v1/sites/a..b", json={
            "origin": "http://127.0.0.1:9",
        }).status_code in (200, 201)


@pytest.mark.parametrize("digits", UNICODE_DIGITS)
def test_a_crawl_jobs_numbers_of_other_digits_are_a_400(base, digits):
    # int() reads '١٢' and '１２' as 12: no Crawlbot client means them.
    with httpx.Client(base_url=base, trust_env=False, headers=AUTH) as api:
        for arg in (*CRAWL_NUMBERS, "obeyRobots"):
            r = api.post("/_snapshotd/v3/crawl", data={
                "name": "k", "seeds": "http://127.0.0.1:9/", arg: digits,
            })
            assert r.status_code == 400 and r.json()["field"] == arg, (arg, r.text)
