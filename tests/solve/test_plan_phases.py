"""A plan says where its time went: build, proofs, model, solve, evaluate (or explain),
with the total beside the solve time in the header."""

from __future__ import annotations

from planning_support import bindings, kernel, target

from planner.plan import format_plan_table, plan_from_json, plan_to_json
from planner.solve import plan_kernel


def test_feasible_plan_reports_every_phase_and_the_total() -> None:
    plan = plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"))
    names = [n for n, _ in plan.phases]
    assert names == ["build", "proofs", "model", "solve", "evaluate"]
    solve = dict(plan.phases)["solve"]
    assert solve >= plan.solve_time_s * 0.5  # the phase includes CP-SAT's own wall time
    total = sum(t for _, t in plan.phases)
    head = format_plan_table(plan).splitlines()[2]
    assert head.startswith(f"status optimal in {plan.solve_time_s:.2f} s (total {total:.2f} s")
    assert plan_from_json(plan_to_json(plan)).phases == plan.phases


def test_infeasible_plan_reports_the_explanation_phase() -> None:
    plan = plan_kernel(kernel("softmax"), target("x86-avx2"), bindings("softmax"),
                       baseline="all-virtual")
    assert plan.status.value == "infeasible"
    assert [n for n, _ in plan.phases][-1] == "explain"
