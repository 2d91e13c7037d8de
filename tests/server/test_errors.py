"""Every bad request gets a 4xx with the JSON error body; none reaches a 5xx."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.json_form import kernel_to_json
from planner.ir.printer import print_kernel

SOFTMAX = load_example(builtin_examples_dir() / "softmax.py")
KERNEL = kernel_to_json(SOFTMAX.kernel)
BINDINGS = SOFTMAX.bindings


def error_of(r: httpx.Response, status: int, kind: str | None = None) -> dict[str, Any]:
    """The problem details of ``r`` (RFC 9457), which must have ``status`` (and ``kind``)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    err: dict[str, Any] = r.json()
    assert set(err) >= {"type", "title", "status", "detail", "instance", "kind", "rule",
                        "location", "diagnostics", "request_id"}
    assert err["status"] == status and err["instance"] == r.request.url.path
    assert err["request_id"] == r.headers["x-request-id"]
    if kind is not None:
        assert err["kind"] == kind, err
    return err


def test_body_over_the_limit_by_content_length(client: httpx.Client, live: Any) -> None:
    big = b" " * (live.settings.max_body_bytes + 1)
    r = client.post("/v1/plan", content=big, headers={"Content-Type": "application/json"})
    assert "limit" in error_of(r, 413, "too-large")["detail"]


