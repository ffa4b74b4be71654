"""PowerPoint presentations (.pptx), read and written by python-pptx: every paragraph of every slide (shapes,
groups, tables) and of its speaker notes, each a unit of runs (service.worker.documents.runs). A link is part of a
run's formatting there, so it stays on its words as bold does.
"""

from __future__ import annotations

import io

import pptx
from pptx.oxml.ns import qn

from service.worker.documents.package import open_package
from service.worker.documents.runs import Paragraph, ParagraphDocument, Syntax

DRAWING = Syntax(
    paragraph_properties=qn("a:pPr"),
    run=qn("a:r"),
    run_properties=qn("a:rPr"),
    text=qn("a:t"),
    kept_last=frozenset({qn("a:endParaRPr")}),
    noise=frozenset({"lang", "altLang", "dirty", "err", "noProof", "smtClean", "smtId"}),
)


class Presentation(ParagraphDocument):
    def __init__(self, data: bytes, max_nodes: int) -> None:
        open_package(data, ".pptx", max_nodes)
        self.presentation = pptx.Presentation(io.BytesIO(data))
        trees = []
        for slide in self.presentation.slides:
            trees.append(slide.element)
            if slide.has_notes_slide:
                trees.append(slide.notes_slide.element)
        super().__init__(self.presentation, (Paragraph(p, DRAWING) for tree in trees for p in tree.iter(qn("a:p"))),
                         trees)
