"""service.worker.html: the text of an HTML fragment to translate, and the fragment again with the translations in
place."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from html import escape
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.worker.errors import InvalidRequest, TooLarge
from service.worker.html import MAX_NODES, HtmlText
from service.worker.html5 import UnsafeMarkup, active_content
from service.worker.html_units import MAX_DEPTH

UNTRANSLATED = (
    "<script>if (a < b) { say('Hello'); }</script><style>p::after { content: 'Hello'; }</style>"
    "<code>print('Hello')</code><pre>Hello\n  world</pre><textarea>Hello</textarea>"
    '<span translate="no">Hello</span><div class="box notranslate"><p title="Hello">Hello</p></div><!-- Hello -->'
)


def upper(markup: str) -> str:
    """The fragment "translated" by upper-casing its texts."""
    html = HtmlText(markup)
    return html.render([text.upper() for text in html.texts])


@pytest.mark.parametrize(
    "markup",
    [
        "Just text.",
        "<p>Hello <b>big <i>wide</i></b> world.</p>",
        '<p title="Greeting" class="intro  lead" id="p1">Hi <a href="/docs?a=1&amp;b=2">there</a>!</p>',
        '<img src="cat.png" alt="A cat"><br><input type="text" placeholder="Your name" disabled="">',
        "<ul>\n<li>One</li>\n<li>Two</li>\n</ul>",
        "<p>Fish &amp; chips &lt;3 &gt; peas</p>",
        '<!-- a comment --><p lang="en">Text</p>',
        UNTRANSLATED,
    ],
)
def test_identity_translations_give_the_markup_back(markup: str):
    html = HtmlText(markup)
    assert html.render(html.texts) == markup


@pytest.mark.parametrize(
    "markup,equivalent",
    [
        ("<P CLASS=x>a<br/>b</P>", '<p class="x">a<br>b</p>'),  # names lower-cased, quotes added, void tags as <br>
        ("<input disabled>", '<input disabled="">'),
        ("<!DOCTYPE html><p>Text</p>", "<p>Text</p>"),  # a fragment has no doctype: browsers ignore it
        ("<p>&nbsp;x&#33; &copy;</p>", "<p>\xa0x! ©</p>"),  # entities other than & < > written as characters
        ("<div><p>Crossed</div></p>", "<div><p>Crossed</p></div><p></p>"),  # repaired as browsers repair it
        ("<p>A long\n   sentence.</p>", "<p>A long sentence.</p>"),  # whitespace within a text: one space
    ],
)
def test_identity_translations_give_equivalent_markup(markup: str, equivalent: str):
    html = HtmlText(markup)
    assert html.render(html.texts) == equivalent


def words(text: str) -> str:
    """A unit's text without its placeholders (four-digit numbers, service.worker.markup)."""
    return " ".join(re.sub(r"\s*\b7\d{3}\b", "", text).split())  # from 7301 on; no other text here has a 7


def test_texts_are_the_translatable_ones_in_document_order():
    """A block's text is one unit, its inline elements placeholders inside it; attributes are units of their own."""
    markup = '<div title="Tip"><p>Hello <b>big <i>wide</i></b> world.</p><img alt="A cat" src="cat.png"></div>'
    texts = HtmlText(markup).texts
    assert [words(text) for text in texts] == ["Tip", "Hello big wide world.", "A cat"]
    assert len(set(texts[1].split()) - set("Hello big wide world.".split())) == 3  # <b>, <i>, </i></b>


def test_a_translation_changes_only_text():
    markup = (
        '<p class="intro" id="main" title="Greeting">Hello, <a href="/go" data-x="keep me">dear <b>friend</b></a>!'
        '\n<img src="smile.png" alt="A smile" width="10"> <input placeholder="Your name" aria-label="Name"></p>'
    )
    assert upper(markup) == (
        '<p class="intro" id="main" title="GREETING">HELLO, <a href="/go" data-x="keep me">DEAR <b>FRIEND</b></a>!'
        ' <img src="smile.png" alt="A SMILE" width="10"> <input placeholder="YOUR NAME" aria-label="NAME"></p>'
    )  # whitespace inside a block is one space, as HTML shows it


def test_whitespace_at_the_edges_of_a_block_is_kept():
    """Inside a block, runs of whitespace are one space as HTML shows them (an element's edge spaces go outside it)."""
    assert upper("<p>  Hello <b> big </b>\n world \xa0</p>") == "<p>  HELLO  <b>BIG</b>  WORLD \xa0</p>"


def test_code_and_elements_marked_not_to_translate_are_untouched():
    html = HtmlText(f"<p>Translate me.</p>{UNTRANSLATED}")
    assert html.texts == ["Translate me."]
    assert html.render(["ÜBERSETZT."]) == f"<p>ÜBERSETZT.</p>{UNTRANSLATED}"


def test_the_nearest_translate_attribute_decides():
    markup = '<div translate="no">Brand <span translate="yes">slogan</span></div><p translate="No">Name</p>'
    assert HtmlText(markup).texts == ["slogan"]


