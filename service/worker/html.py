"""The translatable text of an HTML fragment, and the fragment again with that text translated (format "html").

Parsed by BeautifulSoup with Python's html.parser, which keeps a fragment as written: no html/body wrapper is added
and no element is moved, so the markup comes back as it came, text aside (attributes in their order, with their
values as written; entities in text and attribute values decoded, then escaped again on output).

Translated: text nodes and the title, alt, placeholder and aria-label attributes, but nothing inside script, style,
code, pre or textarea, nor inside an element marked translate="no" or class="notranslate" (the nearest translate
attribute decides, as in HTML: translate="yes" inside translate="no" is translated). A text node's leading and
trailing whitespace is kept around its translation; runs of spaces, tabs and newlines within it, which HTML shows as
one space, are given to the translator as one space, so that source formatting does not end a sentence.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning, NavigableString, Tag
from bs4.dammit import EntitySubstitution
from bs4.element import PreformattedString
from bs4.formatter import HTMLFormatter

UNTRANSLATED_ELEMENTS = {"script", "style", "code", "pre", "textarea"}
TRANSLATED_ATTRIBUTES = ("title", "alt", "placeholder", "aria-label")
HTML_WHITESPACE = re.compile(r"[ \t\n\r\f]+")

# A fragment such as "index.html" is text to translate, not a file name mistaken for markup.
warnings.filterwarnings("ignore", category=MarkupResemblesLocatorWarning)


class MarkupFormatter(HTMLFormatter):
    """Escapes only & < > (and quotes in attribute values), keeps attributes in order, writes <br> not <br/>."""

    def __init__(self) -> None:
        super().__init__(entity_substitution=EntitySubstitution.substitute_xml, void_element_close_prefix=None)

    def attributes(self, tag: Tag) -> Iterator[tuple[str, str | None]]:
        return iter(tag.attrs.items())


FORMATTER = MarkupFormatter()

Slot = tuple[Tag | NavigableString, str | None]  # a text node, or an element and the name of one of its attributes


class HtmlText:
    """`texts` to translate, in document order; `render(translations)` gives the fragment with them in place."""

    def __init__(self, markup: str) -> None:
        self.markup = markup
        self.texts = [HTML_WHITESPACE.sub(" ", value(slot).strip()) for slot in slots(parse(markup))]

    def render(self, translations: list[str]) -> str:
        """The fragment with the i-th text replaced by translations[i]; the fragment is parsed anew each time."""
        soup = parse(self.markup)
        for (node, attribute), translation in zip(slots(soup), translations, strict=True):
            old = value((node, attribute))
            new = old[: len(old) - len(old.lstrip())] + translation + old[len(old.rstrip()) :]
            if attribute is None:
                node.replace_with(new)
            else:
                node[attribute] = new
        return soup.decode(formatter=FORMATTER)


def parse(markup: str) -> BeautifulSoup:
    return BeautifulSoup(markup, "html.parser", multi_valued_attributes=None)


def slots(soup: BeautifulSoup) -> list[Slot]:
    """The text nodes and attribute values to translate (not blank ones), in document order."""
    found: list[Slot] = []
    for node in soup.descendants:
        if isinstance(node, Tag):
            if translated(node):
                found += [(node, name) for name in TRANSLATED_ATTRIBUTES if str(node.get(name, "")).strip()]
        elif not isinstance(node, PreformattedString) and node.strip() and translated(node.parent):
            found.append((node, None))  # a text node, not a comment, doctype or CDATA section
    return found


def value(slot: Slot) -> str:
    node, attribute = slot
    return str(node) if attribute is None else str(node[attribute])


def translated(element: Tag) -> bool:
    """Whether the text and attributes of an element are translated (see the module's docstring)."""
    for tag in (element, *element.parents):
        if tag.name in UNTRANSLATED_ELEMENTS or "notranslate" in str(tag.get("class", "")).split():
            return False
        if (translate := tag.get("translate")) is not None:
            return str(translate).strip().lower() != "no"
    return True
