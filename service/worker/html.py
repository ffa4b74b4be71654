"""The translatable text of an HTML fragment, and the fragment again with that text translated (format "html").

Parsed by BeautifulSoup with Python's html.parser, which keeps a fragment as written: no html/body wrapper is added
and no element is moved, so the markup comes back as it came, text aside (attributes in their order, with their
values as written; entities in text and attribute values decoded, then escaped again on output).

What is translated, and how, is service.worker.html_units': block elements (p, li, td, h1-h6, div, ...) bound the
units, and the inline elements inside a sentence (a, b, span, ...) become placeholders (service.worker.markup), so
the sentence is translated once and each element lands around the words it wrapped, its attributes untouched;
script, style, code, pre, textarea and translate="no" are not translated; comments are kept.

Parsing runs on the HTTP worker's event loop, so its work is bounded as it parses (400 past a bound): at most
MAX_DEPTH elements deep, MAX_NODES elements, texts and comments, and MAX_UNFINISHED unfinished tags ("<" that begins
a tag, comment or declaration that never ends), for each of which html.parser reads the rest of the fragment again.
Each rendering parses the fragment again (a few ms at most within the bounds) and writes its translations in.
"""

from __future__ import annotations

import warnings
from typing import Any

from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning, Tag
from bs4.element import PageElement

from service.worker.errors import InvalidRequest
from service.worker.html_units import DEFAULT_TAGS, HTML_FORMATTER, MAX_DEPTH, HtmlUnits, Tags
from service.worker.markup import mark, unmark

RAW_TEXT_ELEMENTS = {"script", "style"}  # html.parser gives their content as text, "<" included
# Within these bounds, the costliest fragments of TRANSLATOR_MAX_CHARS (5,000) characters that we found parse in
# 5-9 ms on our 2-core Xeon, and each rendering takes 1-3 ms more.
MAX_NODES = 1000
MAX_UNFINISHED = 16

# A fragment such as "index.html" is text to translate, not a file name mistaken for markup.
warnings.filterwarnings("ignore", category=MarkupResemblesLocatorWarning)


class BoundedSoup(BeautifulSoup):
    """BeautifulSoup with html.parser, refusing markup past MAX_DEPTH, MAX_NODES or MAX_UNFINISHED as it parses."""

    def __init__(self, markup: str) -> None:
        super().__init__(markup, "html.parser", multi_valued_attributes=None)

    def reset(self) -> None:
        self.nodes = self.unfinished = 0
        super().reset()

    def pushTag(self, tag: Tag) -> None:
        """An element opens (the document itself first)."""
        super().pushTag(tag)
        if len(self.tagStack) > MAX_DEPTH + 1:
            raise InvalidRequest(f"markup nested deeper than {MAX_DEPTH} elements")
        self.counted()

    def object_was_parsed(self, o: PageElement, *args: Any, **kwargs: Any) -> None:
        """A text, comment or declaration is complete."""
        super().object_was_parsed(o, *args, **kwargs)
        self.counted()

    def counted(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES + 1:  # the document itself is one
            raise InvalidRequest(f"markup of more than {MAX_NODES} elements, texts and comments")

    def handle_data(self, data: str) -> None:
        """Text. html.parser hands an unfinished tag over as text that begins with "<" and is longer than that."""
        if len(data) > 1 and data[0] == "<" and self.currentTag.name not in RAW_TEXT_ELEMENTS:
            self.unfinished += 1
            if self.unfinished > MAX_UNFINISHED:
                raise InvalidRequest(f"markup with more than {MAX_UNFINISHED} unfinished tags (write < as &lt;)")
        super().handle_data(data)


class HtmlText:
    """`texts` to translate, one per unit in document order, with placeholders for its inline markup;
    `render(translations)` gives the fragment with them in place."""

    def __init__(self, markup: str, tags: Tags = DEFAULT_TAGS) -> None:
        self.markup = markup
        self.tags = tags
        self.texts = [mark(unit).text for unit in HtmlUnits(BoundedSoup(markup), tags).units]

    def render(self, translations: list[str]) -> str:
        """The fragment with the i-th unit translated as translations[i] (its placeholders where the inline markup
        goes). Each rendering parses the fragment again, and marks it again (the same placeholders): the units'
        elements are that tree's."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        soup = BoundedSoup(self.markup)
        units = HtmlUnits(soup, self.tags)
        units.write([unmark(text, mark(unit)) for text, unit in zip(translations, units.units)])
        return soup.decode(formatter=HTML_FORMATTER)
