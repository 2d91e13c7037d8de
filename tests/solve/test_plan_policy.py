"""S4 on softmax: what each policy preserves and what it recomputes."""

from __future__ import annotations

import pytest
from planning_support import bindings, kernel, target

from planner.solve import Decision, MaterializationPlan, Policy, plan_kernel

PRESERVED = {Decision.VIRTUAL, Decision.MATERIALIZED}
INLINED = {Decision.FUSED, Decision.RECOMPUTED}


def _edges_from(plan: MaterializationPlan, producer_kind: str) -> list:
    found = [e for e in plan.edges if e.producer_kind == producer_kind]
    assert found, producer_kind
    return found


@pytest.mark.parametrize("target_name", ["x86-avx2", "apple-m2", "nvidia-h100"])
@pytest.mark.parametrize("policy", list(Policy))
def test_s4_shared_exp_is_preserved_under_both_policies(target_name: str,
                                                        policy: Policy) -> None:
    plan = plan_kernel(kernel("softmax"), target(target_name), bindings("softmax"),
                       policy=policy)
    exp_edges = _edges_from(plan, "tile.unary.exp")
    assert len(exp_edges) == 2  # reduce_sum and the divide
    assert {e.decision for e in exp_edges} <= PRESERVED
    assert all("preserves" in e.reason or "buffered" in e.reason for e in exp_edges)


@pytest.mark.parametrize("target_name", ["x86-avx2", "apple-m2"])
def test_s4_default_preserves_the_shared_load(target_name: str) -> None:
    plan = plan_kernel(kernel("softmax"), target(target_name), bindings("softmax"))
    x_edges = _edges_from(plan, "tile.load")
    assert {e.decision for e in x_edges} <= PRESERVED


@pytest.mark.parametrize("target_name", ["x86-avx2", "apple-m2"])
def test_s4_expensive_only_recomputes_cheap_values_in_each_consumer(target_name: str) -> None:
    plan = plan_kernel(kernel("softmax"), target(target_name), bindings("softmax"),
                       policy=Policy.EXPENSIVE_ONLY)
    # x = load X feeds reduce_max and the subtract: re-read in each (two-pass softmax)
    x_edges = _edges_from(plan, "tile.load")
    assert len(x_edges) == 2
    assert {e.decision for e in x_edges} <= INLINED
    # the subtract sh (x - broadcast(max)) is inlined into exp, never stored
    (sh,) = _edges_from(plan, "tile.binary.sub")
    assert sh.decision in INLINED


def test_s4_policies_differ_in_cost_where_they_differ_in_decisions() -> None:
    k, t, b = kernel("softmax"), target("x86-avx2"), bindings("softmax")
    default = plan_kernel(k, t, b)
    cheap = plan_kernel(k, t, b, policy="expensive-only")
    assert default.objective < cheap.objective  # the second read of X from DRAM costs more
    assert cheap.breakdown["traffic"] > default.breakdown["traffic"]


def test_policy_by_name_and_unknown_policy() -> None:
    from planner.errors import PlannerError

    k, t, b = kernel("softmax"), target("x86-avx2"), bindings("softmax")
    assert plan_kernel(k, t, b, policy="expensive-only").policy is Policy.EXPENSIVE_ONLY
    with pytest.raises(PlannerError, match="unknown policy 'cheap'"):
        plan_kernel(k, t, b, policy="cheap")
