"""DeepL's documents: POST /v2/document uploads one and answers at once; the translation runs in the background
(service.worker.deepl.runner); /v2/document/{id} says its status and /v2/document/{id}/result gives the translation
once. Jobs and their files are kept by service.worker.deepl.documents, in the store and the data folder, which every
worker and replica shares: a status or download may reach another worker than the upload did."""

from __future__ import annotations

import asyncio
from pathlib import PurePath

from fastapi import APIRouter, Request, Response

from service.worker.deepl.documents import DocumentJobs
from service.worker.deepl.glossaries import matcher
from service.worker.deepl.request import DeepLError, check_formality, glossary_field, text_field
from service.worker.dependencies import DeepLParams, ServingPipeline, client, glossary_owner, state
from service.worker.files import content_disposition, media_type, uploaded_name
from service.worker.params import upload
from service.worker.routes.deepl import served

router = APIRouter(tags=["DeepL"])


def jobs(request: Request) -> DocumentJobs:
    return state(request).documents.jobs


@router.post("/v2/document")
async def upload_document(request: Request, params: DeepLParams, p: ServingPipeline) -> dict:
    """A document (multipart: file, target_lang, source_lang, filename, glossary_id, formality, output_format)
    taken for translation in the background."""
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
    check_formality(params)
    if text_field(params, "output_format").lower() not in ("", PurePath(name).suffix[1:].lower()):
        raise DeepLError("Value for 'output_format' not supported: a document is translated into its own format")
    if glossary_id := glossary_field(params):
        if source == "auto":
            raise DeepLError("Use of a glossary requires the source_lang parameter to be specified.")
        await asyncio.to_thread(matcher, state(request).glossaries, glossary_owner(request), glossary_id, source,
                                target)  # 404 or 400 now rather than an error status later
    data = await file.read()
    job, document_key = await asyncio.to_thread(jobs(request).create, glossary_owner(request),
                                                client(request).key_id, name, source, target, data, glossary_id)
    state(request).documents.start(p, job)
    return {"document_id": job.document_id, "document_key": document_key}


@router.post("/v2/document/{document_id}")
async def document_status(document_id: str, request: Request, params: DeepLParams) -> dict:
    """queued, translating (with seconds_remaining), done (with billed_characters) or error (with error_message)."""
    job = await asyncio.to_thread(jobs(request).get, glossary_owner(request), document_id,
                                  text_field(params, "document_key"))
    fields = {"seconds_remaining": job.seconds_remaining, "error_message": job.error_message,
              "billed_characters": job.billed_characters if job.status == "done" else None}
    return {"document_id": job.document_id, "status": job.status,
            **{name: value for name, value in fields.items() if value is not None}}


@router.post("/v2/document/{document_id}/result")
async def document_result(document_id: str, request: Request, params: DeepLParams) -> Response:
    """The translated document, once."""
    job, data = await asyncio.to_thread(jobs(request).take_result, glossary_owner(request), document_id,
                                        text_field(params, "document_key"))
    headers = {"Content-Disposition": content_disposition(job.name)}
    return Response(data, media_type=media_type(job.name), headers=headers)
