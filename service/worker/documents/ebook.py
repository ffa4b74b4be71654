"""E-books (.epub): each XHTML document of the book (its chapters and its table of contents) through
service.worker.html_units, parsed by BeautifulSoup's XML parser (lxml) so that it stays XHTML.

ebooklib reads the package: the container, the package document and its manifest, which name the XHTML documents;
a document the manifest names more than once is read once (and its elements counted once, service.worker.documents.
package). The trees of the XHTML documents cost as much memory a node as a web page's, so their elements, texts and
comments are counted together against the web pages' node limit (TRANSLATOR_MAX_HTML_NODES) as BeautifulSoup
builds them: past it the book is refused (413) before any tree grows further.
The book is written back as a copy of its zip with those documents replaced, every other member (package document,
images, styles, fonts) as it came: ebooklib's writer would generate the package document and navigation anew.

A chapter that names the XHTML DTD may use HTML's named entities (&nbsp;, &mdash;), which that DTD defines but which
no parser here reads from it (DTDs are never loaded): they are written as the characters' numbers before the chapter
is parsed, so that their text is kept.
"""

from __future__ import annotations

import io
import posixpath
import re
from html.entities import name2codepoint

from bs4 import BeautifulSoup
from bs4.builder import LXMLTreeBuilderForXML
from ebooklib import epub
from lxml import etree

from service.worker.documents.package import SAFE_XML, open_package, rewrite, xml_bytes
from service.worker.documents.webpage import set_language
from service.worker.errors import TooLarge
from service.worker.html_units import XML_FORMATTER, HtmlUnits
from service.worker.markup import Unit

DC_LANGUAGE = "{http://purl.org/dc/elements/1.1/}language"


class Book:
    def __init__(self, data: bytes, max_nodes: int, max_html_nodes: int) -> None:
        self.archive = open_package(data, ".epub", max_nodes)
        reader = epub.EpubReader(io.BytesIO(data), {"ignore_ncx": True})
        book = reader.load()
        self.package_name = reader.opf_file
        self.chapters: list[tuple[str, BeautifulSoup, HtmlUnits]] = []
        names = [posixpath.normpath(posixpath.join(reader.opf_dir, item.file_name))
                 for item in book.get_items() if isinstance(item, epub.EpubHtml)]
        builder = CountedXml(max_html_nodes)  # one count for all the documents
        for name in dict.fromkeys(names):
            soup = BeautifulSoup(numbered_entities(self.archive.read(name)), builder=builder)
            self.chapters.append((name, soup, HtmlUnits(soup)))
        self.units: list[Unit] = [unit for _, _, html in self.chapters for unit in html.units]

    def write(self, translations: list[Unit], language: str) -> bytes:
        replaced, at = {}, 0
        for name, soup, html in self.chapters:
            html.write(translations[at : at + len(html.units)])
            set_language(soup, language)
            at += len(html.units)
            replaced[name] = soup.decode(formatter=XML_FORMATTER).encode("utf-8")
        package = etree.fromstring(self.archive.read(self.package_name), SAFE_XML)
        for element in package.iter(DC_LANGUAGE):
            element.text = language
        replaced[self.package_name] = xml_bytes(package)
        return rewrite(self.archive, replaced)


class CountedXml(LXMLTreeBuilderForXML):
    """BeautifulSoup's XML tree builder ("xml"), which lxml's parser calls as it reads, counting the nodes it builds
    (elements, texts, comments, processing instructions, doctypes) in all the documents it builds: past `most`,
    TooLarge."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most, self.nodes, self.in_text = most, 0, False

    def count(self, text: bool = False) -> None:
        """One more node, unless it is more of the text that is being read (lxml gives a text in pieces)."""
        if not (text and self.in_text):
            self.nodes += 1
            if self.nodes > self.most:
                raise TooLarge(f"the .epub file's XHTML documents hold more than {self.most} elements, texts and "
                               "comments, the limit")
        self.in_text = text

    def start(self, tag: str | bytes, attrib: dict, nsmap: dict | None = None) -> None:
        self.count()
        super().start(tag, attrib, nsmap or {})

    def end(self, tag: str | bytes) -> None:
        self.in_text = False
        super().end(tag)

    def data(self, data: str | bytes) -> None:
        self.count(text=True)
        super().data(data)

    def comment(self, text: str | bytes) -> None:
        self.count()
        super().comment(text)

    def pi(self, target: str, data: str) -> None:
        self.count()
        super().pi(target, data)

    def doctype(self, name: str, pubid: str, system: str) -> None:
        self.count()
        super().doctype(name, pubid, system)


NAMED_ENTITY = re.compile(rb"&([A-Za-z][A-Za-z0-9]{1,31});")
XML_ENTITIES = frozenset({b"amp", b"lt", b"gt", b"quot", b"apos"})


def numbered_entities(xhtml: bytes) -> bytes:
    """HTML's named entities written as character references (&nbsp; as &#160;); XML's own five, and names HTML does
    not know, as they were."""

    def number(match: re.Match[bytes]) -> bytes:
        name = match[1]
        if name in XML_ENTITIES or (code := name2codepoint.get(name.decode("ascii"))) is None:
            return match[0]
        return b"&#%d;" % code

    return NAMED_ENTITY.sub(number, xhtml)
