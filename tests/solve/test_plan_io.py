"""Plan JSON round trip and schema, the table, Graphviz, and comparisons."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from manual_gemm import GemmConfig, make_manual_gemm
from planning_support import bindings, kernel, target

from planner.errors import PlannerError
from planner.ir.frontend import mem
from planner.solve import (
    Baseline,
    MaterializationPlan,
    Status,
    compare_plans,
    comparison_to_json,
    format_comparison,
    format_plan_table,
    plan_from_json,
    plan_json_schema,
    plan_kernel,
    plan_to_dot,
    plan_to_json,
)

jsonschema = pytest.importorskip("jsonschema")


def _plans():
    yield plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"))
    yield plan_kernel(kernel("manual_gemm"), target("apple-m2"), bindings("manual_gemm"))
    yield plan_kernel(kernel("attention"), target("nvidia-h100"), bindings("attention"))
    yield plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"),
                      baseline=Baseline.ALL_VIRTUAL)


@pytest.mark.parametrize("plan", list(_plans()), ids=lambda p: f"{p.kernel}-{p.target}")
def test_json_round_trip_and_schema(plan: MaterializationPlan) -> None:
    doc = plan_to_json(plan)
    text = json.dumps(doc)  # only JSON types
    jsonschema.Draft202012Validator.check_schema(plan_json_schema())
    jsonschema.validate(json.loads(text), plan_json_schema())
    assert plan_from_json(json.loads(text)) == plan


def test_schema_rejects_a_wrong_decision() -> None:
    doc = plan_to_json(next(_plans()))
    doc["edges"][0]["decision"] = "teleported"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, plan_json_schema())


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("edges"), "missing 'edges'"),
    (lambda d: d.update(objective="fast"), "plan.objective: expected int"),
    (lambda d: d.update(schema="planner.plan/0"), "is not 'planner.plan/1'"),
    (lambda d: d["edges"][0].update(decision="teleported"), "ValueError"),
])
def test_malformed_json_is_a_planner_error(mutate: Callable[[dict], object], message: str
                                           ) -> None:
    doc = plan_to_json(next(_plans()))
    mutate(doc)
    with pytest.raises(PlannerError, match=message) as info:
        plan_from_json(doc)
    assert info.value.kind == "parse"


def test_table_shows_edges_peaks_breakdown_status() -> None:
    plan = plan_kernel(kernel("manual_gemm"), target("apple-m2"), bindings("manual_gemm"))
    text = format_plan_table(plan)
    assert text.startswith("manual_gemm on apple-m2  policy default")
    assert "status optimal in" in text and "estimated time" in text
    for header in ("edge", "decision", "ver", "cost ns", "reason", "resource", "peak",
                   "capacity", "memory"):
        assert header in text
    for e in plan.edges:
        assert e.edge_id in text
    assert "threadgroup_memory" in text and "32 KiB" in text
    assert "%As ×2" in text


def test_table_of_an_infeasible_plan_lists_the_explanation() -> None:
    plan = plan_kernel(make_manual_gemm(GemmConfig(block_k=128), resource=mem.shared),
                       target("apple-m2"),
                       {"M": 100, "N": 70, "K": 300})
    text = format_plan_table(plan)
    assert "infeasible:" in text and "32,768 B" in text


def test_dot_colours_edges_by_decision() -> None:
    plan = plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"))
    dot = plan_to_dot(plan)
    assert dot.startswith('digraph "softmax" {') and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == len(plan.edges)
    assert "color=firebrick" in dot and "color=royalblue" in dot  # materialized, fused
    assert "n0 -> n1" in dot


def test_compare_two_targets() -> None:
    k, b = kernel("softmax"), bindings("softmax")
    x86 = plan_kernel(k, target("x86-avx2"), b)
    m2 = plan_kernel(k, target("apple-m2"), b)
    c = compare_plans([("x86-avx2", x86), ("apple-m2", m2)])
    assert c.totals == (x86.objective, m2.objective)
    assert c.rows and c.same_edges + len(c.rows) == len(x86.edges)
    (delta,) = c.deltas
    assert delta.total == m2.objective - x86.objective
    assert delta.edges and abs(delta.edges[0][1]) >= abs(delta.edges[-1][1])
    text = format_comparison(c)
    assert "x86-avx2" in text.splitlines()[0] and "apple-m2" in text.splitlines()[0]
    assert "estimated time" in text and "status" in text and "largest differences" in text
    assert "peak local" in text and "peak thread_registers" in text
    doc = comparison_to_json(c)
    json.dumps(doc)
    assert doc["labels"] == ["x86-avx2", "apple-m2"]
    assert doc["deltas"][0]["total"] == delta.total


def test_compare_with_an_infeasible_baseline() -> None:
    k, t, b = kernel("softmax"), target("x86-avx2"), bindings("softmax")
    c = compare_plans([("optimal", plan_kernel(k, t, b)),
                       ("all-virtual", plan_kernel(k, t, b, baseline="all-virtual"))])
    assert c.totals[1] is None and c.plans[1].status is Status.INFEASIBLE
    text = format_comparison(c)
    assert "infeasible" in text and "all-virtual infeasible:" in text


def test_compare_needs_two_plans() -> None:
    plan = next(_plans())
    with pytest.raises(PlannerError, match="at least two"):
        compare_plans([("one", plan)])
