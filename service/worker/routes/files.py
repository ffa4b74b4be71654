"""POST /translate_file and GET /download_file: a file translated whole, kept for download (service.worker.files)."""

from __future__ import annotations

from pathlib import PurePath
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from service.worker.dependencies import Params, ServingPipeline, state, unless_disconnected, validated
from service.worker.errors import InvalidRequest, NotFound
from service.worker.files import FORMATS, KEPT_FILES
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
async def translate_file(
    request: Request, p: ServingPipeline, values: Params
) -> FileTranslated:
    """Translate a .txt or .html file (multipart form: file, source, target); answers its download URL."""
    req, file = validated(FileRequest, values), upload(values, "file")
    name = PurePath(file.filename or "file.txt").name
    if (kind := FORMATS.get(PurePath(name).suffix.lower())) is None:
        raise InvalidRequest(f"{name}: supported files are {', '.join(FORMATS)}")
    try:
        text = (await file.read()).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest(f"{name} is not UTF-8 text") from None
    translate_req = validated(TranslateRequest, {"q": text, "source": req.source, "target": req.target, "format": kind})
    translated = (await unless_disconnected(request, p.translate(translate_req))).translatedText
    token = state(request).files.put(name, translated.encode("utf-8"))
    return FileTranslated(translatedFileUrl=f"{request.base_url}download_file/{token}/{quote(name)}")


@router.get("/download_file/{token}/{name}", name="download_file", responses={404: {"model": ErrorBody}})
async def download_file(request: Request, token: str, name: str) -> Response:
    """A file translated by /translate_file (the last 256 are kept)."""
    if (kept := state(request).files.get(token, name)) is None:
        raise NotFound(f"No such file: translated files are kept for the last {KEPT_FILES} translations")
    media = "text/html" if FORMATS[PurePath(name).suffix.lower()] == "html" else "text/plain"
    return Response(kept, media_type=f"{media}; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})
