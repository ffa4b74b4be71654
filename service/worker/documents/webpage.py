"""Web pages (.html, .htm): the units of service.worker.html_units, in a tree parsed by lxml's HTML parser, which
reads a page of any size in linear time (html.parser reads the rest of the page again at each unfinished tag). A
fragment (a file without <html> or <body>) comes back a fragment: lxml's wrapper is left out."""

from __future__ import annotations

import re

from bs4 import BeautifulSoup

from service.worker.documents.plain import decode
from service.worker.html_units import HTML_FORMATTER, HtmlUnits
from service.worker.markup import Unit

WHOLE_PAGE = re.compile(r"<(?:html|body|head)[\s>]|<!doctype", re.IGNORECASE)


def set_language(soup: BeautifulSoup, language: str) -> None:
    """The page's (or XHTML document's) html element in `language`: lang, and xml:lang where it has one."""
    if (root := soup.find("html")) is not None:
        root["lang"] = language
        if root.has_attr("xml:lang"):
            root["xml:lang"] = language


class WebPage:
    def __init__(self, data: bytes, suffix: str) -> None:
        text = decode(data, suffix)
        self.soup = BeautifulSoup(text, "lxml", multi_valued_attributes=None)
        self.fragment = WHOLE_PAGE.search(text) is None
        self.html = HtmlUnits(self.soup)
        self.units: list[Unit] = self.html.units

    def write(self, translations: list[Unit], language: str) -> bytes:
        self.html.write(translations)
        set_language(self.soup, language)
        body = self.soup.body
        if self.fragment and body is not None:
            return body.decode_contents(formatter=HTML_FORMATTER).encode("utf-8")
        return self.soup.decode(formatter=HTML_FORMATTER).encode("utf-8")
