"""/translate_file with documents read and written in a process of their own: the alternative that
bench.serving.hostile's `pool` case measures against the service's thread (service.worker.documents.translate).

    python -m bench.serving.document_process    # the service's processes, stand-in models, settings from TRANSLATOR_*

Each HTTP worker hands its documents to one process of its own (spawned): it reads a document and marks its units,
giving back the texts to translate; the worker translates them as the service does; the process then reads the
document again, puts the translations in and writes it, giving back its bytes, and lets its memory go. Only bytes
and texts cross between the two: a parsed document holds lxml and BeautifulSoup trees, which do not pickle, so the
document is parsed twice.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractAsyncContextManager, nullcontext
from multiprocessing.process import BaseProcess

from service import processes
from service.processes import SPAWN, setup_logging
from service.settings import Settings
from service.supervisor import Supervisor
from service.testing import ECHO_MODELS
from service.worker.documents import Limits, read
from service.worker.documents.translate import HELD, TranslateTexts, release_memory
from service.worker.markup import mark, unmark

DOCUMENTS = ProcessPoolExecutor(max_workers=1, mp_context=SPAWN)  # an HTTP worker's own, started at its first use


def texts_of(data: bytes, suffix: str, limits: Limits) -> list[str]:
    """The texts to translate of the document in `data`, one per unit (in the documents' process)."""
    return [mark(unit).text for unit in read(data, suffix, limits).units]


def written(data: bytes, suffix: str, limits: Limits, translations: list[str], language: str) -> bytes:
    """The document in `data` again, each unit's translation put in (in the documents' process)."""
    document = read(data, suffix, limits)
    try:
        return document.write([unmark(translation, mark(unit))
                               for translation, unit in zip(translations, document.units, strict=True)], language)
    finally:
        del document
        release_memory()


async def translate_file(data: bytes, suffix: str, limits: Limits, translate_texts: TranslateTexts,
                         language: str, turn: AbstractAsyncContextManager | None = None) -> bytes:
    """service.worker.documents.translate.translate_file, the document read and written in the process."""
    loop = asyncio.get_running_loop()
    async with turn or nullcontext():
        with HELD.one():
            texts = await loop.run_in_executor(DOCUMENTS, texts_of, data, suffix, limits)
            sent = [i for i, text in enumerate(texts) if text.strip()]
            for i, translation in zip(sent, await translate_texts([texts[i] for i in sent]), strict=True):
                texts[i] = translation
            return await loop.run_in_executor(DOCUMENTS, written, data, suffix, limits, texts, language)


def worker(*args: object) -> None:
    """An HTTP worker (service.worker.process.run) whose /translate_file uses translate_file() above."""
    import service.worker.routes.files
    from service.worker import process

    service.worker.routes.files.translate_document = translate_file
    process.run(*args)


class DocumentProcessSupervisor(Supervisor):
    """The service's supervisor, starting worker() above as its HTTP workers."""

    def _worker(self, index: int) -> BaseProcess:
        return processes.start("bench.serving.document_process:worker", f"worker-{index}", self.settings,
                               self.listener, self.address, self.lifeline, os.getpid())


if __name__ == "__main__":
    settings = Settings()
    setup_logging(settings)
    raise SystemExit(DocumentProcessSupervisor(settings, models=ECHO_MODELS).run())
