"""Documents translated whole (service.worker.documents): each format built here with the library that reads it,
translated by a fake translator, read back with that library; hostile files refused with a 4xx, quickly."""

from __future__ import annotations

import asyncio
import io
import random
import re
import time
import zipfile
from collections.abc import Callable
from dataclasses import replace

import docx
import odfdo
import pptx
import pytest
import regex
import srt
from bs4 import BeautifulSoup
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from ebooklib import epub
from pptx.util import Inches

from bench.serving.hostile import epub_of_paragraphs, opendocument_of_paragraphs
from service.settings import Settings
from service.worker.documents import FORMATS, Limits, read
from service.worker.documents.package import MAX_UNPACKED, count_elements
from service.worker.documents.translate import translate_document, translate_file
from service.worker.errors import InvalidRequest, RequestError, TooLarge

PLACEHOLDER = regex.compile(r"^\d{4,}[.,]?$")
LIMIT = Limits.of(Settings.model_construct())  # the defaults: they admit a 1 MB .docx


async def upper(texts: list[str]) -> list[str]:
    """A translator that writes every word in capitals, placeholders where they were."""
    return [regex.sub(r"[^\W\d]+", lambda m: m[0].upper(), text) for text in texts]


async def reverse(texts: list[str]) -> list[str]:
    """A translator that writes the words in capitals and in reverse order: placeholders move with their words."""
    return [" ".join(word if PLACEHOLDER.match(word) else word.upper() for word in reversed(text.split()))
            for text in texts]


def translated(data: bytes, suffix: str, translator: Callable = upper, limits: Limits = LIMIT) -> bytes:
    return asyncio.run(translate_file(data, suffix, limits, translator, "de"))


def saved(document: object) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def word_document() -> bytes:
    document = docx.Document()
    document.sections[0].header.paragraphs[0].text = "The header text"
    paragraph = document.add_paragraph("A sentence with a ")
    paragraph.add_run("bold").bold = True
    paragraph.add_run(" word in it.")
    document.add_paragraph("Second paragraph.")
    table = document.add_table(rows=2, cols=2)
    for i, cell in enumerate(table._cells):
        cell.text = f"cell number {i}"
    return saved(document)


@pytest.mark.parametrize("translator", [upper, reverse])
def test_a_word_document_keeps_its_paragraphs_runs_tables_and_header(translator: Callable):
    result = docx.Document(io.BytesIO(translated(word_document(), ".docx", translator)))
    first = result.paragraphs[0]
    assert [run.text for run in first.runs if run.bold] == ["BOLD"]
    assert first.text.split() == (["A", "SENTENCE", "WITH", "A", "BOLD", "WORD", "IN", "IT."] if translator is upper
                                  else ["IT.", "IN", "WORD", "BOLD", "A", "WITH", "SENTENCE", "A"])
    assert len(result.paragraphs) == 2 and result.paragraphs[1].text.split()[0] in ("SECOND", "PARAGRAPH.")
    assert len(result.tables) == 1 and len(result.tables[0]._cells) == 4
    assert sorted(result.tables[0]._cells[3].text.split()) == ["3", "CELL", "NUMBER"]
    assert result.sections[0].header.paragraphs[0].text.split()[0] in ("THE", "TEXT")


def test_a_word_hyperlink_and_field_keep_their_words_and_order():
    document = docx.Document()
    paragraph = document.add_paragraph("See ")
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), "rId99")
    run = OxmlElement("w:r")
    text = OxmlElement("w:t")
    text.text = "this page"
    run.append(text)
    link.append(run)
    paragraph._p.append(link)
    paragraph.add_run(" on page ")
    for kind in ("begin", "code", "separate", "result", "end"):
        run = paragraph.add_run("7" if kind == "result" else None)
        if kind == "code":
            run._r.append(OxmlElement("w:instrText"))
            run._r[-1].text = " PAGE "
        elif kind != "result":
            run._r.append(OxmlElement("w:fldChar"))
            run._r[-1].set(qn("w:fldCharType"), kind)
    paragraph.add_run(" of the book.")
    result = docx.Document(io.BytesIO(translated(saved(document), ".docx", reverse))).paragraphs[0]._p
    link = result.find(qn("w:hyperlink"))
    assert link.get(qn("r:id")) == "rId99" and link.xpath("string(.)") == "PAGE THIS"
    assert [c.get(qn("w:fldCharType")) for c in result.iter(qn("w:fldChar"))] == ["begin", "separate", "end"]
    assert [c.text for c in result.iter(qn("w:instrText"))] == [" PAGE "]


