"""The greedy heuristic (the plan given when CP-SAT finds none in time) is feasible.

Its register sweep counts a segment's own virtual edges; the evaluation also holds a
value over chains of guarded segments.  On the synthetic graphs of ``bench/solve.py``
the sweep alone leaves register overflows, which made the heuristic give up and a
time-limited plan fail with "no plan" instead of answering with its gap.
"""

from __future__ import annotations

import pytest

from planner.catalog import CatalogRegistry
from planner.solve.baselines import greedy_assignment
from planner.solve.build import build_problem
from planner.solve.costs import VIRTUAL, evaluate
from tests.bench_modules import load_bench


@pytest.mark.parametrize("edges", [100, 300])
def test_greedy_plan_of_a_synthetic_graph_is_feasible(edges: int) -> None:
    target = CatalogRegistry().get("x86-avx2")
    problem = build_problem(load_bench("solve").synthetic_kernel(edges), target,
                            {"M": 64, "N": 64})
    a = greedy_assignment(problem, {})
    assert a is not None
    ev = evaluate(problem, a, {})
    assert ev.feasible, ev.violations[:3]
    # every register resource stays within the catalog's capacity at every point
    held_in = {v.register for v in problem.values if v.register}
    regs = {r.name: r.capacity for r in target.resources if r.name in held_in}
    assert regs == {"registers": 512}  # the catalog's register file
    for occ in ev.occupancy:
        if occ.resource in regs:
            assert occ.bytes <= regs[occ.resource]
    assert any(c is VIRTUAL for c in a.choices)  # the repair did not give up on registers


def test_large_problems_compute_the_fallback_before_the_search(monkeypatch) -> None:
    # From _EARLY_FALLBACK_EDGES edges the heuristic runs once, before CP-SAT (inside the
    # time limit, and as its hint), and the search's own fallback is never recomputed.
    import planner.solve.model as model
    import planner.solve.planner as planner_mod

    calls: list[str] = []
    real = model.fallback_assignment

    def early(*a: object, **k: object) -> object:
        calls.append("early")
        return real(*a, **k)  # type: ignore[arg-type]

    def late(*a: object, **k: object) -> object:
        calls.append("late")
        return real(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_mod, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_mod, "_MIN_LP_S", 1e9)  # no LP: test_lp_relaxation.py
    monkeypatch.setattr(planner_mod, "fallback_assignment", early)
    monkeypatch.setattr(model, "fallback_assignment", late)
    hints: list[int] = []
    real_solve = planner_mod.solve

    def solve(bm: model.BuiltModel, **k: object) -> model.SolveResult:
        hints.append(len(bm.model.Proto().solution_hint.vars))
        return real_solve(bm, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_mod, "solve", solve)
    target = CatalogRegistry().get("x86-avx2")
    plan = planner_mod.plan_kernel(load_bench("solve").synthetic_kernel(100), target,
                                   {"M": 64, "N": 64})
    assert calls == ["early"]
    assert hints and hints[0] > 0  # CP-SAT starts from it
    assert plan.status.value == "optimal"


def test_a_large_problem_without_time_to_search_answers_with_the_heuristic(monkeypatch
                                                                           ) -> None:
    # less than _MIN_LARGE_SEARCH_S left: no CP-SAT search at all, the heuristic's plan,
    # never "optimal", its bound the capacity-free relaxation
    import planner.solve.planner as planner_mod
    from planner.solve.bounds import relaxed_bound

    def no_search(*a: object, **k: object) -> object:
        raise AssertionError("the search must not run")

    monkeypatch.setattr(planner_mod, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_mod, "_MIN_LARGE_SEARCH_S", 1e9)
    monkeypatch.setattr(planner_mod, "_MIN_LP_S", 1e9)  # no LP: test_lp_relaxation.py
    monkeypatch.setattr(planner_mod, "solve", no_search)
    # no windows either (test_lp_relaxation.py and test_neighbourhoods.py test them)
    monkeypatch.setattr(planner_mod, "prepare", lambda bm, message=None: None)
    target = CatalogRegistry().get("x86-avx2")
    kernel = load_bench("solve").synthetic_kernel(100)
    plan = planner_mod.plan_kernel(kernel, target, {"M": 64, "N": 64})
    problem = build_problem(kernel, target, {"M": 64, "N": 64})
    greedy = evaluate(problem, greedy_assignment(problem, {}), {})
    assert plan.status.value == "feasible"
    assert plan.objective == greedy.objective
    assert plan.bound == min(relaxed_bound(problem, {}), plan.objective)
    assert 0 <= plan.gap < 1
