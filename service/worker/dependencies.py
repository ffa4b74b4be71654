"""What the routes share: the worker's state, the pipeline once it serves, the request's parameters, and awaiting
work for a client that may hang up."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from pydantic import BaseModel, ValidationError

from service.protocol import Phase
from service.worker.access import Client, characters
from service.worker.errors import ClientGone, InvalidRequest, NotServing, describe
from service.worker.params import read_params
from service.worker.pipeline import Pipeline
from service.worker.state import State

READY_GRACE_S = 1.0  # how long a request waits for this worker to hear that the engine is ready
Model = TypeVar("Model", bound=BaseModel)
T = TypeVar("T")


def state(request: Request) -> State:
    return request.app.state.translator_state


async def serving(state: State, grace: float) -> Pipeline:
    """The pipeline, once this worker serves. The engine's READY reaches every HTTP worker at once, give or take a
    moment: a request waits up to `grace` seconds for it, so that the worker that answered /ready first is not the
    only one that translates."""
    if state.phase is Phase.LOADING and grace > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.serving.wait(), grace)
    if (phase := state.phase) is not Phase.READY:
        raise NotServing(phase)
    return state.pipeline


async def pipeline(request: Request) -> Pipeline:
    """The pipeline for a request (waiting READY_GRACE_S for this worker to hear that the engine is ready)."""
    return await serving(state(request), READY_GRACE_S)


async def pipeline_now(request: Request) -> Pipeline:
    """The pipeline if this worker serves now (/ready)."""
    return await serving(state(request), 0)


KeyOf = Callable[[Request, dict[str, Any]], Any]  # where a request's API key is


def api_key(request: Request, params: dict[str, Any]) -> Any:
    """The API key of a LibreTranslate request: its api_key parameter."""
    return params.get("api_key")


def deepl_key(request: Request, params: dict[str, Any]) -> str:
    """The API key of a DeepL request: `Authorization: DeepL-Auth-Key KEY`, or the legacy auth_key parameter."""
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme == "DeepL-Auth-Key":
        return key.strip()
    return str(params.get("auth_key", ""))


async def admitted(request: Request, key_of: KeyOf, text: str) -> dict[str, Any]:
    """The request's parameters: query string and body merged (service.worker.params), once its key (`key_of` reads
    it) and limits admit it (service.worker.access, counting the characters of its `text` parameter; client() then
    names its client)."""

    async def admit(values: dict[str, Any]) -> None:
        used = characters(values.get(text))
        request.state.client = await state(request).access.admit(request, key_of(request, values), used)

    return await read_params(request, admit)


async def params(request: Request) -> dict[str, Any]:
    """A LibreTranslate request's parameters, admitted (its api_key, its q's characters)."""
    return await admitted(request, api_key, "q")


async def deepl_params(request: Request) -> dict[str, Any]:
    """A DeepL request's parameters, admitted (its key as DeepL sends it: deepl_key; its text's characters)."""
    return await admitted(request, deepl_key, "text")


def client(request: Request) -> Client:
    """Whose request this is (after `params` or `deepl_params`)."""
    return request.state.client


def glossary_owner(request: Request) -> str:
    """Whose glossaries and DeepL documents a request sees: its key's, or everyone's ("") when keys are off."""
    return client(request).owner if state(request).settings.keys_required else ""


def validated(model: type[Model], values: dict[str, Any]) -> Model:
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise InvalidRequest(describe(error.errors())) from None


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`; if the client hangs up first, cancel it (its sentences leave the queue and the running batch)
    and raise ClientGone, whose answer nobody receives but the metrics count."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(hung_up(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        raise ClientGone()
    return task.result()


async def hung_up(request: Request) -> None:
    """Return when the client hangs up. Once a request's body is read, the server's receive() waits until the
    client is gone (or the answer is sent), then gives http.disconnect (ASGI): no polling."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


# The dependencies as routes declare them (FastAPI's Annotated style).
ServingPipeline = Annotated[Pipeline, Depends(pipeline)]
PipelineNow = Annotated[Pipeline, Depends(pipeline_now)]
Params = Annotated[dict[str, Any], Depends(params)]
DeepLParams = Annotated[dict[str, Any], Depends(deepl_params)]
