"""An HTTP worker process of `python -m service`: the app in front of a RemoteEngine, served by uvicorn on the
listening socket that every worker shares. Started by the supervisor (service.supervisor) with run()."""

from __future__ import annotations

import socket
from multiprocessing.connection import Connection

from service.processes import end_with_parent, setup_logging
from service.settings import Settings
from service.worker.app import create_app
from service.worker.remote import RemoteEngine
from service.worker.server import DrainingServer


def run(
    settings: Settings, listener: socket.socket, engine_path: str, lifeline: Connection, parent: int
) -> None:
    end_with_parent(parent)
    setup_logging(settings)
    app = create_app(settings, RemoteEngine(engine_path, lifeline, settings), main_pid=parent)
    DrainingServer.for_app(app, settings).run(sockets=[listener])
