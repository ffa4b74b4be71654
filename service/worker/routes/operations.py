"""For the operators: /health (the process lives), /ready (every model warm, not shutting down), /metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from core.model_cache import ModelCache
from service import __version__
from service.protocol import Phase
from service.worker.dependencies import PipelineNow, state
from service.worker.schemas import ErrorBody, HealthBody, PullProgress, ReadyBody, ServedModel

router = APIRouter()


@router.get("/health", response_model=HealthBody, response_model_exclude_none=True)
async def health(request: Request) -> HealthBody:
    """The process is alive, which release answers, and while the models load, what a named model's pull is doing
    (TRANSLATOR_MODELS)."""
    s = state(request)
    pulling = ModelCache(s.settings.model_cache).progress() if s.phase is Phase.LOADING else None
    return HealthBody(status="ok", version=__version__, pulling=pulling and PullProgress.model_validate(pulling))


@router.get("/ready", response_model=ReadyBody, responses={503: {"model": ErrorBody}})
async def ready(p: PipelineNow) -> ReadyBody:
    """Every model is loaded and warm, and the server is not shutting down."""
    models = [ServedModel(model=pair.name, provider=pair.info.provider, precision=pair.info.precision)
              for pair in p.pairs.pairs.values()]
    return ReadyBody(status="ready", models=models)


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus metrics."""
    return Response(state(request).metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
