"""One process serves everything (`python -m service --http-workers 0`): the engine and the app in one process, as
before HTTP workers, and as tests and small deployments may want it."""

from __future__ import annotations

from fastapi import FastAPI

from service.engine.engine import Engine
from service.metrics import Metrics
from service.settings import Settings
from service.worker.app import create_app
from service.worker.server import DrainingServer


def solo_app(settings: Settings) -> FastAPI:
    """The app with the models in this process (they load in the background once it starts)."""
    metrics = Metrics()
    return create_app(settings, Engine(settings, metrics), metrics)


def run(settings: Settings) -> None:
    DrainingServer.for_app(solo_app(settings), settings).run()
