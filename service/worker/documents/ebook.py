"""E-books (.epub): each XHTML document of the book (its chapters and its table of contents) through
service.worker.html_units, parsed by BeautifulSoup's XML parser (lxml) so that it stays XHTML.

ebooklib reads the package: the container, the package document and its manifest, which name the XHTML documents;
a document the manifest names more than once is read once (and its elements counted once, service.worker.documents.
package).
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
from ebooklib import epub
from lxml import etree

from service.worker.documents.package import SAFE_XML, open_package, rewrite, xml_bytes
from service.worker.documents.webpage import set_language
from service.worker.html_units import XML_FORMATTER, HtmlUnits
from service.worker.markup import Unit

DC_LANGUAGE = "{http://purl.org/dc/elements/1.1/}language"


class Book:
    def __init__(self, data: bytes, max_nodes: int) -> None:
        self.archive = open_package(data, ".epub", max_nodes)
        reader = epub.EpubReader(io.BytesIO(data), {"ignore_ncx": True})
        book = reader.load()
        self.package_name = reader.opf_file
        self.chapters: list[tuple[str, BeautifulSoup, HtmlUnits]] = []
        names = [posixpath.normpath(posixpath.join(reader.opf_dir, item.file_name))
                 for item in book.get_items() if isinstance(item, epub.EpubHtml)]
        for name in dict.fromkeys(names):
            soup = BeautifulSoup(numbered_entities(self.archive.read(name)), "xml")
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
