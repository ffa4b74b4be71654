"""POST /translate and POST /detect (LibreTranslate's): parameters as JSON, form data or query string."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from service.worker.deepl.glossaries import matcher
from service.worker.dependencies import (
    Params,
    ServingPipeline,
    early_params,
    glossary_owner,
    once_admitted,
    pipeline,
    settled,
    state,
    unless_disconnected,
    validated,
)
from service.worker.errors import InvalidRequest
from service.worker.middleware import observe_pair
from service.worker.pipeline import Options, Pipeline
from service.worker.schemas import DetectedLanguage, DetectRequest, ErrorBody, TranslateRequest, TranslateResponse

ERRORS = {
    400: {"model": ErrorBody, "description": "unreadable or invalid input, a pair not served, over a limit"},
    403: {"model": ErrorBody, "description": "a missing or wrong API key, when keys are set"},
    413: {"model": ErrorBody, "description": "a body over TRANSLATOR_MAX_BODY_BYTES"},
    503: {"model": ErrorBody, "description": "the queue is full, the models are loading or the server is shutting "
          "down (Retry-After)"},
}
router = APIRouter(responses=ERRORS)


def body_schema(model: type[BaseModel]) -> dict:
    """OpenAPI's description of a body read by service.worker.params (JSON or form), which FastAPI cannot infer."""
    schema = {"schema": model.model_json_schema()}
    content = {"application/json": schema, "application/x-www-form-urlencoded": schema}
    return {"requestBody": {"content": content, "required": True}}


@router.post("/translate", response_model=TranslateResponse, response_model_exclude_none=True,
             openapi_extra=body_schema(TranslateRequest))
async def translate(request: Request) -> Response:
    """Translate q from source to target (LibreTranslate's API); parameters as JSON, form or query string.

    The service's busiest route awaits its dependencies itself rather than declaring them (Depends), and writes its
    answer without FastAPI validating it again: on a short sentence, both were a share of the worker's time to
    notice (BENCHMARKS.md, "A lone request's path: the worker's busiest route")."""
    p = await pipeline(request)
    values = await early_params(request)

    async def translated() -> TranslateResponse:
        req = validated(TranslateRequest, values)
        observe_pair(request, p.pair_label(req))
        return await p.translate(req, await glossary_options(request, p, req))

    return json_response(await unless_disconnected(request, once_admitted(request, translated)))


def json_response(answer: BaseModel) -> Response:
    """The answer as its route's response_model writes it, without validating again what the pipeline built."""
    return Response(answer.model_dump_json(exclude_none=True), media_type="application/json")


async def glossary_options(request: Request, p: Pipeline, req: TranslateRequest) -> Options:
    """The extension glossary_id: the terms of a DeepL glossary of the request's key (service.worker.deepl)."""
    if req.glossary_id is None:
        return Options()
    if req.source == "auto":
        raise InvalidRequest("a glossary needs a source language")
    p.check(req)
    await settled(request)  # whose glossaries
    terms = await asyncio.to_thread(matcher, state(request).glossaries, glossary_owner(request), req.glossary_id,
                                    req.source, req.target)
    return Options(terms=terms)


@router.post("/detect", response_model=list[DetectedLanguage], openapi_extra=body_schema(DetectRequest))
async def detect(p: ServingPipeline, values: Params) -> list[DetectedLanguage]:
    """The languages served, most likely first, with confidences in percent (LibreTranslate's /detect)."""
    req = validated(DetectRequest, values)
    return [DetectedLanguage(confidence=round(confidence, 1), language=code) for code, confidence in p.detect(req.q)]
