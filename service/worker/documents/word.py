"""Word documents (.docx), read and written by python-docx: every paragraph of the body (tables and text boxes
included), the headers and the footers, each a unit of runs (service.worker.documents.runs).

Footnotes, endnotes and comments are parts that python-docx does not parse: they are kept as they are.
"""

from __future__ import annotations

import io

import docx
from docx.oxml.ns import qn
from docx.parts.document import DocumentPart
from docx.parts.hdrftr import FooterPart, HeaderPart

from service.worker.documents.package import open_package
from service.worker.documents.runs import Paragraph, ParagraphDocument, Syntax

WORD = Syntax(
    paragraph_properties=qn("w:pPr"),
    run=qn("w:r"),
    run_properties=qn("w:rPr"),
    text=qn("w:t"),
    containers=frozenset(qn(name) for name in (
        "w:hyperlink", "w:ins", "w:smartTag", "w:customXml", "w:fldSimple", "w:sdt", "w:sdtContent",
    )),
    container_properties=frozenset(qn(name) for name in ("w:sdtPr", "w:sdtEndPr", "w:smartTagPr", "w:customXmlPr")),
    left_out=frozenset(qn(name) for name in ("w:proofErr", "w:lastRenderedPageBreak", "w:softHyphen")),
    text_like=((qn("w:noBreakHyphen"), "\u2011"),),
    noise=frozenset(qn(name) for name in ("w:lang", "w:noProof")),
    preserve_space=True,
    field_char=qn("w:fldChar"),
    field_char_type=qn("w:fldCharType"),
)
STORIES = (DocumentPart, HeaderPart, FooterPart)


class WordDocument(ParagraphDocument):
    def __init__(self, data: bytes, max_nodes: int) -> None:
        open_package(data, ".docx", max_nodes)
        self.document = docx.Document(io.BytesIO(data))
        parts = [part for part in self.document.part.package.iter_parts() if isinstance(part, STORIES)]
        trees = [part.element for part in parts] + [self.document.styles.element]
        super().__init__(self.document, (Paragraph(p, WORD) for part in parts for p in part.element.iter(qn("w:p"))),
                         trees)
