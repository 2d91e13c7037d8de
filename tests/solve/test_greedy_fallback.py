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