def test_a_presentation_keeps_its_slides_shapes_and_bold_words():
    presentation = pptx.Presentation()
    for title, body in [("First slide", "Some text"), ("Second slide", "More text")]:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        frame = slide.placeholders[1].text_frame
        frame.text = body + " with "
        run = frame.paragraphs[0].add_run()
        run.text = "bold"
        run.font.bold = True
        frame.paragraphs[0].add_run().text = " words."
    result = pptx.Presentation(io.BytesIO(translated(saved(presentation), ".pptx")))
    assert [slide.shapes.title.text for slide in result.slides] == ["FIRST SLIDE", "SECOND SLIDE"]
    body = result.slides[1].placeholders[1].text_frame.paragraphs[0]
    assert body.text == "MORE TEXT WITH BOLD WORDS."
    assert [run.text for run in body.runs if run.font.bold] == ["BOLD"]


def test_an_opendocument_text_keeps_its_styled_span_and_heading():
    document = odfdo.Document("text")
    document.body.append(odfdo.Header(1, "A title"))
    paragraph = odfdo.Paragraph("A sentence with ")
    paragraph.append(odfdo.Span("styled", style="T1"))
    paragraph.append(" words in it.")
    document.body.append(paragraph)
    data = translated(saved(document), ".odt", reverse)
    result = odfdo.Document(io.BytesIO(data))
    assert [str(header).strip() for header in result.body.headers] == ["TITLE A"]
    assert [(span.text, span.style) for span in result.body.spans] == [("STYLED", "T1")]
    assert str(result.body.paragraphs[-1]).split() == ["IT.", "IN", "WORDS", "STYLED", "WITH", "SENTENCE", "A"]
    first = zipfile.ZipFile(io.BytesIO(data)).infolist()[0]
    assert (first.filename, first.compress_type) == ("mimetype", zipfile.ZIP_STORED)


SUBTITLES = """1
00:00:01,000 --> 00:00:02,500
Hello there.

2
00:00:03,000 --> 00:00:05,000
A sentence that runs
over <i>two</i> lines.

3
00:00:06,000 --> 00:00:07,000
<b>Bye!</b>
"""


def test_subtitles_keep_their_numbers_timings_lines_and_tags():
    before = list(srt.parse(SUBTITLES))
    after = list(srt.parse(translated(SUBTITLES.encode(), ".srt").decode()))
    assert [(c.index, c.start, c.end) for c in after] == [(c.index, c.start, c.end) for c in before]
    assert [c.content for c in after] == ["HELLO THERE.", "A SENTENCE THAT RUNS\nOVER <i>TWO</i> LINES.", "<b>BYE!</b>"]


CHAPTER = """<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>Chapter {n}</title></head>
<body><section epub:type="chapter"><h1>Chapter {n}</h1>
<p class="first">A <a href="#note{n}" class="ref">linked</a> word, an <img src="x.png" alt="a picture"/> &amp;
<code>a &lt; b</code>.</p><p translate="no">Kept as written.</p></section></body></html>"""


