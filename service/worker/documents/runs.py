"""Paragraphs made of runs (Word's w:p, PowerPoint's a:p) as units of service.worker.markup, and written again.

A run is text with one formatting (its run properties: bold, italics, font, a link in PowerPoint). In a paragraph,
the formatting that holds the most text is the paragraph's own: its text is plain text of the unit; a stretch in
another formatting becomes Open(Format) text Close(Format), so that bold stays on the words it was on. Adjacent runs
with the same formatting are one stretch (Word splits runs for spell checking and revision marks). Elements around
runs (a Word hyperlink, a content control) are Open and Close around their words too. What a run holds besides text
(a tab, a break, a picture, a field code, a footnote mark) is an Atom with its run's formatting, and so is any other
element of the paragraph (a bookmark, a deleted passage); what only describes the source's text is left out
(spelling marks, the last rendered page break). A field that begins and ends in the paragraph (a page number, a
cross-reference: its code, then the result that Word computes from it) is one Atom, kept whole.

Writing a paragraph puts new runs in place of the old ones: each stretch of text in a run with its formatting, the
paragraph's properties first and what must stay last (PowerPoint's end-of-paragraph properties) last.
"""

from __future__ import annotations

import copy
import io
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from lxml import etree

from service.worker.markup import Atom, Close, Open, Unit, has_text

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"


Item = tuple[str, etree._Element | None, object]  # (kind, run properties, the text or element)


@dataclass(frozen=True)
class Syntax:
    """The element names (Clark notation) of a format whose paragraphs are made of runs."""

    paragraph_properties: str
    run: str
    run_properties: str
    text: str
    kept_last: frozenset[str] = frozenset()  # paragraph children that stay at its end
    containers: frozenset[str] = frozenset()  # elements around runs, kept around their words
    container_properties: frozenset[str] = frozenset()  # children of a container that stay in it
    left_out: frozenset[str] = frozenset()  # marks that only describe the source's text
    text_like: tuple[tuple[str, str], ...] = ()  # run children that stand for text: (name, the text)
    noise: frozenset[str] = frozenset()  # run-property children and attributes that do not make another format
    preserve_space: bool = False  # mark text elements xml:space="preserve" (Word drops their edge spaces otherwise)
    field_char: str = ""  # a run child that begins or ends a field (Word's w:fldChar), and its attribute saying which
    field_char_type: str = ""


@dataclass(eq=False)
class Format:
    """A stretch of text in other run properties than the paragraph's own (None: no properties)."""

    properties: etree._Element | None


@dataclass(eq=False)
class Field:
    """A field's items, from its beginning to its end."""

    items: list[Item]


@dataclass(eq=False)
class RunChild:
    """What a run holds besides text, with the run's properties."""

    properties: etree._Element | None
    element: etree._Element


