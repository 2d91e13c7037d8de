"""A real planner service on a loopback port, shared by the server tests.

The session fixture runs the app under uvicorn in a background thread on a free port
of 127.0.0.1, with a temporary writable catalog directory and a bearer token; tests
talk to it with httpx.  At teardown the app's metrics must show no 5xx response.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from server import Settings, create_app
from server.service import Service

TOKEN = "test-token-0123456789"


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


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = Settings(writable_catalog_dir=tmp_path_factory.mktemp("catalogs"), token=TOKEN,
                        max_body_bytes=256 * 1024, max_graph_ops=400, pool_workers=2,
                        default_time_limit_s=10.0, max_time_limit_s=20.0)
    with live_server(settings) as server:
        yield server
        errors = server.service.metrics.server_errors()
    assert errors == 0, f"the server answered {errors} request(s) with a 5xx status"


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client() as c:
        yield c


@pytest.fixture
def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def _catalog_text(name: str) -> str:
    from planner.catalog import BUILTIN_DIR

    text = (BUILTIN_DIR / "x86-avx2.yaml").read_text()
    return text.replace("name: x86-avx2", f"name: {name}", 1)


@pytest.fixture
def catalog_text() -> Callable[[str], str]:
    """``catalog_text(name)``: a built-in catalog's text renamed to ``name``."""
    return _catalog_text


@pytest.fixture
def start_server() -> Callable[..., AbstractContextManager[LiveServer]]:
    """``with start_server(settings) as other:`` a second live server for one test."""
    return live_server


@pytest.fixture
def writable_dir(live: LiveServer) -> Path:
    assert live.settings.writable_catalog_dir is not None
    return live.settings.writable_catalog_dir
