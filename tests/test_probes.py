"""Issue 25's held-out probes (tests/data/probes/, see tests/data/README.md) through the real service: `python -m
service` with its default settings serving the shipped models (models/en-de, models/de-en), over HTTP.

Each probe is its own test. The models will be replaced, so the checks are about behaviour, never a model's
wording: protected spans come back exactly as written, exactly once; inline markup comes back whole, in the same
nesting, around translated words; text with nothing to translate comes back as it is; each document format comes
back whole, in its format, with its structure, styles and spans, every text in it translated.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import docx
import httpx
import odfdo
import pptx
import pytest
import regex
import srt
from bs4 import BeautifulSoup, Tag
from client import TIMEOUT, assert_error
from ebooklib import epub
from pptx.util import Inches
from test_documents import epub_book, saved

from service.launch import running_service
from service.worker import html5

PROBES = Path(__file__).parent / "data" / "probes"
MODELS = Path(__file__).resolve().parents[1] / "models"
OTHER = {"en": "de", "de": "en"}


def load(name: str) -> Any:
    return json.loads((PROBES / name).read_text(encoding="utf-8"))


SPANS, MARKUP, NOTHING, DOCUMENT = (load(f"{kind}.json") for kind in ("spans", "markup", "nothing", "documents"))


def ids(probes: list[dict]) -> list[str]:
    return [probe["id"] for probe in probes]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The shipped models served with the default settings (running_service sets no TRANSLATOR_* variable but the
    model folder, the loopback address and a free port)."""
    with running_service(MODELS, tmp_path_factory.mktemp("probes") / "service.log") as service:
        yield service.url


def post_translate(url: str, q: str | list[str], source: str, target: str, **fields: str) -> httpx.Response:
    return httpx.post(url + "/translate", json={"q": q, "source": source, "target": target, **fields},
                      timeout=TIMEOUT)


def translate(url: str, q: str | list[str], source: str, target: str, **fields: str) -> dict[str, Any]:
    response = post_translate(url, q, source, target, **fields)
    assert response.status_code == 200, response.text
    return response.json()


def has_letter(text: str) -> bool:
    return regex.search(r"\p{L}", text) is not None


# --- protected spans ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("probe", SPANS, ids=ids(SPANS))
def test_spans_come_back_exactly_as_written_once(url: str, probe: dict):
    text, spans = probe["text"], probe["spans"]
    assert all(text.count(span) == 1 for span in spans), "a probe names spans its text holds once"
    out = translate(url, text, probe["source"], OTHER[probe["source"]])["translatedText"]
    assert {span: out.count(span) for span in spans} == dict.fromkeys(spans, 1), out
    rest = out
    for span in spans:
        rest = rest.replace(span, "")
    assert has_letter(rest) and out != text, out


# --- inline markup ------------------------------------------------------------------------------------------------

VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})
TRANSLATED_ATTRIBUTES = frozenset({"title", "alt", "placeholder", "aria-label"})  # translated by design (README)


