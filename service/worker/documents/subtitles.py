"""Subtitles (.srt), parsed and written by the srt package: each cue's text a unit, its number and timings kept.

A line break inside a cue is an Atom, so that a sentence running over two lines is translated once and the break
lands where the model puts it; the formatting tags of SubRip (<i>, <b>, <u>, <font ...>) are Open and Close around
their words. A cue whose tags do not pair up has them translated as text. At most `max_nodes` cues.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import srt

from service.worker.documents.plain import check_count, decode
from service.worker.errors import InvalidRequest
from service.worker.markup import Atom, Close, Open, Piece, Unit, has_text

TAGS = re.compile(r"(<(/?)(i|b|u|font)\b[^>]*>|\n)", re.IGNORECASE)


@dataclass(eq=False)
class Written:
    """Markup of a cue as it was written: a line break, or a tag and its closing tag."""

    start: str
    end: str = ""


class Subtitles:
    def __init__(self, data: bytes, max_nodes: int) -> None:
        check_count(data.count(b"-->"), "cue timings", max_nodes)
        try:
            self.cues = list(srt.parse(decode(data, ".srt")))
        except srt.SRTParseError as error:
            raise InvalidRequest(f"not a readable .srt file: {error}") from None
        self.translated = [cue for cue in self.cues if has_text([cue.content])]
        self.units: list[Unit] = [pieces(cue.content) for cue in self.translated]

    def write(self, translations: list[Unit], language: str) -> bytes:
        for cue, unit in zip(self.translated, translations, strict=True):
            cue.content = "".join(written(piece) for piece in unit)
        return srt.compose(self.cues, reindex=False).encode("utf-8")


def pieces(content: str) -> Unit:
    """A cue's text: line breaks as atoms, tags that pair up as Open and Close (else as text)."""
    out: Unit = []
    opened: list[tuple[str, Written]] = []
    at = 0
    for match in TAGS.finditer(content):
        out.append(content[at : match.start()])
        at = match.end()
        if match[0] == "\n":
            out.append(Atom(Written("\n")))
        elif not match[2]:
            opened.append((match[3].lower(), Written(match[0])))
            out.append(Open(opened[-1][1]))
        elif opened and opened[-1][0] == match[3].lower():
            tag = opened.pop()[1]
            tag.end = match[0]
            out.append(Close(tag))
        else:
            return lines(content)
    out.append(content[at:])
    return lines(content) if opened else out


def lines(content: str) -> Unit:
    """A cue's text with its line breaks as atoms, tags and all as text."""
    out: Unit = []
    for i, line in enumerate(content.split("\n")):
        out += [Atom(Written("\n")), line] if i else [line]
    return out


def written(piece: Piece) -> str:
    if isinstance(piece, str):
        return piece
    return piece.element.end if isinstance(piece, Close) else piece.element.start
