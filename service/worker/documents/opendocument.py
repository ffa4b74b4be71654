"""OpenDocument text and presentations (.odt, .odp): every paragraph and heading (text:p, text:h) of the content
and of the styles (where headers and footers live), each a unit: text:span and text:a are Open and Close around
their words (their style and link kept), a tab, a line break, a note, a frame or a field is an Atom, and a paragraph
inside a note or a frame is a unit of its own.

The package is read with zipfile and lxml (package.py), not with an ODF library: odfdo, the maintained one, parses
its parts with lxml's default parser, which expands entities, and offers its lxml elements only through private
names, while what is needed here is that tree walk itself. Every member but content.xml and styles.xml is written
back as it came, the mimetype first and stored, as ODF requires.
"""

from __future__ import annotations

from lxml import etree

from service.worker.documents.package import SAFE_XML, open_package, rewrite, xml_bytes
from service.worker.errors import InvalidRequest
from service.worker.markup import Atom, Close, Open, Unit, has_text

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
PARAGRAPHS = (f"{{{TEXT}}}p", f"{{{TEXT}}}h")
INLINE = frozenset({f"{{{TEXT}}}span", f"{{{TEXT}}}a"})
SPACE = f"{{{TEXT}}}s"  # one space or more, given to the translator as one
LEFT_OUT = frozenset({f"{{{TEXT}}}soft-page-break"})  # where the source's last layout broke a page
PARTS = ("content.xml", "styles.xml")
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
STRING_VALUE, CELL = f"{{{OFFICE}}}string-value", "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}table-cell"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
LANGUAGE, COUNTRY = f"{{{FO}}}language", f"{{{FO}}}country"
MIMETYPES = ("application/vnd.oasis.opendocument.text", "application/vnd.oasis.opendocument.presentation")


class OpenDocument:
    def __init__(self, data: bytes, suffix: str, max_nodes: int) -> None:
        self.archive = open_package(data, suffix, max_nodes)
        mimetype = self.archive.read("mimetype").decode("ascii", "replace").strip()
        if mimetype not in MIMETYPES:
            raise InvalidRequest(f"not an OpenDocument text or presentation (its mimetype is {mimetype[:100]!r})")
        self.roots = {name: etree.fromstring(self.archive.read(name), SAFE_XML) for name in PARTS}
        paragraphs = [p for root in self.roots.values() for p in root.iter(*PARAGRAPHS)]
        units = [(p, pieces(p)) for p in paragraphs]
        self.paragraphs = [p for p, unit in units if has_text(unit)]
        self.units: list[Unit] = [unit for _, unit in units if has_text(unit)]

    def write(self, translations: list[Unit], language: str) -> bytes:
        for paragraph, unit in zip(self.paragraphs, translations, strict=True):
            write(paragraph, unit)
        for root in self.roots.values():
            localize(root, language)
        return rewrite(self.archive, {name: xml_bytes(root) for name, root in self.roots.items()})


def localize(root: etree._Element, language: str) -> None:
    """A part in `language`: each style's fo:language (its fo:country, the source's, left out), and each table
    cell's office:string-value (the value a spreadsheet reads) its translated text."""
    for element in root.iter():
        if LANGUAGE in element.attrib:
            element.set(LANGUAGE, language)
            element.attrib.pop(COUNTRY, None)
    for cell in root.iter(CELL):
        if STRING_VALUE in cell.attrib:
            cell.set(STRING_VALUE, "\n".join("".join(p.itertext()) for p in cell.iter(*PARAGRAPHS)))


def pieces(element: etree._Element) -> Unit:
    """An element's mixed content as a unit."""
    out: Unit = [element.text or ""]
    for child in element:
        if child.tag in INLINE:
            out += [Open(child), *pieces(child), Close(child)]
        elif child.tag == SPACE:
            out.append(" ")
        elif child.tag not in LEFT_OUT and isinstance(child.tag, str):
            out.append(Atom(child))
        out.append(child.tail or "")
    return out


def write(paragraph: etree._Element, unit: Unit) -> None:
    """Put a translated unit in the paragraph: text where it stands, spans and links refilled, atoms moved."""
    empty(paragraph)
    parents = [paragraph]
    for piece in unit:
        if isinstance(piece, str):
            append_text(parents[-1], piece)
        elif isinstance(piece, Close):
            parents.pop()
        else:
            if isinstance(piece, Open):
                empty(piece.element)
            piece.element.tail = None
            parents[-1].append(piece.element)
            if isinstance(piece, Open):
                parents.append(piece.element)


def empty(element: etree._Element) -> None:
    element.text = None
    for child in list(element):
        element.remove(child)


def append_text(element: etree._Element, text: str) -> None:
    if len(element):
        element[-1].tail = (element[-1].tail or "") + text
    else:
        element.text = (element.text or "") + text
