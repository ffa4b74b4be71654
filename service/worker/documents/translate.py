"""A document through a translator: its units marked (service.worker.markup), their texts translated in one call,
the file rebuilt. The parsing and the rebuilding run in a thread, off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from service.worker.documents import Document, read
from service.worker.markup import Marked, mark, unmark

TranslateTexts = Callable[[list[str]], Awaitable[list[str]]]  # texts -> their translations, in order


async def translate_file(data: bytes, suffix: str, max_chars: int, translate_texts: TranslateTexts,
                         language: str) -> bytes:
    """The file in `data` (named with `suffix`) translated into `language`, as bytes of the same format."""
    document = await asyncio.to_thread(read, data, suffix, max_chars)
    return await translate_document(document, translate_texts, language)


async def translate_document(document: Document, translate_texts: TranslateTexts, language: str) -> bytes:
    """`document` with each unit translated into `language`: only units with text to translate are sent, all in
    one call."""
    marked: list[Marked] = await asyncio.to_thread(lambda: [mark(unit) for unit in document.units])
    sent = [i for i, m in enumerate(marked) if m.text.strip()]
    translations = [m.text for m in marked]
    for i, translation in zip(sent, await translate_texts([marked[i].text for i in sent]), strict=True):
        translations[i] = translation
    return await asyncio.to_thread(
        lambda: document.write([unmark(translation, m) for translation, m in zip(translations, marked)], language)
    )
