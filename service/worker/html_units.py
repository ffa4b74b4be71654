"""The units of an HTML or XHTML tree: what service.worker.markup translates, one block's inline content at a time.

Block elements (p, li, td, th, h1-h6, div, and any element not known as inline) bound the units: the text and
inline elements between two blocks are one unit, so a sentence is translated once whatever markup runs through it.
Inline elements that wrap words (a, b, strong, i, em, span, sub, sup, ...) become Open and Close around their
words, attributes untouched; markup kept whole where it stands becomes an Atom: br, img, inline code, svg, comments,
and an inline element that is not translated. An inline element with a block inside it is a block.

Not translated, as in service.worker.html: script, style, code, pre and textarea, and an element marked
translate="no" or class="notranslate" (the nearest translate attribute decides). The title, alt, placeholder and
aria-label attributes of translated elements are units of their own. Runs of whitespace inside a unit are given to
the translator as one space, as HTML shows them; the whitespace at a unit's edges is kept as written.

Works on a BeautifulSoup tree of HTML (service.worker.html5) or of XHTML (BeautifulSoup's "xml" parser); write()
changes that tree in place, reusing its elements, so a tree is written once. Nesting deeper than MAX_DEPTH elements
is refused. XML_FORMATTER writes an XHTML tree out with its attributes in their order (BeautifulSoup's own sorts
them), escaping only what must be (service.worker.html5's HTML_FORMATTER does so for HTML).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from bs4 import BeautifulSoup, NavigableString, PageElement, Tag
from bs4.dammit import EntitySubstitution
from bs4.element import PreformattedString
from bs4.formatter import XMLFormatter

from service.worker.errors import InvalidRequest
from service.worker.markup import Atom, Close, Open, Unit, has_text

INLINE = frozenset({
    "a", "abbr", "b", "bdi", "bdo", "big", "button", "cite", "data", "del", "dfn", "em", "font", "i", "ins", "label",
    "mark", "q", "s", "small", "span", "strike", "strong", "sub", "sup", "time", "tt", "u",
})
KEPT_WHOLE = frozenset({
    "area", "audio", "br", "canvas", "code", "embed", "iframe", "img", "input", "kbd", "map", "math", "meter",
    "noscript", "object", "output", "picture", "progress", "ruby", "samp", "script", "select", "style", "svg",
    "template", "textarea", "var", "video", "wbr",
})
UNTRANSLATED_ELEMENTS = frozenset({"script", "style", "code", "pre", "textarea"})
TRANSLATED_ATTRIBUTES = ("title", "alt", "placeholder", "aria-label")
HTML_WHITESPACE = re.compile(r"[ \t\n\r\f]+")
MAX_DEPTH = 100


@dataclass(frozen=True)
class Tags:
    """Which elements are part of their block's sentence (inline) and which are not translated; DeepL's
    non_splitting_tags, splitting_tags and ignore_tags change them for one request."""

    inline: frozenset[str] = INLINE
    untranslated: frozenset[str] = UNTRANSLATED_ELEMENTS


DEFAULT_TAGS = Tags()


class XmlInOrder(XMLFormatter):
    def attributes(self, tag: Tag) -> Iterator[tuple[str, str | None]]:
        return iter(tag.attrs.items())


XML_FORMATTER = XmlInOrder(entity_substitution=EntitySubstitution.substitute_xml)


@dataclass
class Run:
    """Consecutive children of a block: text and inline elements."""

    nodes: list[PageElement]


@dataclass
class Attribute:
    """A translated attribute of an element."""

    element: Tag
    name: str


class HtmlUnits:
    """The units of a tree in document order (`units`); write(translations) puts translated units in the tree."""

    def __init__(self, soup: BeautifulSoup, tags: Tags = DEFAULT_TAGS) -> None:
        self.soup = soup
        self.tags = tags
        self.slots: list[Run | Attribute] = []
        self.units: list[Unit] = []
        self.holding_blocks: set[int] = set()  # ids of the elements with a block inside them
        for element in reversed(soup.find_all(True)):  # an element's descendants before it
            if element.name not in tags.inline | KEPT_WHOLE or id(element) in self.holding_blocks:
                self.holding_blocks.add(id(element.parent))
        self.walk(soup, True, 0)

    def write(self, translations: list[Unit]) -> None:
        """Each unit's translation in place of the unit: elements moved where the translation puts them."""
        if len(translations) != len(self.slots):
            raise ValueError(f"{len(translations)} translations for {len(self.slots)} units")
        for slot, pieces in zip(self.slots, translations):
            if isinstance(slot, Attribute):
                slot.element[slot.name] = "".join(piece for piece in pieces if isinstance(piece, str))
            else:
                replace(slot.nodes, pieces)

    def walk(self, block: Tag, translated: bool, depth: int) -> None:
        """The units of a block: runs of its inline children, and those of the blocks inside it."""
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"markup nested deeper than {MAX_DEPTH} elements")
        run: list[PageElement] = []
        for child in list(block.children):
            if not isinstance(child, Tag) or self.inline(child):
                run.append(child)
                continue
            self.add_run(run, translated, depth)
            run = []
            child_translated = self.translated_here(child, translated)
            self.add_attributes(child, child_translated)
            self.walk(child, child_translated, depth + 1)
        self.add_run(run, translated, depth)

    def inline(self, element: Tag) -> bool:
        """Whether an element is part of its block's text: known as inline, with no block inside it."""
        return element.name in KEPT_WHOLE or element.name in self.tags.inline and id(element) not in self.holding_blocks

    def add_run(self, nodes: list[PageElement], translated: bool, depth: int) -> None:
        """A unit for a run that holds text to translate; the attributes of the elements in it. In a run that is not
        translated, an element marked to be (translate="yes") is a block of its own."""
        if not translated:
            for node in nodes:
                if isinstance(node, Tag):
                    inner = self.translated_here(node, False)
                    self.add_attributes(node, inner)
                    if inner:
                        self.walk(node, True, depth + 1)
                    else:
                        self.add_run(list(node.children), False, depth + 1)
            return
        pieces = self.pieces(nodes, translated, depth) if nodes else []
        if has_text(pieces):
            self.slots.append(Run(nodes))
            self.units.append(collapse_whitespace(pieces))

    def pieces(self, nodes: list[PageElement], translated: bool, depth: int) -> Unit:
        """Text, Open/Close around inline elements translated inside, Atom for the rest."""
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"markup nested deeper than {MAX_DEPTH} elements")
        pieces: Unit = []
        for node in nodes:
            if isinstance(node, PreformattedString):  # a comment, CDATA, a processing instruction
                pieces.append(Atom(node))
            elif isinstance(node, NavigableString):
                pieces.append(str(node))
            else:
                node_translated = self.translated_here(node, translated)
                self.add_attributes(node, node_translated)
                if node_translated and node.name in self.tags.inline:
                    pieces += [Open(node), *self.pieces(list(node.children), True, depth + 1), Close(node)]
                else:
                    pieces.append(Atom(node))
                    self.add_kept_attributes(node, node_translated, depth + 1)
        return pieces

    def add_attributes(self, element: Tag, translated: bool) -> None:
        if translated:
            for name in TRANSLATED_ATTRIBUTES:
                if str(element.get(name, "")).strip():
                    self.slots.append(Attribute(element, name))
                    self.units.append([str(element[name])])

    def add_kept_attributes(self, element: Tag, translated: bool, depth: int) -> None:
        """The translated attributes inside an element kept whole (an image's alt in a link kept as it is)."""
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"markup nested deeper than {MAX_DEPTH} elements")
        for child in element.children:
            if isinstance(child, Tag):
                child_translated = self.translated_here(child, translated)
                self.add_attributes(child, child_translated)
                self.add_kept_attributes(child, child_translated, depth + 1)

    def translated_here(self, element: Tag, inherited: bool) -> bool:
        """Whether an element's text and attributes are translated, given its parent's (see the module's
        docstring)."""
        if element.name in self.tags.untranslated or "notranslate" in str(element.get("class", "")).split():
            return False
        if (translate := element.get("translate")) is not None:
            return str(translate).strip().lower() != "no"
        return inherited