class Paragraph:
    """One paragraph's unit, and write() that puts a translated unit in its place."""

    def __init__(self, element: etree._Element, syntax: Syntax) -> None:
        self.element = element
        self.syntax = syntax
        self.keys: dict[int, bytes] = {}
        items = list(self.items(element))
        lengths: Counter[bytes] = Counter()
        for kind, properties, value in items:
            if kind == "text":
                lengths[self.key(properties)] += len(str(value))
        own = lengths.most_common(1)[0][0] if lengths else b""
        self.properties = next((p for kind, p, _ in items if kind == "text" and self.key(p) == own), None)
        self.unit = self.pieces(items, own)

    def items(self, container: etree._Element) -> Iterator[Item]:
        """What the paragraph holds, in order: ("text", properties, text), ("run child", properties, element),
        ("element", None, element), and ("open", None, container) ... ("close", None, container)."""
        s = self.syntax
        text_like = dict(s.text_like)
        for child in container:
            if child.tag in (s.paragraph_properties, *s.kept_last, *s.container_properties, *s.left_out):
                continue
            if child.tag == s.run:
                properties = child.find(s.run_properties)
                for part in child:
                    if part.tag == s.text:
                        yield "text", properties, part.text or ""
                    elif part.tag in text_like:
                        yield "text", properties, text_like[part.tag]
                    elif part.tag != s.run_properties and part.tag not in s.left_out:
                        yield "run child", properties, part
            elif child.tag in s.containers:
                yield "open", None, child
                yield from self.items(child)
                yield "close", None, child
            elif isinstance(child.tag, str):  # not a comment or a processing instruction
                yield "element", None, child

    def key(self, properties: etree._Element | None) -> bytes:
        """What tells one formatting from another: the run properties without their noise."""
        if properties is None:
            return b""
        if id(properties) not in self.keys:
            kept = copy.deepcopy(properties)
            for child in [c for c in kept if c.tag in self.syntax.noise]:
                kept.remove(child)
            for name in [name for name in kept.attrib if name in self.syntax.noise]:
                del kept.attrib[name]
            self.keys[id(properties)] = etree.tostring(kept, method="c14n") if len(kept) or kept.attrib else b""
        return self.keys[id(properties)]

    def pieces(self, items: list[Item], own: bytes) -> Unit:
        """The unit: text in the paragraph's own formatting plain, other stretches between Open and Close."""
        fields = self.fields(items)
        pieces: Unit = []
        current: Format | None = None  # the stretch open now
        i = 0
        while i < len(items):
            kind, properties, value = items[i]
            key = self.key(properties) if kind == "text" else None
            edge = kind in ("open", "close") or i in fields
            if current and (edge or kind == "text" and key != self.key(current.properties)):
                pieces.append(Close(current))
                current = None
            if kind == "text" and key != own and current is None:
                current = Format(properties)
                pieces.append(Open(current))
            if i in fields:
                pieces.append(Atom(Field(items[i : fields[i] + 1])))
                i = fields[i]
            elif kind == "text":
                pieces.append(str(value))
            elif kind == "run child":
                pieces.append(Atom(RunChild(properties, value)))
            elif kind == "element":
                pieces.append(Atom(value))
            else:
                pieces.append((Open if kind == "open" else Close)(value))
            i += 1
        if current:
            pieces.append(Close(current))
        return pieces

    def fields(self, items: list[Item]) -> dict[int, int]:
        """Where each outermost field that begins and ends among the same runs begins -> where it ends."""
        s = self.syntax
        found: dict[int, int] = {}
        begun: list[int] = []
        for i, (kind, _, value) in enumerate(items):
            if kind in ("open", "close"):
                begun = []
            elif kind == "run child" and value.tag == s.field_char:
                which = value.get(s.field_char_type)
                if which == "begin":
                    begun.append(i)
                elif which == "end" and begun:
                    start = begun.pop()
                    if not begun:
                        found[start] = i
        return found

    def write(self, pieces: Unit) -> None:
        """Put a translated unit in the paragraph in place of its runs."""
        s = self.syntax
        last = [child for child in self.element if child.tag in s.kept_last]
        for child in [c for c in self.element if c.tag != s.paragraph_properties]:
            self.element.remove(child)
        parents = [self.element]
        formats = [self.properties]
        for piece in pieces:
            if isinstance(piece, str):
                self.add_run(parents[-1], formats[-1]).append(self.text(piece))
            elif isinstance(piece.element, Format) and isinstance(piece, Open):
                formats.append(piece.element.properties)
            elif isinstance(piece.element, Format):
                formats.pop()
            elif isinstance(piece, Open):
                container = piece.element
                for child in [c for c in container if c.tag not in s.container_properties]:
                    container.remove(child)
                parents[-1].append(container)
                parents.append(container)
            elif isinstance(piece, Close):
                parents.pop()
            else:
                self.add_item(parents[-1], piece.element)
        self.element.extend(last)

    def add_item(self, parent: etree._Element, kept: RunChild | Field | etree._Element) -> None:
        """An atom written again: a run child in a run of its own, a field's items in order, an element as it is."""
        if isinstance(kept, RunChild):
            self.add_run(parent, kept.properties).append(kept.element)
        elif isinstance(kept, Field):
            for kind, properties, value in kept.items:
                if kind == "element":
                    parent.append(value)
                else:
                    run = self.add_run(parent, properties)
                    run.append(self.text(value) if kind == "text" else value)
        else:
            parent.append(kept)

    def add_run(self, parent: etree._Element, properties: etree._Element | None) -> etree._Element:
        run = etree.SubElement(parent, self.syntax.run)
        if properties is not None:
            run.append(copy.deepcopy(properties))
        return run

    def text(self, value: str) -> etree._Element:
        element = etree.Element(self.syntax.text)
        element.text = value
        if self.syntax.preserve_space:
            element.set(XML_SPACE, "preserve")
        return element


# the attribute that names an element's language: a .docx's w:lang, a slide's run properties
W, A = "http://schemas.openxmlformats.org/wordprocessingml/2006/main", "http://schemas.openxmlformats.org/drawingml/2006/main"
LANGUAGE = {f"{{{W}}}lang": f"{{{W}}}val", **{f"{{{A}}}{tag}": "lang" for tag in ("rPr", "endParaRPr", "defRPr")}}



class ParagraphDocument:
    """A document whose units are its paragraphs of runs (.docx, .pptx): those with text; `package` (python-docx's
    or python-pptx's) writes the file again."""

    def __init__(self, package: object, paragraphs: Iterable[Paragraph], trees: list[etree._Element]) -> None:
        """`paragraphs` are taken one at a time: those without text are let go at once; `trees` are the XML trees
        whose language attributes (LANGUAGE) name the target once written."""
        self.package = package
        self.trees = trees
        self.paragraphs = [p for p in paragraphs if has_text(p.unit)]
        self.units: list[Unit] = [p.unit for p in self.paragraphs]

    def write(self, translations: list[Unit], language: str) -> bytes:
        for paragraph, pieces in zip(self.paragraphs, translations, strict=True):
            paragraph.write(pieces)
        for tree in self.trees:
            for element in tree.iter(*LANGUAGE):
                if element.get(LANGUAGE[element.tag]) is not None:
                    element.set(LANGUAGE[element.tag], language)
        out = io.BytesIO()
        self.package.save(out)
        return out.getvalue()

