"""Requests a hostile client sends (issue 15): each one is a 4xx or a success, answered
promptly, never a 5xx, a hang or a leaked worker slot; over real HTTP on loopback.

One server per module (``max_graph_ops`` at its default, so the long-chain kernels get
past the op limit), every request with a client timeout.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench_modules import load_bench
from live_http import LiveServer, live_server

from planner.catalog import BUILTIN_DIR
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.json_form import kernel_to_json
from planner.ir.printer import print_kernel
from planner.server import Settings
from planner.server.cache import PlanKey
from planner.server.service import Service
from planner.server.workers import JobFailed

SOFTMAX = load_example(builtin_examples_dir() / "softmax.py")
GEMM = load_example(builtin_examples_dir() / "gemm.py")
KERNEL = kernel_to_json(SOFTMAX.kernel)
BINDINGS = SOFTMAX.bindings
CATALOG = (BUILTIN_DIR / "x86-avx2.yaml").read_text()
TIMEOUT = httpx.Timeout(60.0, connect=10.0)


def chain(n: int) -> dict[str, Any]:
    """Softmax with its ``exp`` replaced by ``n`` chained ``exp`` ops (``bench/server.py``'s)."""
    return load_bench("server").chained(KERNEL, n)


def settings(tmp: Path, **fields: Any) -> Settings:
    base: dict[str, Any] = {"writable_catalog_dir": tmp / "user", "catalog_dirs": (tmp / "extra",),
                            "pool_workers": 2, "max_queue": 8, "default_time_limit_s": 5.0,
                            "max_time_limit_s": 10.0}
    (tmp / "extra").mkdir(parents=True, exist_ok=True)
    return Settings(**{**base, **fields})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("hostile")
    config = settings(tmp)
    broken = CATALOG.replace("name: x86-avx2", "name: broken", 1) + "bogus_key: 1\n"
    (tmp / "extra" / "broken.yaml").write_text(broken)
    with live_server(config) as live:
        yield live
        errors = live.service.metrics.server_errors()
    assert errors == 0, f"the server answered {errors} request(s) with a 5xx status"


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as c:
        yield c


def problem(r: httpx.Response, status: int, rule: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text[:2000]
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["request_id"] == r.headers["x-request-id"]
    if rule is not None:
        assert body["rule"] == rule, body
    return body


def raw(kernel_json: str, **extra: Any) -> bytes:
    rest = "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in extra.items())
    return f'{{"kernel": {kernel_json}{rest}}}'.encode()


def post_raw(client: httpx.Client, path: str, body: bytes) -> httpx.Response:
    return client.post(path, content=body, headers={"Content-Type": "application/json"})


# -- boundary validation ----------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize("path", ["/v1/plan", "/v1/check"])
def test_non_finite_numbers_are_422_naming_the_json_path(client: httpx.Client, path: str,
                                                         spelling: str) -> None:
    text = json.dumps(KERNEL).replace('"fill": 0.0', f'"fill": {spelling}', 1)
    body = problem(post_raw(client, path, raw(text, bindings=BINDINGS)), 422,
                   "non-finite-number")
    assert body["detail"].startswith("body.kernel.body.ops[0].regions[0].ops[0].attrs.fill:")


@pytest.mark.parametrize("where", ["name", "key", "text"])
def test_lone_surrogates_are_422(client: httpx.Client, where: str) -> None:
    if where == "text":
        text = json.dumps(print_kernel(SOFTMAX.kernel).replace('"softmax"', '"soft\ud800"'))
    else:
        kernel = copy.deepcopy(KERNEL)
        if where == "name":
            kernel["name"] = "soft\udc00max"
        else:
            kernel["attrs\ud83d"] = 1
        text = json.dumps(kernel)  # ensure_ascii: the surrogate travels as \\udXXX
    body = problem(post_raw(client, "/v1/plan", raw(text, bindings=BINDINGS)), 422,
                   "lone-surrogate")
    assert body["detail"].startswith("body.kernel")


@pytest.mark.parametrize("digits", [25, 4301, 6000])
def test_huge_json_integers_are_422(client: httpx.Client, digits: int) -> None:
    big = "9" * digits
    text = json.dumps(KERNEL).replace('"shape": ["M", "N"]', f'"shape": [{big}, "N"]', 1)
    body = problem(post_raw(client, "/v1/plan", raw(text)), 422, "integer-too-large")
    assert body["detail"].startswith("body.kernel.params[0].type.shape[0]:")
    binding = f'{{"kernel": {json.dumps(KERNEL)}, "bindings": {{"M": {big}}}}}'.encode()
    problem(post_raw(client, "/v1/check", binding), 422, "integer-too-large")


@pytest.mark.parametrize("digits", [400, 4301, 6000])
def test_huge_integers_in_expressions_and_text_ir_are_4xx(client: httpx.Client,
                                                          digits: int) -> None:
    big = "1" + "0" * (digits - 1)
    kernel = copy.deepcopy(KERNEL)
    kernel["body"]["ops"][0]["attrs"]["axes"][0]["extent"] = f"ceildiv(M, 4) * {big}"
    r = client.post("/v1/plan", json={"kernel": kernel, "bindings": BINDINGS})
    assert r.status_code == 422, r.text[:500]  # 400 digits: OverflowError in the cost model
    text = print_kernel(SOFTMAX.kernel).replace("[M, N]", f"[{big}, N]", 1)
    for path in ("/v1/plan", "/v1/lower", "/v1/check"):
        r = client.post(path, json={"kernel": text, "bindings": BINDINGS})
        body = problem(r, 422, "integer-too-large")
        assert body["location"]["line"] == 2


@pytest.mark.parametrize("digits", [30, 4301, 6000])
@pytest.mark.parametrize("media", ["application/yaml", "application/json"])
def test_huge_catalog_capacity_is_422_on_validate(client: httpx.Client, digits: int,
                                                  media: str) -> None:
    big = "9" * digits
    if media == "application/yaml":
        content = re.sub(r"capacity: [^\n]+", f"capacity: {big}", CATALOG, count=1).encode()
        body = problem(client.post("/v1/catalogs/validate", content=content,
                                   headers={"Content-Type": media}), 422, "integer-too-large")
        assert body["kind"] == "catalog"
    else:
        content = f'{{"name": "x", "capacity": {big}}}'.encode()
        problem(client.post("/v1/catalogs/validate", content=content,
                            headers={"Content-Type": media}), 422, "integer-too-large")


@pytest.mark.parametrize("text", ["a: " + "[" * 3000 + "]" * 3000,
                                  "a: " + "{b: " * 2000 + "1" + "}" * 2000,
                                  "".join("  " * i + "a:\n" for i in range(100))])
def test_deeply_nested_yaml_is_422(client: httpx.Client, text: str) -> None:
    body = problem(client.post("/v1/catalogs/validate", content=text.encode(),
                               headers={"Content-Type": "application/yaml"}), 422, "yaml-depth")
    assert body["kind"] == "catalog"


def test_deeply_nested_json_value_is_422_naming_the_path(client: httpx.Client) -> None:
    kernel = copy.deepcopy(KERNEL)
    kernel["loc"] = json.loads("[" * 600 + "]" * 600)
    r = client.post("/v1/plan", json={"kernel": kernel})
    assert problem(r, 422, "nesting-too-deep")["detail"].startswith("body.kernel.loc")


# -- exceptions user input provokes, and the job that fails -----------------------------


def test_2500_chained_exps_are_a_4xx_or_a_plan(client: httpx.Client) -> None:
    start = time.monotonic()
    r = client.post("/v1/plan", json={"kernel": chain(2500), "bindings": BINDINGS,
                                      "time_limit": 5})
    assert r.status_code in (200, 413, 422), r.text[:1000]
    assert time.monotonic() - start < 20  # the time limit bounds the whole request


def test_gemm_with_two_lines_swapped_is_answered_promptly_on_lower(
        client: httpx.Client) -> None:
    lines = print_kernel(GEMM.kernel).splitlines()
    for i in range(1, len(lines) - 2):
        swapped = [*lines[:i], lines[i + 1], lines[i], *lines[i + 2:]]
        r = client.post("/v1/lower", json={"kernel": "\n".join(swapped), "emit": "loops",
                                           "bindings": GEMM.bindings, "time_limit": 5},
                        timeout=30)
        assert r.status_code < 500, (i, r.text[:1000])


def test_a_job_that_fails_releases_its_slot_and_leaves_no_pending_entry(
        tmp_path: Path) -> None:
    service = Service(settings(tmp_path, pool_workers=1, max_queue=0))

    async def scenario() -> None:
        key = PlanKey("x86-avx2", "d" * 64)
        for _ in range(2):  # StopIteration cannot travel through a Future: it must not hang
            with pytest.raises(JobFailed, match="StopIteration"):
                await asyncio.wait_for(service.cache.get_or_compute(
                    key, lambda: service.run(next, iter(()))), 30)
            assert service.workers.busy == 0 and service.in_flight == 0
            assert not service.cache._inflight and len(service.cache) == 0
        assert await asyncio.wait_for(service.run(sum, [1, 2]), 30) == 3

    try:
        asyncio.run(scenario())
    finally:
        service.close()


# -- bounded answers ---------------------------------------------------------------------


def test_validate_diagnostics_are_capped_with_a_count(client: httpx.Client) -> None:
    content = ("name: x\n" + "".join(f"k{i}: 1\n" for i in range(5000))).encode()
    r = client.post("/v1/catalogs/validate", content=content,
                    headers={"Content-Type": "application/yaml"})
    body = problem(r, 422)
    assert len(r.content) < 200_000
    assert len(body["diagnostics"]) == 200 and body["omitted"] > 4800
    content = ("name: x\n" + "".join(f"k{i}: 1\n" for i in range(60000))).encode()
    start = time.monotonic()
    r = client.post("/v1/catalogs/validate", content=content,
                    headers={"Content-Type": "application/yaml"})
    assert problem(r, 422, "yaml-size") and time.monotonic() - start < 5


def test_on_disk_catalog_errors_name_the_catalog_not_the_server_path(
        client: httpx.Client, server: LiveServer) -> None:
    r = client.post("/v1/plan", json={"kernel": KERNEL, "target": "broken"})
    assert r.status_code == 422, r.text
    extra = str(server.settings.catalog_dirs[0].resolve())
    assert extra not in r.text and str(Path(extra).parent) not in r.text
    assert "broken.yaml" in r.text


# -- bounded work, over real HTTP -------------------------------------------------------


def _wait_for(condition: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_the_time_limit_bounds_the_whole_request(client: httpx.Client) -> None:
    start = time.monotonic()
    r = client.post("/v1/plan", json={"kernel": chain(400), "bindings": BINDINGS,
                                      "time_limit": 1})
    elapsed = time.monotonic() - start
    if r.status_code != 200:  # a fast machine may plan it in a second
        assert problem(r, 422, "time-limit")["kind"] == "timeout"
    assert elapsed < 4, elapsed


def test_a_full_queue_is_503_with_retry_after(tmp_path: Path) -> None:
    with live_server(settings(tmp_path, pool_workers=1, max_queue=1)) as live:
        service = live.service
        slow = {"kernel": chain(400), "bindings": BINDINGS, "time_limit": 6}
        answers: list[httpx.Response] = []

        def send(body: dict[str, Any]) -> None:
            with httpx.Client(base_url=live.base_url, timeout=TIMEOUT) as c:
                answers.append(c.post("/v1/plan", json=body))

        first = threading.Thread(target=send, args=(slow,))
        first.start()
        _wait_for(lambda: service.workers.busy == 1, 10)
        second = threading.Thread(target=send, args=({**slow, "bindings": {"M": 7, "N": 9}},))
        second.start()
        _wait_for(lambda: service.workers.queued == 1, 10)
        with httpx.Client(base_url=live.base_url, timeout=TIMEOUT) as c:
            start = time.monotonic()
            r = c.post("/v1/plan", json={"kernel": KERNEL, "bindings": {"M": 3, "N": 5}})
            assert time.monotonic() - start < 2
            body = problem(r, 503)
            assert body["kind"] == "overloaded" and int(r.headers["retry-after"]) >= 1
            assert c.get("/healthz").status_code == 200  # the rest of the server answers
        first.join(30)
        second.join(30)
        assert all(a.status_code in (200, 422) for a in answers), [a.text[:300] for a in answers]
        assert service.workers.busy == 0 and service.workers.queued == 0


def test_a_client_that_hangs_up_stops_its_job(tmp_path: Path) -> None:
    with live_server(settings(tmp_path, pool_workers=1)) as live:
        service = live.service
        host, port = live.base_url.removeprefix("http://").split(":")
        payload = json.dumps({"kernel": chain(400), "bindings": BINDINGS,
                              "time_limit": 10}).encode()
        head = (f"POST /v1/plan HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
                f"\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(head + payload)
            _wait_for(lambda: service.workers.busy == 1, 10)
        start = time.monotonic()
        _wait_for(lambda: service.workers.busy == 0, 5)  # killed, not run to its limit
        assert time.monotonic() - start < 5
        assert service.workers.killed == 1 and not service.cache._inflight
        with httpx.Client(base_url=live.base_url, timeout=TIMEOUT) as c:
            r = c.post("/v1/plan", json={"kernel": KERNEL, "bindings": BINDINGS})
            assert r.status_code == 200, r.text[:500]
            metrics = c.get("/metrics").text
        assert 'route="/v1/plan",status="499"} 1' in metrics
        assert service.metrics.server_errors() == 0


def test_worker_limits_end_the_job_not_the_server() -> None:
    from planner.errors import PlannerError
    from planner.server.workers import WorkerPool

    pool = WorkerPool(1, 0, memory_bytes=3 << 30, cpu_seconds=1.0)

    async def scenario() -> None:
        with pytest.raises(PlannerError) as memory:  # 8 GiB: beyond RLIMIT_AS
            await asyncio.wait_for(pool.call(bytearray, (8 << 30,)), 120)
        assert memory.value.kind == "too-large" and memory.value.diagnostics[0].rule == \
            "memory-limit"
        with pytest.raises(PlannerError) as cpu:  # about a minute of CPU, stopped after 1 s
            await asyncio.wait_for(pool.call(sum, (range(10**10),)), 120)
        assert cpu.value.kind == "timeout" and cpu.value.diagnostics[0].rule == "cpu-limit"
        assert await asyncio.wait_for(pool.call(sum, ([1, 2],)), 120) == 3  # a fresh worker

    try:
        asyncio.run(scenario())
    finally:
        pool.close()
