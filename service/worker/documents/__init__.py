"""Documents translated whole (/translate_file): each format read into units of service.worker.markup, and written
again with the translated units in place, its structure kept.

read(data, suffix, limits) gives a Document: its `units` (paragraphs, cells, cues, a block's inline content)
and write(translations) that rebuilds the file from one translated unit for each; translate.translate_document runs
one through a translator. Every way a file can be unreadable, hostile or too large raises a 4xx error
(service.worker.errors): a parser's own failure on a broken file is a 400, never a 500. Each reader counts what it
builds (elements, lines, cues) against Limits.nodes while it reads, before the tree or list of them grows (a web
page's nodes, and an e-book's XHTML documents', against Limits.html_nodes); the characters of text are counted
against Limits.chars once the units are read.

PDF is not taken: no maintained library writes translated text back into a PDF's layout reliably (its text is
positioned glyphs, in fonts embedded with only the glyphs used); convert it to .docx or .odt first.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

from service.settings import Settings
from service.worker.documents.ebook import Book
from service.worker.documents.opendocument import OpenDocument
from service.worker.documents.plain import PlainText
from service.worker.documents.slides import Presentation
from service.worker.documents.subtitles import Subtitles
from service.worker.documents.webpage import WebPage
from service.worker.documents.word import WordDocument
from service.worker.errors import InvalidRequest, RequestError, TooLarge
from service.worker.markup import Unit


class Document(Protocol):
    units: list[Unit]

    def write(self, translations: list[Unit], language: str) -> bytes:
        """The file again, the i-th unit replaced by translations[i], its language attributes and metadata set to
        `language` (an HTML page's lang, an e-book's dc:language, a .docx's w:lang, a slide's lang, ODF's
        fo:language) where the format has them."""
        ...


@dataclass(frozen=True)
class Limits:
    """What one file may hold: `chars` characters of text, `nodes` elements, lines or cues, and `html_nodes` tags,
    elements, texts and comments of a web page or of an e-book's XHTML documents together."""

    chars: int
    nodes: int
    html_nodes: int

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(settings.max_file_chars, settings.max_file_nodes, settings.max_html_nodes)


READERS: dict[str, Callable[[bytes, Limits], Document]] = {
    ".txt": lambda data, limits: PlainText(data, limits.nodes),
    ".html": lambda data, limits: WebPage(data, ".html", limits.html_nodes),
    ".htm": lambda data, limits: WebPage(data, ".htm", limits.html_nodes),
    ".docx": lambda data, limits: WordDocument(data, limits.nodes),
    ".odt": lambda data, limits: OpenDocument(data, ".odt", limits.nodes),
    ".pptx": lambda data, limits: Presentation(data, limits.nodes),
    ".odp": lambda data, limits: OpenDocument(data, ".odp", limits.nodes),
    ".srt": lambda data, limits: Subtitles(data, limits.nodes),
    ".epub": lambda data, limits: Book(data, limits.nodes, limits.html_nodes),
}
FORMATS = tuple(READERS)  # the suffixes taken
MEMORY_ADDRESS = re.compile(r" (?:object )?at 0x[0-9a-fA-F]+")
MEDIA_TYPES = {
    ".txt": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".odp": "application/vnd.oasis.opendocument.presentation",
    ".srt": "application/x-subrip; charset=utf-8",
    ".epub": "application/epub+zip",
}


def translated_name(name: str, language: str) -> str:
    """A translated file's name, as the CLI and /download_file give it: story.docx -> story.de.docx."""
    path = PurePath(name)
    return f"{path.stem}.{language}{path.suffix}"


def read(data: bytes, suffix: str, limits: Limits) -> Document:
    """The document in `data`, a file named with `suffix` (".docx"); 413 past its limits."""
    reader = READERS.get(suffix.lower())
    if reader is None:
        advice = " (convert a PDF to .docx or .odt first)" if suffix.lower() == ".pdf" else ""
        raise InvalidRequest(f"{suffix[:32] or 'a file without a suffix'} files are not taken{advice}; the formats "
                             f"are {', '.join(FORMATS)}")
    try:
        document = reader(data, limits)
    except RequestError:
        raise
    except Exception as error:  # each parser fails a broken file in its own way
        message = MEMORY_ADDRESS.sub("", str(error))[:200]  # a library's message may show an object's repr
        raise InvalidRequest(f"not a readable {suffix} file ({type(error).__name__}: {message})") from None
    if (chars := sum(len(piece) for unit in document.units for piece in unit if isinstance(piece, str))) > limits.chars:
        raise TooLarge(f"the file holds {chars} characters of text, the limit is {limits.chars}")
    return document
