"""The engine process of `python -m service`: load the models, serve the HTTP workers, drain on SIGTERM.

Started by the supervisor (service.supervisor) with run(). Holding `lifeline` (the pipe's only writer) is what tells
the workers it is alive: when this process ends, however it ends, they read EOF.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from multiprocessing.connection import Connection

import uvloop

from core.model_cache import PullError
from service.engine.engine import Engine, ModelLoader, load_model
from service.engine.server import EngineServer
from service.metrics import Metrics
from service.processes import end_with_parent, entry_point, setup_logging
from service.settings import Settings

log = logging.getLogger(__name__)
LAST_ANSWERS_SECONDS = 0.5  # after the drain, for the last answers to leave the socket


def model_loader(name: str | None) -> ModelLoader:
    """The model loader named "module:function" (service.testing's stand-ins); ONNX Runtime's without a name."""
    return entry_point(name) if name else load_model


def run(settings: Settings, listener: socket.socket, lifeline: Connection, parent: int, loader: str | None = None
        ) -> None:
    """Serve the workers that connect to `listener` (service.channel)."""
    end_with_parent(parent)
    setup_logging(settings)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # the HTTP workers' loop too (uvicorn's)
        runner.run(serve(settings, listener, model_loader(loader)))


async def serve(settings: Settings, listener: socket.socket, loader: ModelLoader) -> None:
    engine = Engine(settings, Metrics(), loader)
    server = EngineServer(engine, listener)
    serving = asyncio.create_task(server.serve())
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await engine.start()
    except PullError:  # TRANSLATOR_MODELS_REQUIRED and a named model not made: the service does not start (logged)
        serving.cancel()
        server.close()
        raise
    except Exception as error:
        # A bad model folder: one line saying why, then unready (/ready 503) until stopped, since a restart would
        # fail the same way (a container restarting in a loop hides the reason); the traceback at debug level.
        log.critical("cannot load the models from %s: %s: %s; the service stays unready until it is stopped",
                     settings.model_dir, type(error).__name__, error)
        log.debug("the models' load failed", exc_info=True)
        await stopping.wait()
        serving.cancel()
        server.close()
        return
    server.loaded.set()
    log.info("engine serving %s", ", ".join(pair.name for pair in engine.pairs))
    await stopping.wait()
    await engine.stop(settings.drain_seconds)
    await asyncio.sleep(LAST_ANSWERS_SECONDS)
    serving.cancel()
    server.close()