class WellFormed(HTMLParser):
    """Every element closed in order, and no bare "<" or "&" in text (outside script and style)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.open: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open.pop() != tag:
            self.problems.append(f"</{tag}> closes nothing open")

    def handle_data(self, data: str) -> None:
        if self.open[-1:] not in (["script"], ["style"]) and ("<" in data or "&" in data):
            self.problems.append(f"bare markup characters in {data!r}")


def problems(markup: str) -> list[str]:
    parser = WellFormed()
    parser.feed(markup)
    parser.close()
    return parser.problems + [f"<{tag}> never closed" for tag in parser.open]


def soup(markup: str, fragment: bool = True) -> BeautifulSoup:
    """The tree a browser builds of the markup (the service answers the browser's tree of its source: a table gets
    its tbody)."""
    return html5.parse(markup, fragment, max_nodes=1_000_000)


def path(element: Tag) -> tuple:
    """The element and its ancestors, outermost first, each as its name and attributes in order (a translated
    attribute by its name alone)."""
    chain = [element, *(parent for parent in element.parents if parent.name != "[document]")]
    return tuple((e.name, tuple((k, None if k in TRANSLATED_ATTRIBUTES else v) for k, v in e.attrs.items()))
                 for e in reversed(chain))


# inline markup with a word character on both sides: two words glued together, unless the source has it there too
GLUED = regex.compile(r"(?<=\w)(?:</?(?:a|abbr|b|code|em|i|span|strong|sub|sup)\b[^>]*>)+(?=\w)")


def elements(tree: BeautifulSoup, with_text: bool = False) -> Counter:
    return Counter(path(e) for e in tree.find_all(True) if not with_text or e.get_text().strip())


@pytest.mark.parametrize("probe", MARKUP, ids=ids(MARKUP))
def test_markup_comes_back_whole_around_translated_words(url: str, probe: dict):
    source = probe["html"]
    out = translate(url, source, probe["source"], OTHER[probe["source"]], format="html")["translatedText"]
    assert problems(source) == [], "a probe is well-formed"
    assert problems(out) == [], out
    before, after = soup(source), soup(out)
    assert elements(after) == elements(before), out  # every element, attributes unchanged, nested as it was
    assert elements(after, with_text=True) == elements(before, with_text=True), out  # each still wraps text
    assert len(GLUED.findall(out)) <= len(GLUED.findall(source)), out  # no word glued to its neighbour
    for element in after.find_all(True):
        assert all(element[name].strip() for name in TRANSLATED_ATTRIBUTES & set(element.attrs)), out
    for kept in probe.get("kept", []):
        assert out.count(kept) == source.count(kept), (kept, out)
    assert after.get_text() != before.get_text(), out
    for name, stems in probe.get("wrapped", {}).items():
        (element,) = after.find_all(name)
        words = regex.findall(r"\w+", element.get_text().lower())
        assert any(word.startswith(stem) for word in words for stem in stems), (name, stems, out)


# --- nothing to translate -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("probe", NOTHING, ids=ids(NOTHING))
def test_nothing_to_translate_is_given_back_as_it_is(url: str, probe: dict):
    q, source = probe["q"], probe["source"]
    response = post_translate(url, q, source, probe["target"], format=probe.get("format", "text"))
    if "status" in probe:  # an empty q alone is a missing one, as LibreTranslate answers
        assert "missing q" in assert_error(response, probe["status"])
        return
    assert response.status_code == 200, response.text
    answer = response.json()
    if isinstance(q, str):
        assert answer["translatedText"] == q
    else:
        sentences = set(probe["sentences"])
        out = answer["translatedText"]
        assert isinstance(out, list) and len(out) == len(q), out
        for i, (text, translation) in enumerate(zip(q, out)):
            assert (translation.strip() and translation != text) if i in sentences else translation == text, out
    if source != "auto":
        assert "detectedLanguage" not in answer
        return
    detected = answer["detectedLanguage"]
    assert isinstance(detected, dict) if isinstance(q, str) else isinstance(detected, list) and len(detected) == len(q)
    languages = {int(i): language for i, language in probe.get("detected", {}).items()}
    for i, found in enumerate([detected] if isinstance(q, str) else detected):
        assert set(found) == {"confidence", "language"} and isinstance(found["confidence"], float), found
        if i in languages:
            assert found["language"] == languages[i] and 0 < found["confidence"] <= 100, found
        else:
            assert found == {"confidence": 0.0, "language": "en"}, found


# --- documents ------------------------------------------------------------------------------------------------------

URL, EMOJI = DOCUMENT["url"], DOCUMENT["emoji"]
PARAGRAPHS = DOCUMENT["paragraphs"]  # each a list of [text, "" | "bold" | "italic"]
TABLE = DOCUMENT["table"]


@dataclass
class Read:
    """What a document holds, as these tests compare it: its structure (equal after translation), its texts in order
    (each translated), and the styles ("bold", "italic") that some text is in."""

    structure: Any
    texts: list[str]
    styled: set[str]


def plain(runs: list[list[str]]) -> str:
    return "".join(text for text, _ in runs)


def styles_of(pairs: Iterator[tuple[str, str]]) -> set[str]:
    """The styles of (style, text) pairs whose text is not blank."""
    return {style for style, text in pairs if text.strip()}


def build_txt() -> bytes:
    lines = [DOCUMENT["title"], "", *(plain(runs) for runs in PARAGRAPHS), "", DOCUMENT["second_title"],
             *(": ".join(row) for row in TABLE)]
    return "\r\n".join(lines).encode()


def read_txt(data: bytes) -> Read:
    lines = data.decode("utf-8").split("\r\n")
    return Read([line == "" for line in lines], lines, set())


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>td {{ padding: 4px; }}</style></head>
<body><h1>{title}</h1>
{paragraphs}
<h2>{second}</h2>
<table class="decisions">{rows}</table>
</body></html>"""
HTML_TAGS = {"bold": "b", "italic": "i"}


