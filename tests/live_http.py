"""A real planner service on a free loopback port, for any test that talks HTTP.

:func:`live_server` runs the app under uvicorn in a background thread on a free port of
127.0.0.1; :func:`checked_client` also asserts at exit that the app answered no request
with a 5xx status.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import uvicorn
from fastapi import FastAPI

from planner.server import Settings, create_app
from planner.server.service import Service


@dataclass
class LiveServer:
    app: FastAPI
    base_url: str
    settings: Settings

    @property
    def service(self) -> Service:
        service: Service = self.app.state.service
        return service

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=120.0, **kwargs)  # type: ignore[arg-type]


@contextmanager
def live_server(settings: Settings, app: FastAPI | None = None) -> Iterator[LiveServer]:
    """Serve ``app`` (default ``create_app(settings)``) on a free 127.0.0.1 port."""
    app = app or create_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield LiveServer(app, f"http://127.0.0.1:{port}", settings)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextmanager
def checked_client(settings: Settings) -> Iterator[httpx.Client]:
    """A client of a live server; at exit the server must have answered no 5xx."""
    with live_server(settings) as live, live.client() as client:
        yield client
        errors = live.service.metrics.server_errors()
    assert errors == 0, f"the server answered {errors} request(s) with a 5xx status"