def test_entities_are_decoded_for_the_translator_and_escaped_again():
    html = HtmlText('<p title="&quot;Q&quot; &amp; A">Fish &amp; chips &lt;3</p>')
    assert html.texts == ['"Q" & A', "Fish & chips <3"]
    rendered = html.render(['"F" & it\'s <b>', "Fisch & Pommes <3"])
    assert rendered == '<p title="&quot;F&quot; &amp; it\'s &lt;b&gt;">Fisch &amp; Pommes &lt;3</p>'
    assert HtmlText(rendered).texts == ['"F" & it\'s <b>', "Fisch & Pommes <3"]


@pytest.mark.parametrize(
    "markup",
    [
        "<p>Unclosed <b>bold",
        "</div>Stray end tags</p> here",
        "<div><p>Crossed</div></p>",
        "<<>> a < b > c",
        "<p a=>Empty attribute",
        "<a href='x>Unterminated quote</a>'>after",
        "&bogus; &#xZZ; & text",
    ],
)
def test_a_malformed_fragment_does_not_raise(markup: str):
    html = HtmlText(markup)
    assert html.texts
    again = HtmlText(html.render(html.texts))  # what comes back parses, and has the same text
    assert " ".join(again.texts) == " ".join(html.texts)


@pytest.mark.parametrize(
    "markup", ["", "   ", "<br>", '<img src="x.png" alt="">', "<p> \n </p>", "<!-- a comment -->", "<code>x</code>",
               "<!-- unterminated comment"]
)
def test_a_fragment_without_text(markup: str):
    html = HtmlText(markup)
    assert html.texts == []
    assert HtmlText(html.render([])).texts == []


def test_render_needs_one_translation_per_text():
    with pytest.raises(ValueError):
        HtmlText("<p>One</p><p>Two</p>").render(["Eins"])


# Translations as a translator may write them: words with markup characters and quotes, single spaces.
WORD = st.text(alphabet=st.sampled_from(list("aZ9ü&<>\"';=/!#")), min_size=1)
TRANSLATION = st.lists(WORD, min_size=1).map(" ".join)


@settings(deadline=None, database=None)
@given(st.lists(TRANSLATION, min_size=3, max_size=3))
def test_any_translations_come_back_as_the_texts_of_the_rendered_markup(translations: list[str]):
    html = HtmlText('<p title="One">Two <a href="/x">three</a></p>')
    title, body, _ = translations
    again = HtmlText(html.render([title, body])).texts
    assert again[0] == title
    assert "".join(words(again[-1]).split()) == "".join(body.split())  # every character, in order (tags put back by
    # place where the translation dropped their placeholders may stand between two of them, with a space)


def test_each_rendering_stands_alone():
    """The fragment is parsed once and written out for each alternative: nothing of one stays in the next."""
    html = HtmlText('<p title="One">Two <a href="/x">three</a></p>')
    title, body = html.texts
    opening, closing = [word for word in body.split() if word.isdigit()]
    german = f"Zwei {opening} drei {closing}"
    assert html.render(["Eins", german]) == '<p title="Eins">Zwei <a href="/x">drei</a></p>'
    assert html.render(["Un", f"Deux {opening} trois {closing}"]) == '<p title="Un">Deux <a href="/x">trois</a></p>'
    assert html.texts == ["One", body]


# --- bounds: the parse runs on the event loop ------------------------------------------------------------------


def test_markup_as_deep_as_the_bound_is_read_and_deeper_is_refused():
    assert HtmlText("<b>" * MAX_DEPTH + "deep").texts == ["deep"]
    with pytest.raises(InvalidRequest, match=f"deeper than {MAX_DEPTH}"):
        HtmlText("<b>" * (MAX_DEPTH + 1) + "deeper")


