"""Web pages (.html, .htm): the units of service.worker.html_units, in a tree parsed as browsers parse a page
(service.worker.html5), at most `max_nodes` tags, elements, texts and comments. A fragment (a file without <html>,
<body> or a doctype) is parsed and comes back as a fragment; a written page that would run script its source did not
is refused (400)."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup

from service.worker.documents.plain import decode
from service.worker.html5 import HTML_FORMATTER, check_safe, parse
from service.worker.html_units import HtmlUnits
from service.worker.markup import Unit

WHOLE_PAGE = re.compile(r"<(?:html|body|head)[\s>]|<!doctype", re.IGNORECASE)


def set_language(soup: BeautifulSoup, language: str) -> None:
    """The page's (or XHTML document's) html element in `language`: lang, and xml:lang where it has one."""
    if (root := soup.find("html")) is not None:
        root["lang"] = language
        if root.has_attr("xml:lang"):
            root["xml:lang"] = language


class WebPage:
    def __init__(self, data: bytes, suffix: str, max_nodes: int) -> None:
        self.text = decode(data, suffix)
        self.fragment = WHOLE_PAGE.search(self.text) is None
        self.soup = parse(self.text, self.fragment, max_nodes)
        self.html = HtmlUnits(self.soup)
        self.units: list[Unit] = self.html.units

    def write(self, translations: list[Unit], language: str) -> bytes:
        self.html.write(translations)
        set_language(self.soup, language)
        written = self.soup.decode(formatter=HTML_FORMATTER)
        check_safe(self.text, written, self.fragment)
        return written.encode("utf-8")
