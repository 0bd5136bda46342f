"""The not-found view as data (snapshotd.pages.not_found_view): learned from two renders of
paths that cannot exist, told from the layout every page draws, and a capture judged against it, the
parts that name its own path tolerated. Pages of a shop drawn as plain HTML, in several
layouts and languages: nothing here depends on the words an app chooses."""

from __future__ import annotations

import pytest

from snapshotd.pages.not_found_view import MIN_VIEW_WORDS, Render, View, app_shell, learn, shows


def shop(content: str, *, side: bool = True, main: bool = False) -> str:
    """A page of a shop: a top bar, on inner pages a side bar of links, the content."""
    bar = ("<div class=side>" + "".join(f"<a href=/c/{i}>Category number {i}</a>"
                                        for i in range(12)) + "</div>") if side else ""
    body = f"<main>{content}</main>" if main else f"<div class=content>{content}</div>"
    return f"<html><body><div class=top>Shop</div>{bar}{body}<div>Made here</div></body></html>"


def missing(path: str, words: str = "Page not found") -> str:
    return shop(f"<h1>{words}</h1><p>Nothing lives at <code>{path}</code>.</p><a href=/>Home</a>")


REAL = {
    "/": shop("<h1>Welcome</h1><p>Kettles and pots, chosen one by one.</p>", side=False),
    "/c/1": shop("<h1>Tea</h1><ul><li>Kettle</li><li>Teapot</li></ul>"),
    "/c/2": shop("<h1>Coffee</h1><ul><li>Grinder</li><li>Mug</li></ul>"),
    "/about": shop("<p>We sell tea things.</p>"),
}
THIN = {
    "/search?q=zzz": shop("<h1>Search</h1><p>No results for “zzz”.</p>"),
    "/c/empty": shop("<h1>Gift cards</h1><p>Nothing in this category yet.</p>"),
    "/contact": shop("<p>Write to us.</p>"),
    "/c/not-found-errors": shop("<h1>Not found</h1><p>The page about not found errors.</p>"),
}


def learned(words: str = "Page not found", real: dict[str, str] = REAL) -> View:
    probes = (Render("/a1b2c3d4", missing("/a1b2c3d4", words)),
              Render("/e5f6a7b8", missing("/e5f6a7b8", words)))
    view = learn(probes, [Render(p, html) for p, html in real.items()])
    assert isinstance(view, View), view
    return view


@pytest.mark.parametrize("words", ["Page not found", "Oups, cette page n'existe pas",
                                   "ページが見つかりません", "Lost?"])
def test_the_view_is_found_however_the_app_words_it_and_whatever_path_it_names(words):
    view = learned(words)
    for path in ("/no-such-page", "/products/999", "/old/blog/a-post", "/search/x?y=1"):
        assert shows(view, missing(path, words), path) is not None, path
    for path, html in {**REAL, **THIN}.items():
        assert shows(view, html, path) is None, path


def test_the_layout_every_page_draws_is_no_part_of_the_view():
    view = learned()
    # The side bar is shown on the probes and on most real pages: it is chrome, so a thin
    # page with it holds none of the view's own words.
    assert not [w for w in view.words if "category" in w]
    assert shows(view, shop("<p>Write to us.</p>"), "/contact") is None


def test_from_too_few_real_pages_nothing_is_learned():
    # With the seed alone, a side bar it lacks would be taken for part of the view, and a
    # thin page under that side bar would nearly show it.
    probes = (Render("/a1b2c3d4", missing("/a1b2c3d4")), Render("/e5f6a7b8", missing("/e5f6a7b8")))
    assert "too few" in learn(probes, [Render("/", REAL["/"])])


def test_a_page_that_quotes_the_view_among_more_is_not_it():
    page = shop("<h1>Page not found</h1><p>Nothing lives at <code>/x</code>.</p><a>Home</a>"
                + "<p>" + " ".join(["Our guide to broken links explains why."] * 5) + "</p>")
    assert shows(learned(), page, "/guide") is None


def test_the_same_words_drawn_elsewhere_are_other_words():
    page = shop("<p>Page not found</p><p>Nothing lives at <code>/x</code>.</p><a>Home</a>")
    assert shows(learned(), page, "/x") is None


def test_what_varies_from_one_render_to_the_next_is_tolerated():
    def varying(path: str, tip: str) -> str:
        return missing(path).replace("<a href=/>", f"<p>Tip: {tip}</p><a href=/>")
    probes = (Render("/a1b2c3d4", varying("/a1b2c3d4", "try the search box")),
              Render("/e5f6a7b8", varying("/e5f6a7b8", "call us any day")))
    view = learn(probes, [Render(p, h) for p, h in REAL.items()])
    assert isinstance(view, View) and view.slack > 0
    assert shows(view, varying("/nope", "look at our tea"), "/nope") is not None


def test_nothing_is_learned_when_the_view_cannot_be_told_from_a_real_page():
    # An app that draws its first page for any path it does not know.
    home = REAL["/"]
    assert "the real page / looks like" in learn((Render("/a", home), Render("/b", home)),
                                                 [Render(p, h) for p, h in REAL.items()])
    # Two unknown paths drawn as different pages (a search, a profile): nothing to learn.
    one = shop("<h1>Search results for a</h1><p>Three kettles and a pot found today.</p>")
    two = shop("<h1>Profile of b</h1><p>Joined in spring, writes about coffee grinders.</p>")
    assert "different pages" in learn((Render("/a", one), Render("/b", two)),
                                      [Render(p, h) for p, h in REAL.items()])
    # A view of fewer words than MIN_VIEW_WORDS says too little.
    tiny = (Render("/a", shop("<h1>404</h1>")), Render("/b", shop("<h1>404</h1>")))
    assert MIN_VIEW_WORDS > 1
    assert "shows nothing" in learn(tiny, [Render(p, h) for p, h in REAL.items()])


def test_an_app_that_draws_its_first_page_for_any_path_crawled_from_a_deep_seed():
    # AngularJS's `otherwise("/")` (a router's catch-all drawing the home page), the crawl
    # started at a product: the home page is one of the pages the seed links to, so its
    # lines are no chrome; were they the view, the home page would be answered 404.
    home = REAL["/"]
    references = [Render("/c/1", REAL["/c/1"]), Render("/", home), Render("/c/2", REAL["/c/2"]),
                  Render("/about", REAL["/about"])]
    learned = learn((Render("/a1b2c3d4", home), Render("/e5f6a7b8", home)), references)
    assert learned == "the real page / looks like the page drawn for a path that cannot exist"


def test_a_seed_that_shows_the_view_stops_the_learning():
    seed = Render("/", missing("/").replace("</h1>", "</h1><p>Welcome back</p>"))
    probes = (Render("/a1b2c3d4", missing("/a1b2c3d4")), Render("/e5f6a7b8", missing("/e5f6a7b8")))
    others = [Render(p, h) for p, h in REAL.items() if p != "/"]
    assert "the real page / looks like" in learn(probes, [seed, *others])


def test_a_view_survives_its_json():
    view = learned()
    assert View.from_json(view.to_json()) == view


def test_the_app_shell_names_the_build_its_document_loads():
    v1 = '<script src="/assets/app.1.js"></script><link rel="stylesheet" href="/s.css">'
    assert app_shell(v1) == app_shell(v1.replace("<link", "<p>x</p><link"))
    assert app_shell(v1) != app_shell(v1.replace("app.1", "app.2"))
    assert app_shell("<p>no scripts</p><script>inline()</script>") == ""
