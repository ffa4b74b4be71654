"""E-books (.epub): each XHTML document of the book (its chapters and its table of contents) through
service.worker.html_units, parsed by BeautifulSoup's XML parser (lxml) so that it stays XHTML.

ebooklib reads the package: the container, the package document and its manifest, which name the XHTML documents.
The book is written back as a copy of its zip with those documents replaced, every other member (package document,
images, styles, fonts) as it came: ebooklib's writer would generate the package document and navigation anew.
"""

from __future__ import annotations

import io
import posixpath

from bs4 import BeautifulSoup
from ebooklib import epub
from lxml import etree

from service.worker.documents.package import SAFE_XML, open_package, rewrite, xml_bytes
from service.worker.documents.webpage import set_language
from service.worker.html_units import XML_FORMATTER, HtmlUnits
from service.worker.markup import Unit

DC_LANGUAGE = "{http://purl.org/dc/elements/1.1/}language"


class Book:
    def __init__(self, data: bytes) -> None:
        self.archive = open_package(data, ".epub")
        reader = epub.EpubReader(io.BytesIO(data), {"ignore_ncx": True})
        book = reader.load()
        self.package_name = reader.opf_file
        self.chapters: list[tuple[str, BeautifulSoup, HtmlUnits]] = []
        for item in book.get_items():
            if isinstance(item, epub.EpubHtml):
                name = posixpath.normpath(posixpath.join(reader.opf_dir, item.file_name))
                soup = BeautifulSoup(self.archive.read(name), "xml")
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