def html_paragraphs() -> str:
    def run(text: str, style: str) -> str:
        return f"<{HTML_TAGS[style]}>{text}</{HTML_TAGS[style]}>" if style else text

    return "\n".join(f"<p>{''.join(run(text, style) for text, style in runs)}</p>" for runs in PARAGRAPHS)


def html_rows() -> str:
    def row(cells: list[str], tag: str) -> str:
        return "<tr>" + "".join(f"<{tag}>{text}</{tag}>" for text in cells) + "</tr>"

    return "".join(row(cells, "th" if i == 0 else "td") for i, cells in enumerate(TABLE))


def build_html() -> bytes:
    return PAGE.format(title=DOCUMENT["title"], paragraphs=html_paragraphs(), second=DOCUMENT["second_title"],
                       rows=html_rows()).encode()


BLOCKS = ("title", "h1", "h2", "p", "th", "td")
LANGUAGE_ATTRIBUTES = {"lang", "xml:lang"}


def read_markup(tree: BeautifulSoup) -> Read:
    # the language attributes name the target once translated (tests/test_documents.py checks them)
    structure = [(e.name, {k: None if k in LANGUAGE_ATTRIBUTES else v for k, v in e.attrs.items()})
                 for e in tree.find_all(True)]
    texts = [e.get_text() for e in tree.find_all(BLOCKS)]
    styled = styles_of((style, e.get_text()) for style, name in HTML_TAGS.items() for e in tree.find_all(name))
    return Read(structure, texts, styled)


def read_html(data: bytes) -> Read:
    tree = soup(data.decode(), fragment=False)
    assert tree.style.string == "td { padding: 4px; }"
    return read_markup(tree)


def build_docx() -> bytes:
    document = docx.Document()
    document.add_heading(DOCUMENT["title"], level=1)
    for runs in PARAGRAPHS:
        paragraph = document.add_paragraph()
        for text, style in runs:
            run = paragraph.add_run(text)
            run.bold, run.italic = style == "bold" or None, style == "italic" or None
    document.add_heading(DOCUMENT["second_title"], level=2)
    table = document.add_table(rows=len(TABLE), cols=len(TABLE[0]))
    for cell, text in zip(table._cells, [text for row in TABLE for text in row]):
        cell.text = text
    return saved(document)


def read_docx(data: bytes) -> Read:
    document = docx.Document(io.BytesIO(data))
    runs = [run for paragraph in document.paragraphs for run in paragraph.runs]
    structure = ([p.style.name for p in document.paragraphs],
                 [(len(t.rows), len(t.columns)) for t in document.tables])
    texts = [p.text for p in document.paragraphs] + [cell.text for t in document.tables for cell in t._cells]
    styled = styles_of([*(("bold", r.text) for r in runs if r.bold), *(("italic", r.text) for r in runs if r.italic)])
    return Read(structure, texts, styled)