def test_streamed_body_over_the_limit(client: httpx.Client, live: Any) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(live.settings.max_body_bytes // 8192 + 2):
            yield b" " * 8192

    r = client.post("/v1/plan", content=chunks(), headers={"Content-Type": "application/json"})
    assert "transfer-encoding" not in r.request.headers or \
        r.request.headers["transfer-encoding"] == "chunked"
    error_of(r, 413, "too-large")


def _long_chain(n: int) -> dict[str, Any]:
    """Softmax with ``n`` extra exp ops chained after its exp (JSON IR)."""
    kernel = copy.deepcopy(KERNEL)
    ops = kernel["body"]["ops"][0]["regions"][0]["ops"]
    exp = next(i for i, op in enumerate(ops) if op["attrs"].get("fn") == "exp")
    chain = []
    prev = ops[exp]["results"][0]["id"]
    for i in range(n):
        op = copy.deepcopy(ops[exp])
        op["operands"] = [prev]
        op["results"][0]["id"] = prev = f"chain{i}"
        op["results"][0].pop("name", None)
        chain.append(op)
    ops[exp + 1:exp + 1] = chain
    return kernel


def test_graph_over_the_op_limit(client: httpx.Client, live: Any) -> None:
    within = client.post("/v1/plan", json={"kernel": _long_chain(10), "bindings": BINDINGS})
    assert within.status_code == 200, within.text
    too_big = _long_chain(live.settings.max_graph_ops + 1)
    err = error_of(client.post("/v1/plan", json={"kernel": too_big, "bindings": BINDINGS}),
                   413, "too-large")
    assert f"more than {live.settings.max_graph_ops} ops" in err["detail"]


@pytest.mark.parametrize(("content", "status", "kind"), [
    (b"{not json", 400, "bad-json"),
    (b"[1, 2", 400, "bad-json"),
    (b"[" * 100_000 + b"]" * 100_000, 400, None),
    (b'{"kernel": 5}', 422, "validation"),
    (b'{"target": "x86-avx2"}', 422, "validation"),
    (b"null", 422, "validation"),
    (b'"kernel"', 422, "validation"),
    (b'{"kernel": {}, "python": "import os"}', 422, "validation"),
    (b'{"kernel": {}, "bindings": {"M": -1}}', 422, "validation"),
    (b'{"kernel": {}, "bindings": {"1M": 3}}', 422, "validation"),
    (b'{"kernel": {}, "policy": "fastest"}', 422, "validation"),
    (b'{"kernel": {}, "time_limit": 0}', 422, "validation"),
    (b'{"kernel": {}, "target": "../../etc/passwd"}', 422, "validation"),
])
def test_malformed_requests(client: httpx.Client, content: bytes, status: int,
                            kind: str | None) -> None:
    r = client.post("/v1/plan", content=content, headers={"Content-Type": "application/json"})
    assert error_of(r, status, kind)["detail"]


def test_malformed_kernels_are_422_with_a_location(client: httpx.Client) -> None:
    r = client.post("/v1/plan", json={"kernel": {"name": "k", "params": [], "body": 3}})
    assert error_of(r, 422, "invalid-ir")["detail"].startswith("$.body")
    source = "import os\nos.system('echo pwned')\n"  # Python is text IR that does not parse
    err = error_of(client.post("/v1/plan", json={"kernel": source}), 422, "parse")
    assert err["location"] == {"file": "<request>", "line": 1, "col": 1}
    text = print_kernel(SOFTMAX.kernel).replace('"tile.reduce"', '"tile.reduce_all"', 1)
    err = error_of(client.post("/v1/plan", json={"kernel": text, "bindings": BINDINGS}), 422)
    assert err["location"]["file"] == "<request>" and err["location"]["line"] > 1


def test_deeply_nested_expressions_are_a_located_422(client: httpx.Client) -> None:
    kernel = copy.deepcopy(KERNEL)
    kernel["params"][0]["type"]["shape"][0] = "(" * 2000 + "M" + ")" * 2000
    err = error_of(client.post("/v1/plan", json={"kernel": kernel, "bindings": BINDINGS}), 422)
    assert "nested deeper than 64 levels" in err["detail"]
    text = print_kernel(SOFTMAX.kernel).replace("[M, N]", "[" + "(" * 2000 + "M" + ")" * 2000
                                                + ", N]", 1)
    err = error_of(client.post("/v1/plan", json={"kernel": text, "bindings": BINDINGS}), 422,
                   "parse")
    assert "nested deeper than 64 levels" in err["detail"]


@pytest.mark.parametrize(("strides", "kind", "words"), [
    ([1, 1], "invalid-ir", "is not injective"),  # rows overlap
    ([-16, 1], "invalid-ir", "strides must be >= 0"),
])
def test_illegal_layout_is_422(client: httpx.Client, strides: list[int], kind: str,
                               words: str) -> None:
    kernel = kernel_to_json(load_example(SOFTMAX.path.parent / "manual_gemm.py").kernel)
    ops = kernel["body"]["ops"][0]["regions"][0]["ops"]
    alloc = next(op for op in ops if op["op"] == "memory.alloc")
    alloc["attrs"]["layout"]["strides"] = strides
    r = client.post("/v1/plan", json={"kernel": kernel, "bindings": {"M": 64, "N": 64, "K": 32}})
    err = error_of(r, 422, kind)
    assert words in err["detail"] and err["diagnostics"]


def test_unknown_target_is_404_with_a_suggestion(client: httpx.Client) -> None:
    r = client.post("/v1/plan", json={"kernel": KERNEL, "bindings": BINDINGS,
                                      "target": "x86-avx"})
    assert "did you mean 'x86-avx2'" in error_of(r, 404, "unknown-target")["detail"]


def test_unbound_symbols_are_422(client: httpx.Client) -> None:
    r = client.post("/v1/plan", json={"kernel": KERNEL})
    error_of(r, 422)


def test_unknown_route_and_method(client: httpx.Client) -> None:
    error_of(client.get("/v2/plan"), 404, "not-found")
    r = client.get("/v1/plan")
    error_of(r, 405, "method-not-allowed")
    assert r.headers["allow"] == "POST"
    r = client.post("/v1/catalogs/x86-avx2")
    assert set(error_of(r, 405)["kind"].split()) == {"method-not-allowed"}
    assert r.headers["allow"] == "DELETE, GET, PUT"


def test_wrong_content_type_is_a_4xx(client: httpx.Client) -> None:
    r = client.post("/v1/plan", content=b'{"kernel": {}}', headers={"Content-Type": "text/plain"})
    assert 400 <= r.status_code < 500
    error_of(r, r.status_code)


def test_refuted_proof_is_422_but_compare_shows_the_plan(client: httpx.Client) -> None:
    # a Memory of class tensor, which npu-systolic's catalog does not define
    tensor = load_example(Path(__file__).resolve().parents[1] / "solve" / "gpu_kernels"
                          / "tensor_acc_gemm.py")
    kernel, bindings = kernel_to_json(tensor.kernel), tensor.bindings
    body = {"kernel": kernel, "bindings": bindings, "target": "npu-systolic"}
    err = error_of(client.post("/v1/plan", json=body), 422, "proof")
    assert err["rule"] == "S5" and "can_access refuted" in err["detail"]
    assert err["location"]["line"] > 0
    r = client.post("/v1/compare", json={"kernel": kernel, "bindings": bindings, "variants": [
        {"target": "x86-avx2"}, {"target": "npu-systolic"}]})
    assert r.status_code == 200, r.text
    npu = r.json()["plans"][1]
    assert any(p["status"] == "refuted" for p in npu["proofs"])


def test_compare_needs_two_variants(client: httpx.Client) -> None:
    r = client.post("/v1/compare", json={"kernel": KERNEL, "bindings": BINDINGS,
                                         "variants": [{"target": "x86-avx2"}]})
    error_of(r, 422, "validation")
