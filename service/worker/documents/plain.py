"""Plain text (.txt): each line a unit, written back with its own line ending; at most `max_nodes` lines."""

from __future__ import annotations

from service.worker.errors import InvalidRequest, TooLarge
from service.worker.markup import Unit, has_text


def decode(data: bytes, kind: str) -> str:
    """A text file's content: UTF-8 (a byte order mark dropped), with no NUL byte, else a 400."""
    if b"\x00" in data:
        raise InvalidRequest(f"the {kind} file holds binary data (NUL bytes), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidRequest(f"the {kind} file is not UTF-8 text") from None


def check_count(count: int, what: str, max_nodes: int) -> None:
    """413 for a file of more than `max_nodes` lines, cues or the like, counted before they are read."""
    if count > max_nodes:
        raise TooLarge(f"the file holds {count} {what}, the limit is {max_nodes}")


class PlainText:
    def __init__(self, data: bytes, max_nodes: int) -> None:
        check_count(data.count(b"\n") + data.count(b"\r"), "line breaks", max_nodes)
        self.lines = decode(data, ".txt").splitlines(keepends=True)
        self.translated = [i for i, line in enumerate(self.lines) if has_text([line])]
        self.units: list[Unit] = [[self.lines[i].rstrip("\r\n")] for i in self.translated]

    def write(self, translations: list[Unit], language: str) -> bytes:
        lines = list(self.lines)
        for i, pieces in zip(self.translated, translations, strict=True):
            ending = lines[i][len(lines[i].rstrip("\r\n")) :]
            lines[i] = "".join(piece for piece in pieces if isinstance(piece, str)) + ending
        return "".join(lines).encode("utf-8")