def build_pptx() -> bytes:
    presentation = pptx.Presentation()
    first = presentation.slides.add_slide(presentation.slide_layouts[1])
    first.shapes.title.text = DOCUMENT["title"]
    frame = first.placeholders[1].text_frame
    for i, runs in enumerate(PARAGRAPHS):
        paragraph = frame.paragraphs[0] if i == 0 else frame.add_paragraph()
        for text, style in runs:
            run = paragraph.add_run()
            run.text = text
            run.font.bold, run.font.italic = style == "bold" or None, style == "italic" or None
    second = presentation.slides.add_slide(presentation.slide_layouts[5])
    second.shapes.title.text = DOCUMENT["second_title"]
    shape = second.shapes.add_table(len(TABLE), len(TABLE[0]), Inches(1), Inches(2), Inches(8), Inches(3))
    for r, row in enumerate(TABLE):
        for c, text in enumerate(row):
            shape.table.cell(r, c).text = text
    return saved(presentation)


def read_pptx(data: bytes) -> Read:
    presentation = pptx.Presentation(io.BytesIO(data))
    structure, texts, runs = [], [], []
    for slide in presentation.slides:
        for shape in slide.shapes:
            if shape.has_text_frame:
                paragraphs = shape.text_frame.paragraphs
                structure.append((shape.shape_type, len(paragraphs)))
                texts += [p.text for p in paragraphs]
                runs += [run for p in paragraphs for run in p.runs]
            if shape.has_table:
                structure.append((shape.shape_type, len(shape.table.rows), len(shape.table.columns)))
                texts += [cell.text for row in shape.table.rows for cell in row.cells]
    styled = styles_of([*(("bold", r.text) for r in runs if r.font.bold),
                        *(("italic", r.text) for r in runs if r.font.italic)])
    return Read([len(presentation.slides), structure], texts, styled)


ODF_STYLES = {"bold": "Tbold", "italic": "Titalic"}


def odf_paragraph(runs: list[list[str]]) -> odfdo.Paragraph:
    paragraph = odfdo.Paragraph()
    for text, style in runs:
        paragraph.append(odfdo.Span(text, style=ODF_STYLES[style]) if style else text)
    return paragraph


def odf_document(kind: str) -> odfdo.Document:
    document = odfdo.Document(kind)
    for style, name in ODF_STYLES.items():
        document.insert_style(odfdo.Style("text", name=name, **{style: True}), automatic=True)
    return document


def build_odt() -> bytes:
    document = odf_document("text")
    document.body.append(odfdo.Header(1, DOCUMENT["title"]))
    for runs in PARAGRAPHS:
        document.body.append(odf_paragraph(runs))
    document.body.append(odfdo.Header(2, DOCUMENT["second_title"]))
    table = odfdo.Table("Decisions", width=len(TABLE[0]), height=len(TABLE))
    for r, row in enumerate(TABLE):
        for c, text in enumerate(row):
            table.set_cell((c, r), odfdo.Cell(text))
    document.body.append(table)
    return saved(document)


def read_odf(data: bytes) -> Read:
    body = odfdo.Document(io.BytesIO(data)).body
    paragraphs = body.get_elements("//text:h|//text:p")
    structure = [(p.tag, p.parent.tag, p.style) for p in paragraphs]
    texts = [str(p) for p in paragraphs]
    spans = body.get_spans()
    styled = styles_of((style, span.text or "") for style, name in ODF_STYLES.items()
                       for span in spans if span.style == name)
    return Read(structure, texts, styled)


def build_odp() -> bytes:
    document = odf_document("presentation")
    first = odfdo.DrawPage("page1", name="Notes")
    first.append(odfdo.Frame.text_frame(odfdo.Paragraph(DOCUMENT["title"]), size=("24cm", "3cm"),
                                        position=("2cm", "1cm")))
    first.append(odfdo.Frame.text_frame([odf_paragraph(runs) for runs in PARAGRAPHS], size=("24cm", "12cm"),
                                        position=("2cm", "5cm")))
    second = odfdo.DrawPage("page2", name="Decisions")
    second.append(odfdo.Frame.text_frame(odfdo.Paragraph(DOCUMENT["second_title"]), size=("24cm", "3cm"),
                                         position=("2cm", "1cm")))
    second.append(odfdo.Frame.text_frame([odfdo.Paragraph(": ".join(row)) for row in TABLE], size=("24cm", "12cm"),
                                         position=("2cm", "5cm")))
    document.body.extend([first, second])
    return saved(document)


