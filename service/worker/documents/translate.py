"""A document through a translator: its units marked (service.worker.markup), their texts translated in one call,
the file rebuilt. The parsing, the marking and the rebuilding run in one thread of the HTTP worker's own (READING),
off its event loop: documents uploaded at once are read one after another, so that however many arrive, one
document's parse at a time takes the worker's CPU from its event loop and its other requests. When the last document
the worker holds is answered (or its client leaves), what they held goes back to the system (release_memory), as the
engine gives its memory back once idle: documents read at once leave the worker near its idle size."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, contextmanager, nullcontext
from typing import TypeVar

from service.memory import trim_malloc
from service.worker.documents import Document, Limits, read
from service.worker.errors import RequestError
from service.worker.markup import mark, unmark

TranslateTexts = Callable[[list[str]], Awaitable[list[str]]]  # texts -> their translations, in order
READING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="documents")
T = TypeVar("T")


async def off_the_loop(work: Callable[[], T]) -> T:
    """work() in the READING thread."""
    return await asyncio.get_running_loop().run_in_executor(READING, work)


class Held:
    """How many documents the worker holds (read, or waiting to be, or translated); the event loop counts them."""

    def __init__(self) -> None:
        self.count = 0

    @contextmanager
    def one(self) -> Iterator[None]:
        """One more while it lasts; when the last one goes, what they held goes back (in the READING thread)."""
        self.count += 1
        try:
            yield
        finally:
            self.count -= 1
            if not self.count:
                READING.submit(release_memory)


def release_memory() -> None:
    """What the documents held goes back: the cycles of their cancelled tasks (an error's traceback holds the frames
    that hold the document) collected, and glibc's free heap pages given back to the system."""
    gc.collect()
    trim_malloc()


HELD = Held()


async def translate_file(data: bytes, suffix: str, limits: Limits, translate_texts: TranslateTexts,
                         language: str, turn: AbstractAsyncContextManager | None = None) -> bytes:
    """The file in `data` (named with `suffix`) translated into `language`, as bytes of the same format. It is read,
    translated and written in its `turn` (a worker's: TRANSLATOR_DOCUMENTS_AT_ONCE at once; None: at once), so that
    the documents waiting for theirs hold only their bytes, never a parsed tree."""
    async with turn or nullcontext():
        with HELD.one():
            try:
                document = await off_the_loop(lambda: read(data, suffix, limits))
            except RequestError as error:  # refused while read: its traceback's frames hold what was parsed, which
                raise error.with_traceback(None) from None  # then goes before the memory is given back
            return await translate_document(document, translate_texts, language)


async def translate_document(document: Document, translate_texts: TranslateTexts, language: str) -> bytes:
    """`document` with each unit translated into `language`: only units with text to translate are sent, all in
    one call. A unit is marked again when its translation is put in (mark is the same each time), so that what
    marking takes out of every unit is never held for all of them while the document is translated."""
    translations: list[str] = await off_the_loop(lambda: [mark(unit).text for unit in document.units])
    sent = [i for i, text in enumerate(translations) if text.strip()]
    for i, translation in zip(sent, await translate_texts([translations[i] for i in sent]), strict=True):
        translations[i] = translation
    return await off_the_loop(lambda: document.write(
        [unmark(translation, mark(unit)) for translation, unit in zip(translations, document.units, strict=True)],
        language))