def epub_book(title: str, chapters: list[tuple[str, str]]) -> bytes:
    """An English .epub of these (title, XHTML page) chapters, chapter1.xhtml, chapter2.xhtml, ..., with its
    navigation."""
    book = epub.EpubBook()
    book.set_identifier(title)
    book.set_title(title)
    book.set_language("en")
    items = []
    for n, (name, page) in enumerate(chapters, 1):
        chapter = epub.EpubHtml(title=name, file_name=f"chapter{n}.xhtml", lang="en")
        chapter.content = page.encode()
        book.add_item(chapter)
        items.append(chapter)
    book.toc = items
    book.spine = ["nav", *items]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()


def test_an_ebook_keeps_its_chapters_and_their_markup():
    source = epub_book("A book", [(f"Chapter {n}", CHAPTER.format(n=n)) for n in (1, 2)])
    data = translated(source, ".epub", reverse)
    result = epub.read_epub(io.BytesIO(data), {"ignore_ncx": True})
    names = sorted(item.file_name for item in result.get_items() if isinstance(item, epub.EpubHtml))
    assert names == ["chapter1.xhtml", "chapter2.xhtml", "nav.xhtml"]
    archive = zipfile.ZipFile(io.BytesIO(data))
    page = BeautifulSoup(archive.read("EPUB/chapter2.xhtml"), "xml")
    assert page.h1.text == "2 CHAPTER"
    paragraph = page.find("p", class_="first")
    assert paragraph.a.attrs == {"href": "#note2", "class": "ref"} and paragraph.a.text == "LINKED"
    assert paragraph.img["alt"] == "PICTURE A" and paragraph.code.text == "a < b" and "&amp;" in str(paragraph)
    assert page.find("p", translate="no").text == "Kept as written."
    assert page.section["epub:type"] == "chapter"
    assert '<a href="chapter2.xhtml">2 CHAPTER</a>' in archive.read("EPUB/nav.xhtml").decode()


def test_a_web_page_translates_each_block_once_keeping_its_markup():
    page = ("<!DOCTYPE html><html><head><title>A page</title><script>var x = 'no';</script></head><body>"
            "<p>Read <a href='/x' class='big'>this <b>fine</b> link</a> &amp; now.<!-- kept --></p>"
            "<ul><li>One item</li><li translate='no'>Brand</li></ul><pre>as   is</pre></body></html>")
    html = translated(page.encode(), ".html").decode()
    result = BeautifulSoup(html, "lxml")
    assert result.title.text == "A PAGE" and result.script.text == "var x = 'no';"
    assert '<p>READ <a href="/x" class="big">THIS <b>FINE</b> LINK</a> &amp; NOW.<!-- kept --></p>' in html
    assert [li.text for li in result.find_all("li")] == ["ONE ITEM", "Brand"]
    assert result.pre.text == "as   is"


def test_plain_text_keeps_its_lines_and_line_endings():
    result = translated(b"First line.\r\n\r\n  Second line.\nthird", ".txt")
    assert result == b"FIRST LINE.\r\n\r\n  SECOND LINE.\nTHIRD"


def test_only_units_with_text_are_sent_and_all_in_one_call():
    calls = []

    async def recording(texts: list[str]) -> list[str]:
        calls.append(texts)
        return texts

    document = read(word_document(), ".docx", LIMIT)
    asyncio.run(translate_document(document, recording, "de"))
    assert len(calls) == 1 and len(calls[0]) == 7 and all(text.strip() for text in calls[0])


# --- what is refused ------------------------------------------------------------------------------------------------


def refused(data: bytes, suffix: str, error: type[RequestError] = InvalidRequest) -> str:
    """The error's message; reading must fail with `error` within a few seconds of CPU time (the machine may be
    shared: its wall time says little)."""
    start = time.process_time()
    with pytest.raises(error) as raised:
        read(data, suffix, LIMIT)
    assert time.process_time() - start < 5
    return raised.value.message


