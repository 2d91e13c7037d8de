"""Declared symbol bounds over HTTP (``"bounds": {"N": [1, 4096]}``, the CLI's
``--bound N=1..4096``): the proofs range over them, bad ranges and names are 422s that
name the symbol, and requests that differ only in bounds never share a cached plan."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.json_form import kernel_to_json
from planner.ir.printer import print_kernel

SOFTMAX = load_example(builtin_examples_dir() / "softmax.py")
KERNEL = kernel_to_json(SOFTMAX.kernel)
BOUNDS = {"M": [1, 65536], "N": [1, 65536]}
ENDPOINTS = ("/v1/plan", "/v1/check", "/v1/lower", "/v1/compare")


def body_for(endpoint: str, **fields: Any) -> dict[str, Any]:
    """A request for ``endpoint`` on softmax (compare gets two variants)."""
    body: dict[str, Any] = {"kernel": KERNEL, **fields}
    if endpoint == "/v1/compare":
        body["variants"] = [{"target": "x86-avx2"}, {"target": "apple-m2"}]
    elif endpoint == "/v1/lower":
        body["emit"] = "loops"
    return body


def error_of(r: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()
    assert err["kind"] == kind, err
    assert err["request_id"] == r.headers["x-request-id"]
    return err


def view_int64(body: dict[str, Any]) -> dict[str, str]:
    """``{subject: status}`` of the int64 proofs of the view accesses (load %X, store %Y)."""
    found = {p["subject"]: p["status"] for p in body["proofs"]
             if p["name"] == "int64" and p["subject"].startswith(("tile.load", "tile.store"))}
    assert set(found) == {"tile.load %X", "tile.store %Y"}, body["proofs"]
    return found


def test_check_without_bounds_assumes_int64_of_the_views(client: httpx.Client) -> None:
    r = client.post("/v1/check", json={"kernel": KERNEL})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(view_int64(body).values()) == {"assumed"}
    assert body["ok"] is False  # an assumption is not a proof
    assumed = [p for p in body["proofs"] if p["status"] == "assumed"]
    assert all("storage exists" in p["detail"] for p in assumed)


def test_check_with_bounds_proves_int64_of_the_views(client: httpx.Client) -> None:
    r = client.post("/v1/check", json={"kernel": KERNEL, "bounds": BOUNDS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(view_int64(body).values()) == {"proved"}
    assert body["ok"] is True
    assert all(p["status"] == "proved" for p in body["proofs"])


def test_check_accepts_the_widest_bound(client: httpx.Client) -> None:
    r = client.post("/v1/check", json={"kernel": KERNEL, "bounds": {"M": [0, 2**63 - 1]}})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_empty_range_is_422_naming_the_symbol(client: httpx.Client, endpoint: str) -> None:
    r = client.post(endpoint, json=body_for(endpoint, bindings=SOFTMAX.bindings,
                                            bounds={"N": [5, 1]}))
    err = error_of(r, 422, "validation")
    assert "N = [5, 1]" in err["detail"] and "empty (5 > 1)" in err["detail"], err
    assert err["detail"].startswith("body.bounds:")


@pytest.mark.parametrize(("bound", "words"), [
    ([-1, 4], ["N = [-1, 4]", "lower end -1 is negative"]),
    ([0, 2**63], ["N = [0, 9223372036854775808]", "exceeds 2**63 - 1"]),
    ([1, 2, 3], ["N: expected [LO, HI], two integers, got [1, 2, 3]"]),
    ([7], ["N: expected [LO, HI]", "got [7]"]),
    ([True, 4], ["N: expected [LO, HI]", "got [True, 4]"]),
    ([1.5, 4], ["N: expected [LO, HI]", "got [1.5, 4]"]),
    (["1", 4], ["N: expected [LO, HI]", "got ['1', 4]"]),
    ("1..4", ["N: expected [LO, HI]", "got '1..4'"]),
])
def test_bad_bound_values_are_422(client: httpx.Client, bound: Any, words: list[str]) -> None:
    r = client.post("/v1/check", json={"kernel": KERNEL, "bounds": {"M": [1, 8], "N": bound}})
    message = error_of(r, 422, "validation")["detail"]
    for w in words:
        assert w in message, message
    assert "M" not in message.replace("body.bounds", ""), message  # M's range is fine


@pytest.mark.parametrize("name", ["", "1N", "N-1"])
def test_bad_bound_names_are_422(client: httpx.Client, name: str) -> None:
    r = client.post("/v1/check", json={"kernel": KERNEL, "bounds": {name: [1, 2]}})
    assert "bounds" in error_of(r, 422, "validation")["detail"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_unknown_symbol_is_422_naming_it_and_the_kernels(client: httpx.Client,
                                                        endpoint: str) -> None:
    r = client.post(endpoint, json=body_for(endpoint, bindings=SOFTMAX.bindings,
                                            bounds={"N": [1, 4096], "Q": [1, 2]}))
    err = error_of(r, 422, "validation")
    assert err["rule"] == "unknown-symbol"
    assert err["detail"] == ("bounds: 'Q' is not a symbol of kernel 'softmax' "
                              "(its symbols: M, N)"), err


def test_the_verifier_runs_before_the_bound_names_are_checked(client: httpx.Client) -> None:
    text = print_kernel(SOFTMAX.kernel).replace('"tile.reduce"', '"tile.reduce_all"', 1)
    r = client.post("/v1/check", json={"kernel": text, "bounds": {"Q": [1, 2]}})
    assert r.status_code == 422, r.text
    assert r.json()["kind"] != "validation", r.text


def test_plans_differing_only_in_bounds_do_not_share_a_cache_entry(
        client: httpx.Client) -> None:
    base = {"kernel": KERNEL, "bindings": {**SOFTMAX.bindings, "M": 4323}}
    narrow = {**base, "bounds": {"N": [1, 4096]}}
    wide = {**base, "bounds": {"N": [1, 65536]}}
    plain, first, second = (client.post("/v1/plan", json=b) for b in (base, narrow, wide))
    for r in (plain, first, second):
        assert r.status_code == 200, r.text
    assert [r.headers["x-plan-cache"] for r in (plain, first, second)] == ["miss"] * 3
    assert len({r.json()["content_hash"] for r in (plain, first, second)}) == 3
    again = client.post("/v1/plan", json={**wide, "bounds": {"N": [1, 65536]}})
    assert again.headers["x-plan-cache"] == "hit"
    assert again.json() == second.json()


def test_lower_and_compare_take_bounds(client: httpx.Client) -> None:
    bindings = {**SOFTMAX.bindings, "M": 4324}
    lowered = client.post("/v1/lower", json=body_for("/v1/lower", bindings=bindings,
                                                     bounds=BOUNDS))
    assert lowered.status_code == 200, lowered.text
    assert lowered.json()["code"].strip()
    # The lowered request planned with the bounds: the same /plan request is a cache hit.
    planned = client.post("/v1/plan", json={"kernel": KERNEL, "bindings": bindings,
                                            "bounds": BOUNDS})
    assert planned.headers["x-plan-cache"] == "hit"
    compared = client.post("/v1/compare", json=body_for("/v1/compare", bindings=bindings,
                                                        bounds=BOUNDS))
    assert compared.status_code == 200, compared.text


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_binding_outside_its_declared_bound_is_422(client: httpx.Client,
                                                      endpoint: str) -> None:
    n = SOFTMAX.bindings["N"]
    r = client.post(endpoint, json=body_for(endpoint, bindings=SOFTMAX.bindings,
                                            bounds={"N": [n + 1, n + 10]}))
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["rule"] == "bounds"
    assert f"binding N={n} is outside its declared bound N = {n + 1}..{n + 10}" in body["detail"]
