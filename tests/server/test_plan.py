"""Planning endpoints over real HTTP: every example as JSON IR and as text IR, the plan
cache (and what the metrics say about it), compare, check and lower."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from planner.ir.examples import Example, list_examples, load_example
from planner.ir.json_form import kernel_to_json
from planner.ir.printer import print_kernel

EXAMPLES = list_examples()


@cache
def example(name: str) -> Example:
    return load_example(next(p for p in EXAMPLES if p.stem == name))


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """The value of one sample in /metrics (0 when absent)."""
    text = client.get("/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = "^" + re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.fixture(scope="module")
def plan_schema(live: Any) -> dict[str, Any]:
    with live.client() as c:
        schema: dict[str, Any] = c.get("/v1/schemas/plan").json()
    return schema


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_plan_every_example_as_json_ir(client: httpx.Client, path: Path,
                                       plan_schema: dict[str, Any]) -> None:
    ex = example(path.stem)
    r = client.post("/v1/plan", json={"kernel": kernel_to_json(ex.kernel),
                                      "bindings": ex.bindings})
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan["kernel"] == ex.kernel.name and plan["target"] == "x86-avx2"
    assert plan["status"] in ("optimal", "feasible")
    jsonschema.validate(plan, plan_schema)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_plan_every_example_as_text_ir(client: httpx.Client, path: Path) -> None:
    ex = example(path.stem)
    as_text = client.post("/v1/plan", json={"kernel": print_kernel(ex.kernel),
                                            "bindings": ex.bindings, "target": "apple-m2"})
    assert as_text.status_code == 200, as_text.text
    as_json = client.post("/v1/plan", json={"kernel": kernel_to_json(ex.kernel),
                                            "bindings": ex.bindings, "target": "apple-m2"})
    assert as_text.json()["objective"] == as_json.json()["objective"]
    assert as_text.json()["content_hash"] == as_json.json()["content_hash"]


def test_repeat_request_hits_the_cache(client: httpx.Client) -> None:
    ex = example("gemm")
    body = {"kernel": kernel_to_json(ex.kernel), "bindings": {**ex.bindings, "M": 4321},
            "policy": "expensive-only"}
    hits, misses = (metric(client, "planner_plan_cache_hits_total"),
                    metric(client, "planner_plan_cache_misses_total"))
    first = client.post("/v1/plan", json=body)
    second = client.post("/v1/plan", json=body)
    assert first.status_code == second.status_code == 200, first.text
    assert (first.headers["x-plan-cache"], second.headers["x-plan-cache"]) == ("miss", "hit")
    assert first.json() == second.json()
    assert metric(client, "planner_plan_cache_hits_total") == hits + 1
    assert metric(client, "planner_plan_cache_misses_total") == misses + 1
    assert metric(client, "planner_plan_latency_seconds_count", endpoint="plan", cache="hit") >= 1
    ratio = metric(client, "planner_plan_cache_hit_ratio")
    assert 0.0 < ratio < 1.0


def test_catalog_write_invalidates_cached_plans(client: httpx.Client, auth: dict[str, str],
                                                catalog_text: Any) -> None:
    name = "cache-cpu"
    created = client.put(f"/v1/catalogs/{name}", content=catalog_text(name),
                         headers={**auth, "If-None-Match": "*"})
    assert created.status_code == 201, created.text
    ex = example("softmax")
    body = {"kernel": kernel_to_json(ex.kernel), "bindings": ex.bindings, "target": name}
    assert client.post("/v1/plan", json=body).headers["x-plan-cache"] == "miss"
    assert client.post("/v1/plan", json=body).headers["x-plan-cache"] == "hit"
    faster = catalog_text(name).replace("clock_ghz: 2.9", "clock_ghz: 3.5")
    assert faster != catalog_text(name)
    edited = client.put(f"/v1/catalogs/{name}", content=faster,
                        headers={**auth, "If-Match": created.headers["etag"]})
    assert edited.status_code == 200 and edited.json()["dropped_plans"] == 1
    replanned = client.post("/v1/plan", json=body)
    assert replanned.headers["x-plan-cache"] == "miss"
    assert replanned.status_code == 200, replanned.text


def test_infeasible_plan_is_422_with_explanation(client: httpx.Client) -> None:
    ex = example("softmax")
    r = client.post("/v1/plan", json={"kernel": kernel_to_json(ex.kernel),
                                      "bindings": ex.bindings, "baseline": "all-virtual"})
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["kind"] == "infeasible"
    assert err["explanation"] and any("capacity" in line for line in err["explanation"])
    assert err["detail"].startswith("no plan satisfies the constraints")


def test_compare_targets_and_policies(client: httpx.Client) -> None:
    ex = example("softmax")
    r = client.post("/v1/compare", json={
        "kernel": kernel_to_json(ex.kernel), "bindings": ex.bindings,
        "variants": [{"target": "x86-avx2"}, {"target": "apple-m2"},
                     {"target": "x86-avx2", "policy": "expensive-only", "label": "cheap"}]})
    assert r.status_code == 200, r.text
    text = r.text
    for label in ("x86-avx2/default", "apple-m2/default", "cheap"):
        assert label in text


def test_check_runs_verifier_and_proofs(client: httpx.Client) -> None:
    ex = example("manual_gemm")
    r = client.post("/v1/check", json={"kernel": kernel_to_json(ex.kernel),
                                       "bindings": ex.bindings})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is True and body["kernel"] == "manual_gemm"
    assert {p["name"] for p in body["proofs"]} >= {"can_access", "capacity"}
    assert all(p["status"] == "proved" for p in body["proofs"])


@pytest.mark.parametrize("emit", ["loops", "llvm"])
def test_lower_emits_code(client: httpx.Client, emit: str) -> None:
    ex = example("softmax")
    r = client.post("/v1/lower", json={"kernel": kernel_to_json(ex.kernel),
                                       "bindings": ex.bindings, "emit": emit})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["emit"] == emit and body["code"].strip()
    assert body["plan"]["kernel"] == "softmax"


def test_lower_msl_is_unsupported_until_a_metal_emitter_exists(client: httpx.Client) -> None:
    from planner.server.service import EMITTERS

    ex = example("softmax")
    r = client.post("/v1/lower", json={"kernel": kernel_to_json(ex.kernel),
                                       "bindings": ex.bindings, "target": "apple-m2",
                                       "emit": "msl"})
    if "msl" in EMITTERS:
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400
        assert r.json()["kind"] == "unsupported"


def test_plan_for_the_host_target(client: httpx.Client) -> None:
    """``"target": "host"`` plans for the CPU catalog that matches this machine (AVX-512
    catalog only where /proc/cpuinfo lists its features)."""
    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    avx512 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= flags
    want = "x86-avx512" if avx512 else "x86-avx2"
    ex = example("softmax")
    r = client.post("/v1/plan", json={"kernel": kernel_to_json(ex.kernel),
                                      "bindings": ex.bindings, "target": "host"})
    assert r.status_code == 200, r.text
    assert r.json()["target"] == want