def collapse_whitespace(pieces: Unit) -> Unit:
    """Runs of whitespace in the text as one space, but the whitespace before the first word and after the last as
    written (service.worker.markup keeps it outside the translation)."""
    texts = [i for i, piece in enumerate(pieces) if isinstance(piece, str)]
    out = list(pieces)
    for i in texts:
        text = out[i]
        lead = text[: len(text) - len(text.lstrip())] if i == texts[0] else ""
        trail = text[len(text.rstrip()) :] if i == texts[-1] else ""
        core = text[len(lead) : len(text) - len(trail)]
        out[i] = lead + HTML_WHITESPACE.sub(" ", core) + trail
    return out


def replace(nodes: list[PageElement], pieces: Unit) -> None:
    """Put `pieces` where `nodes` stand: text as new text nodes, the elements of Open and Atom moved there (an Open's
    element emptied first, then filled with what the translation puts inside it)."""
    marker = NavigableString("")
    nodes[0].insert_before(marker)
    for node in nodes:
        node.extract()
    top: list[PageElement] = []
    stack: list[Tag] = []
    for piece in pieces:
        if isinstance(piece, Close):
            stack.pop()
            continue
        node = NavigableString(piece) if isinstance(piece, str) else piece.element
        node.extract()
        if isinstance(piece, Open):
            node.clear()
        (stack[-1].append(node) if stack else top.append(node))
        if isinstance(piece, Open):
            stack.append(node)
    if top:
        marker.replace_with(*top)
    else:
        marker.extract()
