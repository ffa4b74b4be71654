"""POST /translate_file and GET /download_file: a document translated whole (service.worker.documents), kept for
download (service.worker.files)."""

from __future__ import annotations

import asyncio
from pathlib import PurePath
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.settings import Settings
from service.worker.access import Client
from service.worker.dependencies import Params, ServingPipeline, client, state, unless_disconnected, validated
from service.worker.documents import FORMATS, Limits, translated_name
from service.worker.documents.translate import translate_file as translate_document
from service.worker.errors import InvalidRequest, NotFound
from service.worker.files import content_disposition, media_type, uploaded_name
from service.worker.middleware import observe_pair
from service.worker.params import upload
from service.worker.routes.translate import ERRORS
from service.worker.schemas import ErrorBody, FileRequest, FileTranslated, TranslateRequest

router = APIRouter()


def multipart_schema() -> dict:
    """OpenAPI's description of the multipart body: the file and FileRequest's fields."""
    schema = FileRequest.model_json_schema()
    schema["properties"]["file"] = {"type": "string", "format": "binary", "description": ", ".join(FORMATS)}
    schema["required"] = [*schema.get("required", []), "file"]
    return {"requestBody": {"content": {"multipart/form-data": {"schema": schema}}, "required": True}}


@router.post("/translate_file", response_model=FileTranslated, responses=ERRORS, openapi_extra=multipart_schema())
async def translate_file(request: Request, p: ServingPipeline, values: Params) -> FileTranslated:
    """Translate a document whole (multipart form: file, source, target): its paragraphs, runs, tables, slides,
    cues or chapters, in the same format; answers its download URL."""
    req, file = validated(FileRequest, values), upload(values, "file")
    try:
        name = uploaded_name(file.filename)
    except ValueError as problem:
        raise InvalidRequest(str(problem)) from None
    observe_pair(request, p.pair_label(TranslateRequest(q="-", source=req.source, target=req.target)))
    data = await file.read()

    async def translate_texts(texts: list[str]) -> list[str]:
        await state(request).access.count_characters(client(request), sum(map(len, texts)))
        return await p.translate_document(texts, req.source, req.target)

    suffix, s = PurePath(name).suffix.lower(), p.settings
    limits = Limits.of(s)
    translated = await unless_disconnected(request, translate_document(data, suffix, limits, translate_texts,
                                                                       req.target, turn=p.documents))
    name = translated_name(name, req.target)  # as the CLI names it: story.de.docx
    token = await asyncio.to_thread(state(request).files.put, client(request).owner, name, translated)
    return FileTranslated(translatedFileUrl=f"{public_base(request, s)}download_file/{token}/{quote(name, safe='')}")


def public_base(request: Request, settings: Settings) -> str:
    """The service's URL as its clients reach it, ending in "/": TRANSLATOR_PUBLIC_URL; else the request's own when
    its Host is one of TRANSLATOR_ALLOWED_HOSTS; else the address the server listens on. A client's Host header
    alone never names where another client's browser is sent."""
    if settings.public_url:
        return settings.public_url.rstrip("/") + "/"
    host, allowed = request.headers.get("host", ""), settings.allowed_hosts
    if "*" in allowed or host in allowed or host.rsplit(":", 1)[0] in allowed:
        return str(request.base_url)
    return f"http://{settings.host}:{settings.port}{request.scope.get('root_path', '').rstrip('/')}/"


@router.get("/download_file/{token}/{name}", name="download_file",
            responses={403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 503: {"model": ErrorBody}})
async def download_file(request: Request, token: str, name: str, api_key: str | None = None) -> Response:
    """A file translated by /translate_file, for TRANSLATOR_FILE_RETENTION_S; when keys are on, only with the key
    that translated it."""
    s = state(request)
    owner = Client.of_key(await s.access.key(api_key)).owner if s.settings.keys_required else None
    if (kept := await asyncio.to_thread(s.files.get, token, name, owner)) is None:
        raise NotFound(f"No such file: a translated file is kept for {s.settings.file_retention_s:g} s, for the "
                       "key that translated it")
    return Response(kept, media_type=media_type(name), headers={"Content-Disposition": content_disposition(name)})
