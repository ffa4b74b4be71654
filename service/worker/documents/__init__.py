"""Documents translated whole (/translate_file): each format read into units of service.worker.markup, and written
again with the translated units in place, its structure kept.

read(data, suffix, max_chars) gives a Document: its `units` (paragraphs, cells, cues, a block's inline content)
and write(translations) that rebuilds the file from one translated unit for each; translate.translate_document runs
one through a translator. Every way a file can be unreadable, hostile or too large raises a 4xx error
(service.worker.errors): a parser's own failure on a broken file is a 400, never a 500.

PDF is not taken: no maintained library writes translated text back into a PDF's layout reliably (its text is
positioned glyphs, in fonts embedded with only the glyphs used); convert it to .docx or .odt first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import Protocol

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


READERS: dict[str, Callable[[bytes], Document]] = {
    ".txt": PlainText,
    ".html": lambda data: WebPage(data, ".html"),
    ".htm": lambda data: WebPage(data, ".htm"),
    ".docx": WordDocument,
    ".odt": lambda data: OpenDocument(data, ".odt"),
    ".pptx": Presentation,
    ".odp": lambda data: OpenDocument(data, ".odp"),
    ".srt": Subtitles,
    ".epub": Book,
}
FORMATS = tuple(READERS)  # the suffixes taken
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


def read(data: bytes, suffix: str, max_chars: int) -> Document:
    """The document in `data`, a file named with `suffix` (".docx"); 413 past `max_chars` characters of text."""
    reader = READERS.get(suffix.lower())
    if reader is None:
        advice = " (convert a PDF to .docx or .odt first)" if suffix.lower() == ".pdf" else ""
        raise InvalidRequest(f"{suffix[:32] or 'a file without a suffix'} files are not taken{advice}; the formats "
                             f"are {', '.join(FORMATS)}")
    try:
        document = reader(data)
    except RequestError:
        raise
    except Exception as error:  # each parser fails a broken file in its own way
        raise InvalidRequest(f"not a readable {suffix} file ({type(error).__name__}: {str(error)[:200]})") from None
    if (chars := sum(len(piece) for unit in document.units for piece in unit if isinstance(piece, str))) > max_chars:
        raise TooLarge(f"the file holds {chars} characters of text, the limit is {max_chars}")
    return document
