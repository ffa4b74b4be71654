"""The translatable text of an HTML fragment, and the fragment again with that text translated (format "html").

Parsed as a browser parses a div's innerHTML (service.worker.html5): the fragment comes back as the browser's tree of
it, written out again, text aside (attributes in their order; entities in text and attribute values decoded, then
escaped again on output). Markup that browsers would repair comes back repaired (a stray end tag dropped, an
unclosed element closed), and a rendering that would run script the fragment did not is refused (400).

What is translated, and how, is service.worker.html_units': block elements (p, li, td, h1-h6, div, ...) bound the
units, and the inline elements inside a sentence (a, b, span, ...) become placeholders (service.worker.markup), so
the sentence is translated once and each element lands around the words it wrapped, its attributes untouched;
script, style, code, pre, textarea and translate="no" are not translated; comments are kept.

Parsing runs on the HTTP worker's event loop, so its work is bounded before it parses: at most MAX_NODES tags,
elements, texts and comments (413 past it), and MAX_DEPTH elements deep (400). Each rendering parses the fragment
again and writes its translations in.
"""

from __future__ import annotations

from service.worker.html5 import HTML_FORMATTER, check_safe, parse
from service.worker.html_units import DEFAULT_TAGS, HtmlUnits, Tags
from service.worker.markup import mark, unmark

MAX_NODES = 1000  # TRANSLATOR_MAX_CHARS (5,000) characters of ordinary markup hold far fewer


class HtmlText:
    """`texts` to translate, one per unit in document order, with placeholders for its inline markup;
    `render(translations)` gives the fragment with them in place."""

    def __init__(self, markup: str, tags: Tags = DEFAULT_TAGS) -> None:
        self.markup = markup
        self.tags = tags
        self.texts = [mark(unit).text for unit in HtmlUnits(parse(markup, True, MAX_NODES), tags).units]

    def render(self, translations: list[str]) -> str:
        """The fragment with the i-th unit translated as translations[i] (its placeholders where the inline markup
        goes). Each rendering parses the fragment again, and marks it again (the same placeholders): the units'
        elements are that tree's."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        soup = parse(self.markup, True, MAX_NODES)
        units = HtmlUnits(soup, self.tags)
        units.write([unmark(text, mark(unit)) for text, unit in zip(translations, units.units)])
        rendered = soup.decode(formatter=HTML_FORMATTER)
        check_safe(self.markup, rendered, True)
        return rendered
