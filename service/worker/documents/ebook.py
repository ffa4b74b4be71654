"""E-books (.epub): each XHTML document of the book (its chapters and its table of contents) through
service.worker.html_units, parsed by BeautifulSoup's XML parser (lxml) so that it stays XHTML.

ebooklib reads the package: the container, the package document and its manifest, which name the XHTML documents;
a document the manifest names more than once is read once (and its elements counted once, service.worker.documents.
package).
The book is written back as a copy of its zip with those documents replaced, every other member (package document,
images, styles, fonts) as it came: ebooklib's writer would generate the package document and navigation anew.
"""

from __future__ import annotations

import io
import posixpath

from bs4 import BeautifulSoup
from ebooklib import epub

from service.worker.documents.package import open_package, rewrite
from service.worker.html_units import XML_FORMATTER, HtmlUnits
from service.worker.markup import Unit


class Book:
    def __init__(self, data: bytes, max_nodes: int) -> None:
        self.archive = open_package(data, ".epub", max_nodes)
        reader = epub.EpubReader(io.BytesIO(data), {"ignore_ncx": True})
        book = reader.load()
        self.chapters: list[tuple[str, BeautifulSoup, HtmlUnits]] = []
        names = [posixpath.normpath(posixpath.join(reader.opf_dir, item.file_name))
                 for item in book.get_items() if isinstance(item, epub.EpubHtml)]
        for name in dict.fromkeys(names):
            soup = BeautifulSoup(self.archive.read(name), "xml")
            self.chapters.append((name, soup, HtmlUnits(soup)))
        self.units: list[Unit] = [unit for _, _, html in self.chapters for unit in html.units]

    def write(self, translations: list[Unit]) -> bytes:
        replaced, at = {}, 0
        for name, soup, html in self.chapters:
            html.write(translations[at : at + len(html.units)])
            at += len(html.units)
            replaced[name] = soup.decode(formatter=XML_FORMATTER).encode("utf-8")
        return rewrite(self.archive, replaced)
