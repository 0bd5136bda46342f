"""Cleaning a capture: scripts, Prerender's meta tags, empty bodies."""

from __future__ import annotations

import pytest

from snapshotd.render.cleanup import clean, is_executable_script


def page(head: str = "", body: str = "<p>Hello</p>") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"


def test_executable_scripts_go_and_data_scripts_stay() -> None:
    html = page(
        '<script src="/app.js"></script><script type="module">import "/m.js"</script>'
        '<script type="application/ld+json">{"@type": "Thing"}</script>'
        '<script type="importmap">{}</script><link rel="modulepreload" href="/m.js">'
        '<link rel="preload" as="script" href="/x.js">'
        '<link rel="preload" as="style" href="/s.css">',
        '<p>Hi</p><script>var a = 1 < 2;</script><script type="text/template"><b>t</b></script>',
    )
    out = clean(html).html
    assert "app.js" not in out and "module" not in out and "importmap" not in out
    assert "var a" not in out and "/x.js" not in out
    assert '<script type="application/ld+json">{"@type": "Thing"}</script>' in out
    assert '<script type="text/template">' in out
    assert "/s.css" in out
    assert out.startswith("<!DOCTYPE html>")


def test_scripts_stay_without_strip_scripts() -> None:
    html = page(body="<p>Hi</p><script>go()</script>")
    assert clean(html, strip_scripts=False).html == html


@pytest.mark.parametrize(
    ("attrs", "executable"),
    [
        ({}, True),
        ({"type": ""}, True),
        ({"type": "text/javascript"}, True),
        ({"type": " Text/JavaScript; charset=utf-8"}, True),
        ({"type": "module"}, True),
        ({"type": "application/ld+json"}, False),
        ({"type": "application/json"}, False),
        ({"type": "text/x-template"}, False),
        ({"type": "", "language": "javascript"}, True),
        ({"type": "", "language": "vbscript"}, False),
    ],
)
def test_script_types(attrs: dict[str, str], executable: bool) -> None:
    assert is_executable_script(attrs) is executable


def test_status_and_honoured_headers_are_read_and_removed() -> None:
    html = page(
        '<meta name="prerender-status-code" content="301">'
        '<meta name="prerender-status-code" content="404">'
        '<meta name="prerender-header" content="Location: https://example.com/new">'
        '<meta name="prerender-header" content="link: </a>; rel=preload">'
        '<meta name="prerender-header" content="Link: </b>; rel=preload">'
        '<meta name="prerender-header" content="X-Robots-Tag: noindex">'
        '<meta name="prerender-header" content="Content-Language: fr">'
        '<meta name="prerender-header" content="Set-Cookie: a=b">'
        '<meta name="description" content="kept">'
    )
    out = clean(html)
    assert out.status == 301
    assert out.headers == {
        "Location": "https://example.com/new",
        "Link": "</a>; rel=preload, </b>; rel=preload",
        "X-Robots-Tag": "noindex",
        "Content-Language": "fr",
    }
    assert "prerender" not in out.html
    assert '<meta name="description" content="kept">' in out.html


@pytest.mark.parametrize("content", ["abc", "99", "600", ""])
def test_invalid_status_tags_are_ignored_and_removed(content: str) -> None:
    out = clean(page(f'<meta name="prerender-status-code" content="{content}">'))
    assert out.status is None and "prerender" not in out.html


@pytest.mark.parametrize(
    ("body", "empty"),
    [
        ("", True),
        ("   \n ", True),
        ('<div id="app"></div>', True),
        ('<div id="app"><!-- x --></div><script>render()</script><style>p{}</style>', True),
        ("<noscript>Enable JavaScript</noscript><template><p>t</p></template>", True),
        ("<p>x</p>", False),
        ('<div><img src="/a.png"></div>', False),
        ("<svg></svg>", False),
    ],
)
def test_empty_body(body: str, empty: bool) -> None:
    assert clean(page(body=body)).empty is empty


def test_no_body_at_all_is_empty() -> None:
    assert clean("").empty


def test_untouched_html_is_returned_as_is() -> None:
    html = "<!doctype html>\n<html><head></head><body><p>Same</p></body></html>\n"
    assert clean(html).html == html