def test_markup_of_more_nodes_than_the_bound_is_refused():
    """Tags are counted before the parse, elements, texts and comments as the tree is copied."""
    assert len(HtmlText("<p>x</p>" * (MAX_NODES // 2)).texts) == MAX_NODES // 2
    with pytest.raises(TooLarge, match=f"more than {MAX_NODES}"):
        HtmlText("<i>x</i>" * (MAX_NODES // 2) + "<br>")
    with pytest.raises(TooLarge, match=f"tags: more than {MAX_NODES}"):
        HtmlText("<br>" * (2 * MAX_NODES + 1))
    with pytest.raises(TooLarge, match=f"more than {MAX_NODES}"):
        HtmlText("<!-- c -->x" * (MAX_NODES // 2 + 1))


def test_unfinished_tags_are_text_as_browsers_read_them():
    """lexbor reads in linear time: an unfinished tag costs no second reading of the rest."""
    assert HtmlText("a &lt;b " * 500).texts == [("a <b " * 500).strip()]
    assert HtmlText("<script><x</script><p>Text</p>" * 20).texts == ["Text"] * 20


# --- markup as browsers read it, and no script out of inert text ------------------------------------------------


def test_the_script_that_html_parser_ended_too_early_stays_one_script():
    """The issue's payload: Python's html.parser ended the script at its first </script> inside a comment, and
    dropped the stray end tag, so that the text after it became a script a browser runs. Parsed as a browser parses
    it, it comes back with the same scripts, no more."""
    markup = ("<p>Hello world.</p><script><!--<script></script>x</script><pre>\ndocument.title=1//</pre><!---->"
              "<script></script>")
    html = HtmlText(markup)
    assert html.texts == ["Hello world."]
    rendered = html.render(["Hallo Welt."])
    assert rendered.startswith("<p>Hallo Welt.</p><script><!--<script></script>x</script>")
    assert active_content(rendered, True) == active_content(markup, True)


@pytest.mark.parametrize("markup", [
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>"></noscript>',  # scripting on, as in browsers
    "<svg><style>&lt;/style&gt;&lt;img src=x onerror=alert(1)&gt;</style></svg>",  # text of a foreign style
    '<math><mtext><table><mglyph><style><img src=x onerror=alert(1)></style></mglyph></table></mtext></math>',
    "<svg></p><style><a id=\"</style><img src=1 onerror=alert(1)>\">",
    '<form><math><mtext></form><form><mglyph><style></math><img src onerror=alert(1)>',
])
def test_mutation_xss_payloads_come_back_with_no_new_script(markup: str):
    """Each comes back with no script its source did not hold, or is refused (a tree the serialization cannot give
    back, such as a form inside a form)."""
    html = HtmlText(markup)
    try:
        rendered = html.render(html.texts)
    except UnsafeMarkup:
        return
    assert not active_content(rendered, True) - active_content(markup, True)


def test_a_rendering_with_new_script_is_refused():
    """Whatever the way (here a translation that writes an event handler into an attribute it fills), a rendering
    that would run script its source did not is refused."""
    html = HtmlText('<p title="One">Two</p>')
    assert html.render(["Eins", "Zwei"]) == '<p title="Eins">Zwei</p>'
    with pytest.raises(UnsafeMarkup):
        HtmlText('<a href="https://example.org" title="x">y</a>').render(["javascript:alert(1)", "y"])
    assert active_content('<a href=" JaVa\tscript:alert(1)">x</a><meta http-equiv=refresh content="0;url=javascript:x">'
                          '<iframe srcdoc="<script>x</script>"></iframe><b onclick=x>y</b>', True) == {
        ("a href", " JaVa\tscript:alert(1)"): 1, ("meta content", "0;url=javascript:x"): 1,
        ("iframe srcdoc", "<script>x</script>"): 1, ("b onclick", "x"): 1}


# --- a published mutation-XSS corpus, run in a real browser ----------------------------------------------------

CORPUS = json.loads((Path(__file__).parent / "data" / "mxss_dompurify.json").read_text())["payloads"]
SANDBOX = "allow-scripts allow-same-origin"  # no modal dialogs: a data: document's own alert() cannot block
# Each page is a srcdoc iframe: this script first, which reports every alert(), confirm(), prompt() and print() call
HOOK = ("<script>for (const name of ['alert', 'confirm', 'prompt', 'print']) window[name] = () => "
        "parent.postMessage(frameElement.id, '*');</script>")


def runs_in_chromium(pages: list[str]) -> Counter[int]:
    """How many times each page called alert() and its kind in headless Chromium: one page of iframes, one for each."""
    frames = "".join(f'<iframe id="{i}" sandbox="{SANDBOX}" srcdoc="{escape(HOOK + page, quote=True)}"></iframe>'
                     for i, page in enumerate(pages))
    harness = ("<!DOCTYPE html><pre id=calls></pre><script>addEventListener('message', (e) => { "
               "document.getElementById('calls').textContent += e.data + ' '; });</script>" + frames)
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "harness.html"
        page.write_text(harness)
        dumped = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={folder}/profile",
             "--virtual-time-budget=30000", "--timeout=90000", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=180, check=True,
        ).stdout
    calls = re.search(r'<pre id="calls">([^<]*)</pre>', dumped)
    assert calls is not None, dumped[:500]
    return Counter(int(i) for i in calls[1].split())


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium (make system-deps)")
def test_no_mutation_xss_payload_runs_more_script_once_translated():
    """DOMPurify's payloads, each through format=html with its texts given back as they are, then the source and what
    comes back in Chromium: what comes back calls alert() (and the like) no more often than its source, or it is
    refused. The harness itself is checked: a plain alert() is seen."""
    assert len(CORPUS) >= 100
    sources, rendered = [], []
    for case in CORPUS:
        html = HtmlText(case["payload"])
        try:
            rendered.append(html.render(html.texts))
        except UnsafeMarkup:
            continue
        sources.append(case["payload"])
    calls = runs_in_chromium([*sources, *rendered, "<img src=x onerror=alert(1)>"])
    assert calls[2 * len(sources)] == 1, "the harness sees no alert()"
    newly = [(sources[i], rendered[i]) for i in range(len(sources)) if calls[len(sources) + i] > calls[i]]
    assert newly == []
    assert len(sources) >= 100
