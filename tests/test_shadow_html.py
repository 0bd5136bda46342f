"""Declarative shadow roots in captured HTML, as snapshotd's own readers see them: the flat
tree a renderer shows (slots filled or showing their fallback, nested roots, what no slot
takes left out), scripts stripped inside templates, links, the main-text fingerprint and the
empty-body check reading shadow content."""

from __future__ import annotations

from snapshotd.pages.fingerprints import fingerprint, main_text, same_page
from snapshotd.pages.flat_tree import MAX_DEPTH, composed
from snapshotd.pages.links import extract_links
from snapshotd.render.cleanup import clean

HOST = (
    "<html><body><x-card><template shadowrootmode=open><h1>Title</h1>"
    "<slot name=title><i>Untitled</i></slot><slot><b>Nothing said</b></slot>"
    "<x-inner><template shadowrootmode=closed><p>deep <a href=/deep>down</a></p>"
    "<slot>inner fallback</slot></template></x-inner></template>"
    "<span slot=title>Light title</span> loose text <em slot=nowhere>unslotted</em>"
    "</x-card></body></html>"
)


def test_the_flat_tree_fills_slots_shows_fallback_and_leaves_out_what_no_slot_takes() -> None:
    text = " ".join(composed(HOST).body.text(separator=" ").split())
    assert text == "Title Light title loose text deep down inner fallback"


def test_a_page_without_shadow_roots_is_parsed_as_it_is() -> None:
    html = "<p>plain <template><b>inert</b></template></p>"
    assert composed(html).html == "<html><head></head><body>" + html + "</body></html>"


def test_scripts_are_stripped_inside_shadow_roots_at_any_depth() -> None:
    html = HOST.replace("<h1>", "<script>alert(1)</script><h1>").replace(
        "<p>deep", '<script type="module">x()</script><script type="application/ld+json">{}'
        "</script><p>deep"
    )
    cleaned = clean(html).html
    assert "alert(1)" not in cleaned and "x()" not in cleaned
    assert "application/ld+json" in cleaned and "shadowrootmode" in cleaned


def test_a_body_drawn_only_in_shadow_roots_is_not_empty() -> None:
    html = "<body><x-app><template shadowrootmode=open><p>All of it</p></template></x-app>"
    assert not clean(html).empty
    assert clean("<body><x-app><template shadowrootmode=open> </template></x-app>").empty


def test_links_and_canonical_inside_shadow_roots_are_read() -> None:
    page = extract_links(HOST.replace("<h1>", '<link rel=next href="/p2"><h1>'), "http://a.test/")
    assert page.links == ("http://a.test/p2", "http://a.test/deep")


def test_the_fingerprint_reads_shadow_content() -> None:
    words = " ".join(f"word{i}" for i in range(60))
    def page(text: str) -> str:
        return f"<body><x-app><template shadowrootmode=open><main><p>{text}</p></main>" \
               "</template></x-app></body>"
    a, b = fingerprint(page(words)), fingerprint(page(words.replace("word1 ", "other ")))
    assert "word59" in main_text(page(words)) and a.words == 60
    assert a.text_hash != b.text_hash
    assert not same_page(fingerprint(page("alpha " * 60)), fingerprint(page("beta " * 60)))


def test_with_scripts_stripped_style_sheets_take_custom_elements_as_defined() -> None:
    html = (
        "<style>sl-tab:not(:defined) { visibility: hidden } x-a:defined > b { color: red }"
        "</style><x-a><template shadowrootmode=open><style>:host(:not( :defined )) { opacity: 0 }"
        "</style></template></x-a>"
    )
    cleaned = clean(html).html
    assert ":defined" not in cleaned
    assert "sl-tab:not(*) {" in cleaned and "x-a:is(*) > b" in cleaned
    assert ":host(:not(*)) {" in cleaned
    assert clean(html, strip_scripts=False).html == html  # the scripts will define them


def test_roots_nested_past_the_bound_stay_templates_no_reader_reads() -> None:
    def nest(depth: int) -> str:
        return ("<x-r><template shadowrootmode=open><p>level <slot></slot></p>" * depth
                + "core" + "</template></x-r>" * depth)
    assert composed(nest(MAX_DEPTH)).body.text().count("level") == MAX_DEPTH
    assert "core" in composed(nest(MAX_DEPTH)).body.text()
    deep = composed(nest(MAX_DEPTH * 50))
    assert deep.body.text().count("level") == MAX_DEPTH
    assert len(deep.css("template")) == 1