def read_odp(data: bytes) -> Read:
    read = read_odf(data)
    pages = odfdo.Document(io.BytesIO(data)).body.get_draw_pages()
    read.structure = [[page.name for page in pages], [len(page.get_frames()) for page in pages], read.structure]
    return read


def build_srt() -> bytes:
    cues = [srt.Subtitle(i, srt.srt_timestamp_to_timedelta(start), srt.srt_timestamp_to_timedelta(end), text)
            for i, (start, end, text) in enumerate(DOCUMENT["subtitles"], 1)]
    return srt.compose(cues).encode()


SRT_TAGS = {"bold": "b", "italic": "i"}


def read_srt(data: bytes) -> Read:
    cues = list(srt.parse(data.decode("utf-8")))
    styled = styles_of((style, inner) for style, tag in SRT_TAGS.items()
                       for cue in cues for inner in regex.findall(rf"<{tag}>(.*?)</{tag}>", cue.content))
    return Read([(cue.index, cue.start, cue.end, cue.content.count("\n")) for cue in cues],
                [cue.content for cue in cues], styled)


CHAPTER = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" lang="en">
<head><title>{title}</title></head>
<body><section epub:type="chapter"><h1>{title}</h1>
{body}
</section></body></html>"""


def build_epub() -> bytes:
    bodies = [html_paragraphs(), f'<table class="decisions">{html_rows()}</table>']
    titles = (DOCUMENT["title"], DOCUMENT["second_title"])
    return epub_book(DOCUMENT["title"], [(t, CHAPTER.format(title=t, body=b)) for t, b in zip(titles, bodies)])


def read_epub(data: bytes) -> Read:
    book = epub.read_epub(io.BytesIO(data), {"ignore_ncx": True})
    names = sorted(item.file_name for item in book.get_items() if isinstance(item, epub.EpubHtml))
    assert names == ["chapter1.xhtml", "chapter2.xhtml", "nav.xhtml"]
    archive = zipfile.ZipFile(io.BytesIO(data))
    chapters = [read_markup(BeautifulSoup(archive.read(f"EPUB/chapter{n}.xhtml"), "xml")) for n in (1, 2)]
    return Read([chapter.structure for chapter in chapters], [text for c in chapters for text in c.texts],
                set().union(*(chapter.styled for chapter in chapters)))


FORMATS: dict[str, tuple[Callable[[], bytes], Callable[[bytes], Read]]] = {
    ".txt": (build_txt, read_txt),
    ".html": (build_html, read_html),
    ".docx": (build_docx, read_docx),
    ".odt": (build_odt, read_odf),
    ".pptx": (build_pptx, read_pptx),
    ".odp": (build_odp, read_odp),
    ".srt": (build_srt, read_srt),
    ".epub": (build_epub, read_epub),
}


def translated_file(url: str, name: str, data: bytes) -> httpx.Response:
    response = httpx.post(url + "/translate_file", files={"file": (name, data)},
                          data={"source": "en", "target": "de"}, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    download = httpx.get(response.json()["translatedFileUrl"], timeout=TIMEOUT)
    assert download.status_code == 200, download.text
    return download


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_document_comes_back_whole_and_translated(url: str, suffix: str):
    build, read = FORMATS[suffix]
    data = build()
    before = read(data)
    assert sum(text.count(URL) for text in before.texts) == 1 and sum(t.count(EMOJI) for t in before.texts) == 1
    after = read(translated_file(url, f"neighbours{suffix}", data).content)  # opens in its format
    assert after.structure == before.structure
    assert len(after.texts) == len(before.texts), after.texts
    for text, translation in zip(before.texts, after.texts):
        if has_letter(text):
            assert translation.strip() and translation != text, (text, translation)
        else:
            assert translation == text
    assert after.styled == before.styled, after.texts
    assert sum(text.count(URL) for text in after.texts) == 1, after.texts
    assert sum(text.count(EMOJI) for text in after.texts) == 1, after.texts
