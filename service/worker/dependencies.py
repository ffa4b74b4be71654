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


async def admitted(request: Request, key_of: KeyOf, text: str, early: bool = False) -> dict[str, Any]:
    """The request's parameters: query string and body merged (service.worker.params), once its key (`key_of` reads
    it) and limits admit it (service.worker.access, counting the characters of its `text` parameter; client() then
    names its client). With `early`, the parameters come at once where the admission may settle beside the work
    (Access.start), and the route answers through once_admitted()."""

    async def admit(values: dict[str, Any]) -> None:
        used = characters(values.get(text))
        admission, may_start = state(request).access.start(request, key_of(request, values), used)
        request.state.admission = admission
        if not (early and may_start):
            await admission

    return await read_params(request, admit)


async def params(request: Request) -> dict[str, Any]:
    """A LibreTranslate request's parameters, admitted (its api_key, its q's characters)."""
    return await admitted(request, api_key, "q")


async def early_params(request: Request) -> dict[str, Any]:
    """params(), whose admission may settle beside the work (a route that answers through once_admitted())."""
    return await admitted(request, api_key, "q", early=True)


async def deepl_params(request: Request) -> dict[str, Any]:
    """A DeepL request's parameters, admitted (its key as DeepL sends it: deepl_key; its text's characters)."""
    return await admitted(request, deepl_key, "text")


async def early_deepl_params(request: Request) -> dict[str, Any]:
    """deepl_params(), whose admission may settle beside the work (a route that answers through once_admitted())."""
    return await admitted(request, deepl_key, "text", early=True)


def client(request: Request) -> Client:
    """Whose request this is, once admitted (after `params` or `deepl_params`; after `early_params` or
    `early_deepl_params`, within once_admitted's work: its admission is settled first)."""
    return request.state.admission.result()


async def once_admitted(request: Request, work: Callable[[], Awaitable[T]]) -> T:
    """work()'s answer once the request's admission holds. An admission still under way (an early one) is awaited
    beside the work: its refusal (or the store's failure) cancels the work and is the answer, also in place of the
    work's own error; work that needs the client awaits settled() first."""
    admission = request.state.admission
    if admission.done():  # settled before the work started: a refusal is the answer, and no work is done
        admission.result()
        return await work()
    task = asyncio.ensure_future(work())
    try:
        await asyncio.wait({task, admission}, return_when=asyncio.FIRST_COMPLETED)
        if admission.done() and admission.exception() is not None:
            raise admission.exception()
        try:
            answer = await task
        except Exception:
            await admission  # its refusal is the answer
            raise
        await admission
        return answer
    finally:
        task.cancel()  # only work that is not done: refused, or its client gone


async def settled(request: Request) -> Client:
    """The request's client, once its admission is settled (an early one may still be under way)."""
    return await request.state.admission


def glossary_owner(request: Request) -> str:
    """Whose glossaries and DeepL documents a request sees: its key's, or everyone's ("") when keys are off."""
    return client(request).owner if state(request).settings.keys_required else ""


def validated(model: type[Model], values: dict[str, Any]) -> Model:
    try:
        return model.model_validate(values)
    except ValidationError as error:
        raise InvalidRequest(describe(error.errors())) from None


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work` in this task; if the client hangs up first, cancel it (its sentences leave the queue and the
    running batch) and raise ClientGone, whose answer nobody receives but the metrics count."""
    this, watch, working = asyncio.current_task(), asyncio.ensure_future(hung_up(request)), True

    def hang_up(watched: asyncio.Future) -> None:
        if working and not watched.cancelled():
            this.cancel()

    watch.add_done_callback(hang_up)
    try:
        return await work
    except asyncio.CancelledError:
        if watch.done() and not watch.cancelled():  # cancelled for its client, who hung up
            this.uncancel()
            raise ClientGone() from None
        raise
    finally:
        working = False
        watch.cancel()


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
EarlyDeepLParams = Annotated[dict[str, Any], Depends(early_deepl_params)]