def with_member(name: str, content: bytes) -> bytes:
    """The Word document with one member replaced."""
    source = zipfile.ZipFile(io.BytesIO(word_document()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as written:
        for member in source.infolist():
            written.writestr(member.filename, content if member.filename == name else source.read(member))
    return out.getvalue()


def test_formats_not_taken_are_named_in_the_error():
    message = refused(b"%PDF-1.7", ".pdf")
    assert "convert a PDF" in message and all(suffix in message for suffix in FORMATS)
    assert ".exe files are not taken" in refused(b"MZ", ".exe")


@pytest.mark.parametrize("suffix", [".docx", ".pptx", ".odt", ".odp", ".epub"])
def test_a_broken_zip_or_random_bytes_are_a_400(suffix: str):
    assert "not a readable" in refused(word_document()[:3000], suffix)
    assert "not a readable" in refused(bytes(range(256)) * 40, suffix)


def test_a_zip_of_another_format_is_a_400():
    refused(word_document(), ".pptx")
    refused(word_document(), ".odt")
    refused(word_document(), ".epub")


def test_a_zip_bomb_is_refused_before_it_is_unpacked():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        with bomb.open("word/document.xml", "w") as member:
            zeros = bytes(1 << 20)
            for _ in range((MAX_UNPACKED >> 20) + 1):
                member.write(zeros)
    assert len(out.getvalue()) < 1 << 20
    assert "unpacks to" in refused(out.getvalue(), ".docx", TooLarge)


def test_an_xml_bomb_is_refused():
    laughs = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
              + b"".join(b'<!ENTITY lol%d "%s">' % (i, b"&lol%d;" % (i - 1) * 10 if i > 1 else b"&lol;" * 10)
                         for i in range(1, 10))
              + b']><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
              b"<w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>")
    assert "declares XML entities" in refused(with_member("word/document.xml", laughs), ".docx")  # before a parse
    declared = laughs.replace(b"&lol9;", b"&lol;")
    assert "declares XML entities" in refused(with_member("word/document.xml", declared), ".docx")


def test_deeply_nested_markup_is_refused():
    deep = b"<w:document xmlns:w='http://schemas.openxmlformats.org/wordprocessingml/2006/main'>" + \
        b"<w:body>" * 10_000 + b"</w:body>" * 10_000 + b"</w:document>"
    assert "not well-formed" in refused(with_member("word/document.xml", deep), ".docx")
    deepest = LIMIT.html_nodes // 2 - 1  # elements and their one text within the node limit
    assert "nested deeper" in refused(b"<div>" * deepest + b"x" + b"</div>" * deepest, ".html")


@pytest.mark.parametrize("suffix", [".txt", ".srt", ".html"])
def test_binary_data_named_as_text_is_a_400(suffix: str):
    assert "binary data" in refused(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", suffix)
    assert "not UTF-8" in refused("caf\u00e9".encode("latin-1"), suffix)


def test_a_file_over_the_character_limit_is_a_413():
    with pytest.raises(TooLarge):
        read(b"word " * 1000, ".txt", Limits(chars=4000, nodes=LIMIT.nodes, html_nodes=LIMIT.html_nodes))


def test_a_one_megabyte_word_document_is_read_and_written_in_seconds():
    """9,000 paragraphs of random words, each with a bold pair of words: about 1 MB zipped, 2 million characters
    (English text packs more: 2.7 million in a 1 MB file of Multi30k's sentences)."""
    rng = random.Random(4)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    document = docx.Document()
    for _ in range(9000):
        paragraph = document.add_paragraph(" ".join(rng.choices(words, k=rng.randint(8, 20))).capitalize() + ". ")
        paragraph.add_run(" ".join(rng.choices(words, k=2))).bold = True
        paragraph.add_run(" " + " ".join(rng.choices(words, k=rng.randint(8, 30))) + ".")
    data = saved(document)
    assert len(data) > 1_000_000
    start = time.perf_counter()
    result = docx.Document(io.BytesIO(translated(data, ".docx", upper)))
    assert time.perf_counter() - start < 30  # a generous bound: reading it back must not be quadratic
    assert len(result.paragraphs) == 9000
    assert all(run.text.isupper() for run in result.paragraphs[-1].runs if run.bold)


# --- documents read within a budget: refused before memory grows with what they unpack to ------------------------


def test_a_small_docx_of_millions_of_empty_paragraphs_is_refused_while_it_streams():
    paragraphs = b"<w:p/>" * (2 * LIMIT.nodes)  # 2.4 MB unpacked, far under the unpacked-size limit
    document = (b"<w:document xmlns:w='http://schemas.openxmlformats.org/wordprocessingml/2006/main'><w:body>"
                + paragraphs + b"</w:body></w:document>")
    bomb = with_member("word/document.xml", document)
    assert len(bomb) < 200_000
    assert f"more than {LIMIT.nodes} XML elements" in refused(bomb, ".docx", TooLarge)


def test_html_txt_and_srt_files_of_too_many_nodes_are_refused_before_they_are_parsed():
    assert "more than" in refused(b"<br>" * (2 * LIMIT.nodes + 1), ".html", TooLarge)
    assert f"more than {LIMIT.html_nodes}" in refused(b"<p>x" * (LIMIT.html_nodes // 2 + 1), ".html", TooLarge)
    assert "line breaks" in refused(b"\n" * (LIMIT.nodes + 1), ".txt", TooLarge)
    cue = b"1\n00:00:00,000 --> 00:00:01,000\nx\n\n"
    assert "cue timings" in refused(cue * (LIMIT.nodes + 1), ".srt", TooLarge)


def test_an_ebooks_xhtml_documents_are_counted_together_against_the_html_node_limit():
    """Their trees cost what a web page's does: a book of four chapters, each far under the limit alone, is
    translated at exactly as many nodes as they hold together, and refused one node short of it."""
    book = epub_of_paragraphs(400, chapters=4)  # each paragraph an element and its text
    nodes = sum(len(list(soup.descendants)) for _, soup, _ in read(book, ".epub", LIMIT).chapters)
    assert nodes > 800
    result = zipfile.ZipFile(io.BytesIO(translated(book, ".epub", limits=replace(LIMIT, html_nodes=nodes))))
    assert all(result.read(f"EPUB/chapter{n}.xhtml").count(b"<p>X</p>") == 100 for n in range(4))
    with pytest.raises(TooLarge, match=f"more than {nodes - 1} elements, texts and comments"):
        read(book, ".epub", replace(LIMIT, html_nodes=nodes - 1))


@pytest.mark.parametrize("suffix", [".odt", ".odp"])
def test_an_opendocument_at_the_node_limit_is_translated_and_one_past_it_refused(suffix: str):
    document = opendocument_of_paragraphs(suffix, 1000)
    archive = zipfile.ZipFile(io.BytesIO(document))
    elements = sum(count_elements(archive.open(member), member.filename, LIMIT.nodes) for member in
                   archive.infolist() if member.filename.endswith(".xml") and member.file_size)
    result = zipfile.ZipFile(io.BytesIO(translated(document, suffix, limits=replace(LIMIT, nodes=elements))))
    assert result.read("content.xml").count(b">X</text:p>") == 1000
    with pytest.raises(TooLarge, match=f"more than {elements - 1} XML elements"):
        read(document, suffix, replace(LIMIT, nodes=elements - 1))


def test_an_epub_chapter_named_twice_in_the_manifest_is_read_once():
    book = epub_book("A book", [(f"Chapter {n}", CHAPTER.format(n=n)) for n in (1, 2)])
    archive = zipfile.ZipFile(io.BytesIO(book))
    opf = next(name for name in archive.namelist() if name.endswith(".opf"))
    package = archive.read(opf).decode()
    item = regex.search(r'<item [^>]*href="chapter1.xhtml"[^>]*/>', package)[0]
    twice = package.replace(item, item + item.replace('id="', 'id="again-'))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as written:
        for member in archive.infolist():
            written.writestr(member, twice if member.filename == opf else archive.read(member))
    once, again = read(book, ".epub", LIMIT), read(out.getvalue(), ".epub", LIMIT)
    assert again.units and len(again.units) == len(once.units)


def test_an_epub_chapter_that_names_the_xhtml_dtd_keeps_the_text_of_its_html_entities():
    """&nbsp; and &mdash; are defined by the XHTML DTD, which is never loaded: their text is kept, not dropped."""
    page = ('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
            '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\n<html xmlns="http://www.w3.org/1999/xhtml"><head>'
            "<title>T</title></head><body><p>Hello&nbsp;there &amp; here.</p><p>One &mdash; two.</p></body></html>")
    source = epub_book("A book", [("One", "<html><body><p>x</p></body></html>")])
    archive = zipfile.ZipFile(io.BytesIO(source))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as written:
        for member in archive.infolist():
            written.writestr(member, page if member.filename == "EPUB/chapter1.xhtml" else archive.read(member))
    document = read(out.getvalue(), ".epub", LIMIT)
    texts = ["".join(piece for piece in unit if isinstance(piece, str)) for unit in document.units]
    assert "Hello\xa0there & here." in texts and "One \u2014 two." in texts


def test_a_library_error_message_shows_no_object_address():
    """python-pptx names the file it could not read by its repr, "<_io.BytesIO object at 0x7f...>"."""
    message = refused(word_document(), ".pptx")
    assert "not a PowerPoint file" in message and not regex.search(r"0x[0-9a-fA-F]{6,}", message), message


# --- the target language in attributes and metadata -----------------------------------------------


def test_a_web_page_and_an_ebook_name_the_target_language():
    page = translated(b'<!doctype html><html lang="en" xml:lang="en"><body><p>Hello there.</p></body></html>',
                      ".html")
    assert BeautifulSoup(page, "html.parser").html.attrs == {"lang": "de", "xml:lang": "de"}
    book = translated(epub_book("A book", [("Chapter 1", CHAPTER.format(n=1))]), ".epub")
    archive = zipfile.ZipFile(io.BytesIO(book))
    assert "<dc:language>de</dc:language>" in archive.read("EPUB/content.opf").decode()
    assert BeautifulSoup(archive.read("EPUB/chapter1.xhtml"), "xml").html["lang"] == "de"


def test_opendocument_cells_and_styles_follow_the_translation():
    document = odfdo.Document("text")
    table = odfdo.Table("T", width=1, height=1)
    table.set_value((0, 0), "A cell")  # a string cell: office:string-value and a paragraph
    document.body.append(table)
    document.body.append(odfdo.Paragraph("A sentence."))
    data = translated(saved(document), ".odt")
    archive = zipfile.ZipFile(io.BytesIO(data))
    content = archive.read("content.xml").decode()
    assert 'office:string-value="A CELL"' in content and 'office:string-value="A cell"' not in content
    languages = re.findall(r'fo:language="([^"]*)"', archive.read("styles.xml").decode())
    assert languages and set(languages) == {"de"}


def test_a_word_document_and_slides_name_the_target_language():
    document = docx.Document()
    run = document.add_paragraph().add_run("A sentence.")
    language = OxmlElement("w:lang")
    language.set(qn("w:val"), "en-US")
    run._r.get_or_add_rPr().append(language)
    data = translated(saved(document), ".docx")
    assert set(re.findall(r'w:lang w:val="([^"]*)"', docx_xml(data))) == {"de"}
    deck = pptx.Presentation()
    box = deck.slides.add_slide(deck.slide_layouts[6]).shapes.add_textbox(0, 0, Inches(2), Inches(1))
    box.text_frame.text = "A sentence."
    box.text_frame.paragraphs[0].runs[0]._r.get_or_add_rPr().set("lang", "en-US")
    slides = zipfile.ZipFile(io.BytesIO(translated(saved(deck), ".pptx"))).read("ppt/slides/slide1.xml").decode()
    assert set(re.findall(r' lang="([^"]*)"', slides)) == {"de"}


def docx_xml(data: bytes) -> str:
    return zipfile.ZipFile(io.BytesIO(data)).read("word/document.xml").decode()
