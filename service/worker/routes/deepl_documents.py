"""DeepL's documents: POST /v2/document uploads one and answers at once; the translation runs in the background in
this HTTP worker (service.worker.documents, as /translate_file does it, as the engine's bulk work);
/v2/document/{id} says its status and /v2/document/{id}/result gives the translation once. Jobs and files are kept
by a DocumentJobs (service.worker.deepl.documents)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import PurePath

from fastapi import APIRouter, Request, Response

from service.protocol import EngineError
from service.worker.access import Access, Client
from service.worker.deepl.documents import DocumentJobs, Job
from service.worker.deepl.request import DeepLError, text_field
from service.worker.dependencies import DeepLParams, ServingPipeline, client, glossary_owner, state
from service.worker.documents import Limits
from service.worker.documents.translate import translate_file
from service.worker.errors import ENGINE_ANSWERS, RequestError
from service.worker.files import content_disposition, media_type, uploaded_name
from service.worker.params import upload
from service.worker.pipeline import Pipeline
from service.worker.routes.deepl import served

log = logging.getLogger(__name__)
running: set[asyncio.Task] = set()  # the jobs of this worker (a reference keeps each task alive)

router = APIRouter(tags=["DeepL"])


def jobs(request: Request) -> DocumentJobs:
    return state(request).documents


@router.post("/v2/document")
async def upload_document(request: Request, params: DeepLParams, p: ServingPipeline) -> dict:
    """A document (multipart: file, target_lang, source_lang, filename) taken for translation in the background."""
    file = upload(params, "file")
    try:
        name = uploaded_name(text_field(params, "filename") or file.filename)
    except ValueError as problem:
        raise DeepLError(f"Invalid file: {problem}") from None
    if not (target_lang := text_field(params, "target_lang")):
        raise DeepLError("Parameter 'target_lang' not specified.")
    target = served(p, target_lang, "target_lang")
    source_lang = text_field(params, "source_lang")
    source = served(p, source_lang, "source_lang") if source_lang else "auto"
    job = jobs(request).create(glossary_owner(request), name, await file.read())
    task = asyncio.create_task(translate(p, state(request).access, client(request), jobs(request), job, source,
                                         target))
    running.add(task)
    task.add_done_callback(running.discard)
    return {"document_id": job.document_id, "document_key": job.document_key}


async def translate(p: Pipeline, access: Access, whose: Client, kept: DocumentJobs, job: Job, source: str,
                    target: str) -> None:
    """Translate a job's document as bulk work (Pipeline.translate_document), reporting its progress; its status
    ends done or error. Its characters count in its key's usage and monthly limit (Access.count_characters)."""
    started = time.monotonic()
    job = dataclasses.replace(job, status="translating")
    kept.update(job)
    billed = 0

    async def translate_texts(texts: list[str]) -> list[str]:
        nonlocal billed
        billed, done = sum(map(len, texts)), 0

        def progress(translated: list[str]) -> None:
            """seconds_remaining: the time so far, for the share of characters left."""
            nonlocal done
            done += sum(map(len, translated))
            remaining = (time.monotonic() - started) * (billed - done) / max(done, 1)
            kept.update(dataclasses.replace(job, seconds_remaining=round(remaining)))

        await access.count_characters(whose, billed)
        return await p.translate_document(texts, source, target, progress)

    try:
        suffix = PurePath(job.name).suffix.lower()
        limits = Limits(chars=p.settings.max_file_chars, nodes=p.settings.max_file_nodes)
        result = await translate_file(kept.source(job), suffix, limits, translate_texts, target, turn=p.documents)
        kept.finish(job, result, billed)
        p.metrics.billed_characters.inc(billed)
    except (RequestError, EngineError) as error:
        message = error.message if isinstance(error, RequestError) else ENGINE_ANSWERS[type(error)][1]
        kept.update(dataclasses.replace(job, status="error", seconds_remaining=None, error_message=message))
    except Exception:
        log.exception("document %s failed", job.document_id)
        kept.update(dataclasses.replace(job, status="error", seconds_remaining=None, error_message="internal error"))


@router.post("/v2/document/{document_id}")
async def document_status(document_id: str, request: Request, params: DeepLParams) -> dict:
    """queued, translating (with seconds_remaining), done (with billed_characters) or error (with error_message)."""
    job = jobs(request).get(glossary_owner(request), document_id, text_field(params, "document_key"))
    fields = {"seconds_remaining": job.seconds_remaining, "billed_characters": job.billed_characters,
              "error_message": job.error_message}
    return {"document_id": job.document_id, "status": job.status,
            **{name: value for name, value in fields.items() if value is not None}}


@router.post("/v2/document/{document_id}/result")
async def document_result(document_id: str, request: Request, params: DeepLParams) -> Response:
    """The translated document, once."""
    job, data = jobs(request).take_result(glossary_owner(request), document_id, text_field(params, "document_key"))
    headers = {"Content-Disposition": content_disposition(job.name)}
    return Response(data, media_type=media_type(job.name), headers=headers)
