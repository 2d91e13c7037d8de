"""A mutation fuzzer over the JSON IR and the text IR of the built-in examples (issue 15).

Each example is mutated at a random place with values a hostile client sends (NaN,
Infinity, numbers that overflow, integers of 25 to 6,000 digits, lone surrogates, deep
nesting, wrong types, swapped / dropped / duplicated lines, truncation) and posted to
/v1/plan, /v1/check or /v1/lower of a real server on loopback.  Every answer must be a
success or a 4xx, within the client's timeout; the server must have answered no 5xx.
Bounded: derandomized, a fixed number of examples, a short time limit per request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_http import LiveServer, live_server

from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.json_form import kernel_to_json
from planner.ir.printer import print_kernel
from planner.server import Settings

EXAMPLES = {name: load_example(builtin_examples_dir() / f"{name}.py")
            for name in ("softmax", "gemm", "layernorm")}
ENDPOINTS = ("/v1/plan", "/v1/check", "/v1/lower")
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TIMEOUT = httpx.Timeout(30.0, connect=10.0)

#: Raw JSON spellings the client's encoder cannot produce: they replace their marker.
RAW = {"__NAN__": "NaN", "__INF__": "Infinity", "__NINF__": "-Infinity", "__BIGF__": "1e999",
       "__I25__": "9" * 25, "__I4301__": "9" * 4301, "__I6000__": "-" + "7" * 6000}
HOSTILE_VALUES = st.sampled_from([
    *RAW, "\ud800", "x\udfff", "", "(" * 300 + "M" + ")" * 300, "1" + "0" * 400,
    2**63, -(2**63), 2**64 - 1, -1, 0, 10**18, 1.5, None, True, [], {}, [[[[[]]]]],
    "M" * 10_000, {"kind": "tile"}, ["M", "N", "K"] * 20])
HOSTILE_TOKENS = st.sampled_from([
    "9" * 25, "9" * 4301, "nan", "inf", "\ud800", "(((((", ")", "%", "^bb0", "<{", "}>",
    '"', "-1", "18446744073709551616", "0x10", "1e999", "\u00e9", "\x00"])


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _paths(child, (*prefix, i))


def _replace(value: Any, path: tuple[Any, ...], new: Any, drop: bool) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if drop and not rest:
            copy.pop(head, None)
        else:
            copy[head] = _replace(value[head], rest, new, drop)
        return copy
    copy_list = list(value)
    if drop and not rest:
        del copy_list[head]
    else:
        copy_list[head] = _replace(value[head], rest, new, drop)
    return copy_list


def _encode(body: dict[str, Any]) -> bytes:
    text = json.dumps(body)  # ensure_ascii: surrogates travel as \\udXXX escapes
    for marker, spelling in RAW.items():
        text = text.replace(json.dumps(marker), spelling)
    return text.encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    config = Settings(writable_catalog_dir=tmp, pool_workers=2, default_time_limit_s=2.0,
                      max_time_limit_s=4.0, max_queue=16)
    with live_server(config) as live:
        yield live
        errors = live.service.metrics.server_errors()
    assert errors == 0, f"the server answered {errors} request(s) with a 5xx status"


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as c:
        yield c


def _post(client: httpx.Client, endpoint: str, content: bytes) -> None:
    try:
        r = client.post(endpoint, content=content, headers={"Content-Type": "application/json"})
    except httpx.TimeoutException:  # pragma: no cover - the failure this test looks for
        pytest.fail(f"{endpoint} did not answer within {TIMEOUT.read} s")
    assert r.status_code < 500, r.text[:2000]
    if r.status_code >= 400:
        assert r.headers["content-type"].startswith("application/problem+json"), r.text[:500]


@FUZZ
@given(name=st.sampled_from(sorted(EXAMPLES)), endpoint=st.sampled_from(ENDPOINTS),
       data=st.data(), value=HOSTILE_VALUES, drop=st.booleans())
def test_json_ir_mutations_are_never_a_5xx(client: httpx.Client, name: str, endpoint: str,
                                           data: st.DataObject, value: Any, drop: bool) -> None:
    example = EXAMPLES[name]
    kernel = kernel_to_json(example.kernel)
    paths = list(_paths(kernel))[1:]
    path = data.draw(st.sampled_from(paths), label="path")
    mutated = _replace(kernel, path, value, drop)
    body = {"kernel": mutated, "bindings": example.bindings, "time_limit": 1}
    _post(client, endpoint, _encode(body))


def _mutate_text(text: str, how: str, i: int, j: int, token: str) -> str:
    lines = text.splitlines()
    i, j = i % len(lines), j % len(lines)
    if how == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif how == "drop":
        del lines[i]
    elif how == "duplicate":
        lines.insert(j, lines[i])
    elif how == "truncate":
        return text[: (i * 97 + j) % len(text)]
    else:  # replace the i-th token of line j with a hostile token
        tokens = re.split(r"(\W)", lines[j])
        if tokens:
            tokens[i % len(tokens)] = token
        lines[j] = "".join(tokens)
    return "\n".join(lines)


@FUZZ
@given(name=st.sampled_from(sorted(EXAMPLES)), endpoint=st.sampled_from(ENDPOINTS),
       how=st.sampled_from(["swap", "drop", "duplicate", "truncate", "token", "token"]),
       i=st.integers(0, 400), j=st.integers(0, 400), token=HOSTILE_TOKENS,
       locations=st.booleans())
def test_text_ir_mutations_are_never_a_5xx(client: httpx.Client, name: str, endpoint: str,
                                           how: str, i: int, j: int, token: str,
                                           locations: bool) -> None:
    example = EXAMPLES[name]
    text = _mutate_text(print_kernel(example.kernel, locations=locations), how, i, j, token)
    if not text:
        text = " "
    body = {"kernel": text, "bindings": example.bindings, "time_limit": 1}
    _post(client, endpoint, _encode(body))
