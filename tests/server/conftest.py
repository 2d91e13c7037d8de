"""A real planner service on a loopback port, shared by the server tests.

The session fixture runs the app under uvicorn in a background thread on a free port
of 127.0.0.1, with a temporary writable catalog directory and a bearer token; tests
talk to it with httpx.  At teardown the app's metrics must show no 5xx response.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from live_http import LiveServer, live_server

from planner.server import Settings

TOKEN = "test-token-0123456789"


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
