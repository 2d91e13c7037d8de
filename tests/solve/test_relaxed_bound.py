"""The capacity-free relaxation is a true lower bound, exact where nothing couples values.

:func:`planner.solve.bounds.relaxed_bound` is what an unproved plan's gap is measured
against when the search's own bound is weaker (or the search never ran): it must never
exceed the optimum (exhaustive enumeration here), and on a kernel of one edge, where no
two values interact, it is the optimum.
"""

from __future__ import annotations

import pytest
from planning_support import (
    bindings,
    exhaustive_optimum,
    kernel,
    small_dag,
    target,
    with_capacity,
)

from planner.solve import Policy, Status, plan_kernel
from planner.solve.bounds import relaxed_bound
from planner.solve.costs import build_problem, total

CASES = [("softmax", "x86-avx2", Policy.DEFAULT), ("gemm", "apple-m2", Policy.DEFAULT),
         ("manual_gemm", "nvidia-h100", Policy.DEFAULT),
         ("softmax", "apple-m2", Policy.EXPENSIVE_ONLY),
         ("manual_gemm", "apple-m2", Policy.EXPENSIVE_ONLY)]


@pytest.mark.parametrize(("name", "target_name", "policy"), CASES,
                         ids=[f"{n}-{t}-{p.value}" for n, t, p in CASES])
def test_bound_is_below_the_exhaustive_optimum(name: str, target_name: str,
                                               policy: Policy) -> None:
    problem = build_problem(kernel(name), target(target_name), bindings(name), policy)
    best, _ = exhaustive_optimum(problem)
    assert best is not None
    bound = relaxed_bound(problem)
    assert total(problem.constant) < bound <= best


@pytest.mark.parametrize("seed", [2, 4, 5, 6])
def test_bound_is_below_the_optimum_where_registers_bind(seed: int) -> None:
    problem = build_problem(small_dag(seed, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    best, _ = exhaustive_optimum(problem)
    assert best is not None
    assert total(problem.constant) < relaxed_bound(problem) <= best
    tight = build_problem(kernel("softmax"), with_capacity(target("apple-m2"),
                                                           "thread_registers", 48),
                          bindings("softmax"))
    best, _ = exhaustive_optimum(tight)
    assert best is not None and relaxed_bound(tight) <= best


def test_bound_is_the_optimum_of_a_single_edge() -> None:
    copy = small_dag(0, ops=0)  # one tile loaded and stored: a single edge
    for t in ("x86-avx2", "apple-m2", "nvidia-h100"):
        problem = build_problem(copy, target(t), {"M": 30, "N": 8})
        assert len(problem.edges) == 1
        best, _ = exhaustive_optimum(problem)
        assert relaxed_bound(problem) == best


def test_an_unproved_plan_reports_at_least_the_relaxation() -> None:
    k = small_dag(5, ops=150)
    t = target("x86-avx2")
    quick = plan_kernel(k, t, {"M": 64, "N": 64}, time_limit_s=0.05)
    if quick.status is Status.FEASIBLE:
        assert relaxed_bound(build_problem(k, t, {"M": 64, "N": 64})) <= quick.bound
    assert quick.bound <= quick.objective


def test_negative_write_and_stall_both_count() -> None:
    # Priced terms are never negative today; the bound must not rely on it: a value kept
    # across stages in a buffer pays its write and its stall, so both negative parts count.
    import dataclasses

    from planner.solve.baselines import greedy_assignment
    from planner.solve.costs import PRESERVING, evaluate

    problem = build_problem(kernel("attention"), target("x86-avx2"), bindings("attention"))
    a = greedy_assignment(problem, {})
    assert a is not None
    v = next(v for v in problem.values if a.placement[v.index] is not None and any(
        a.choices[i] in PRESERVING and problem.edges[i].cross_stage for i in v.edges))
    cheap = dataclasses.replace(v, stall=tuple(-100_000 for _ in v.stall), placements=tuple(
        dataclasses.replace(q, write=(("traffic", -100_000),)) for q in v.placements))
    changed = dataclasses.replace(problem, values=tuple(
        cheap if w.index == v.index else w for w in problem.values))
    ev = evaluate(changed, a)
    assert ev.feasible
    assert relaxed_bound(changed) <= ev.objective
