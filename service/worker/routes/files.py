"""POST /translate_file and GET /download_file: a document translated whole (service.worker.documents), kept for
download (service.worker.files)."""

from __future__ import annotations

from pathlib import PurePath
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.worker.dependencies import Params, ServingPipeline, state, unless_disconnected, validated
from service.worker.documents import FORMATS, translated_name
from service.worker.documents.translate import translate_file as translate_document
from service.worker.errors import InvalidRequest, NotFound
from service.worker.files import KEPT_FILES, content_disposition, media_type, uploaded_name
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
        return await p.translate_document(texts, req.source, req.target)

    suffix, limit = PurePath(name).suffix.lower(), p.settings.max_file_chars
    translated = await unless_disconnected(request, translate_document(data, suffix, limit, translate_texts,
                                                                       req.target))
    name = translated_name(name, req.target)  # as the CLI names it: story.de.docx
    token = state(request).files.put(name, translated)
    return FileTranslated(translatedFileUrl=f"{request.base_url}download_file/{token}/{quote(name, safe='')}")


@router.get("/download_file/{token}/{name}", name="download_file", responses={404: {"model": ErrorBody}})
async def download_file(request: Request, token: str, name: str) -> Response:
    """A file translated by /translate_file (the last 256 are kept)."""
    if (kept := state(request).files.get(token, name)) is None:
        raise NotFound(f"No such file: translated files are kept for the last {KEPT_FILES} translations")
    return Response(kept, media_type=media_type(name), headers={"Content-Disposition": content_disposition(name)})
