"""Connection limits under uvicorn as ``planner serve`` configures it
(:func:`planner.server.protocol.uvicorn_options`): request heads that never finish are
closed after ``head_timeout_s``, a body that trickles in is 408 after ``body_timeout_s``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from planner.server import Settings, create_app
from planner.server.protocol import uvicorn_options


@contextmanager
def serving(settings: Settings) -> Iterator[tuple[str, int]]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning",
                                           **uvicorn_options(settings)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    try:
        yield "127.0.0.1", port
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def _closed_by_peer(conn: socket.socket) -> bool:
    try:
        return conn.recv(4096) == b""
    except (ConnectionResetError, TimeoutError):
        return False


def test_unfinished_heads_are_closed_and_the_server_keeps_answering(tmp_path: Path) -> None:
    settings = Settings(writable_catalog_dir=tmp_path, head_timeout_s=1.0, pool_workers=1)
    with serving(settings) as (host, port):
        conns = []
        for _ in range(60):
            conn = socket.create_connection((host, port), timeout=5)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            conns.append(conn)
        start = time.monotonic()
        with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as client:
            assert client.get("/healthz").status_code == 200
        closed = [_closed_by_peer(c) for c in conns]  # recv blocks until the server closes
        assert all(closed), closed.count(False)
        assert time.monotonic() - start < 8
        for conn in conns:
            conn.close()


def test_a_body_that_trickles_in_is_408(tmp_path: Path) -> None:
    settings = Settings(writable_catalog_dir=tmp_path, body_timeout_s=1.0, pool_workers=1)
    with serving(settings) as (host, port), \
            socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(b"POST /v1/plan HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100\r\n\r\n{\"kernel\"")
        start = time.monotonic()
        answer = conn.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"application/problem+json" in answer
        assert time.monotonic() - start < 5


def test_a_model_over_the_size_limit_is_413_before_it_is_built() -> None:
    """gemm (6 edges) plans; softmax (10 edges) is over a limit of 100 and refused with its
    figure; the count of edges in the message matches the plan's edges at a larger limit."""
    from live_http import live_server

    from planner.ir.examples import list_examples, load_example
    from planner.ir.printer import print_kernel

    examples = {p.stem: load_example(p) for p in list_examples()}

    def body(name: str) -> dict[str, object]:
        ex = examples[name]
        return {"kernel": print_kernel(ex.kernel), "target": "x86-avx2",
                "bindings": ex.bindings}

    with live_server(Settings(port=0, max_model_size=100, pool_workers=1)) as live, \
            live.client() as client:
        ok = client.post("/v1/plan", json=body("gemm"))
        assert ok.status_code == 200, ok.text
        refused = client.post("/v1/plan", json=body("softmax"))
        assert refused.status_code == 413, refused.text
        problem = refused.json()
        assert problem["kind"] == "too-large" and problem["rule"] == "model-size"
        assert "(limit 100)" in problem["detail"] and " 10 edges" in problem["detail"]
        assert live.service.metrics.server_errors() == 0
    with live_server(Settings(port=0, pool_workers=1)) as live, \
            live.client() as client:
        planned = client.post("/v1/plan", json=body("softmax"))
        assert planned.status_code == 200 and len(planned.json()["edges"]) == 10
