"""Inlining questions along long consumer chains are answered without Python recursion.

A chain of ``n`` exps lets each value be evaluated at every later point; the planner's
reach, alignment and site questions follow that chain.  Before they were iterative a
chain longer than Python's recursion limit crashed with RecursionError.
"""

from __future__ import annotations

import sys

import pytest

from planner.errors import PlannerError
from planner.solve.dag_memo import memo_postorder
from planner.solve.holding import Holding


def test_memo_postorder_goes_deeper_than_the_recursion_limit() -> None:
    n = 3 * sys.getrecursionlimit()
    memo: dict[int, int] = {}
    # node i's only child is i + 1; the answer is the number of nodes below and at i
    got = memo_postorder(0, lambda i: [i + 1] if i < n else [],
                         lambda i: 1 + (memo[i + 1] if i < n else 0), memo)
    assert got == n + 1 and memo[n] == 1 and len(memo) == n + 1


def test_memo_postorder_shares_answers_of_a_diamond() -> None:
    calls: list[str] = []
    children = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}
    memo: dict[str, frozenset[str]] = {}

    def compute(n: str) -> frozenset[str]:
        calls.append(n)
        return frozenset({n}).union(*(memo[c] for c in children[n]))

    assert memo_postorder("a", children.__getitem__, compute, memo) == {"a", "b", "c", "d"}
    assert sorted(calls) == ["a", "b", "c", "d"]  # each node once


def test_memo_postorder_refuses_a_cycle() -> None:
    with pytest.raises(PlannerError, match="cycle"):
        memo_postorder(0, lambda i: [(i + 1) % 3], lambda i: i, {})


def test_reach_of_a_chain_longer_than_the_recursion_limit(monkeypatch) -> None:
    from planner.catalog import CatalogRegistry
    from planner.solve.build import build_problem
    from tests.bench_modules import load_bench

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(400)  # a 250-exp chain is then deeper than the limit
    try:
        kernel = load_bench("solve").softmax_chain(250)
        captured: list[Holding] = []
        real_init = Holding.__init__

        def spy(self: Holding, *a: object, **k: object) -> None:
            real_init(self, *a, **k)  # type: ignore[arg-type]
            captured.append(self)

        monkeypatch.setattr(Holding, "__init__", spy)
        # no inline depth limit within the chain: every later point is a site
        problem = build_problem(kernel, CatalogRegistry().get("x86-avx2"), {"M": 8, "N": 8},
                                max_inline_depth=1000)
    finally:
        sys.setrecursionlimit(old)
    held = captured[0]
    # the first exp of the chain may be evaluated at every later exp's point: the chain's
    # values are defined at increasing points, each one later than the last
    exps = [v for v in held.values if v.kind == "tile.unary.exp"]
    assert len(exps) >= 250
    first = exps[0]
    later = {v.def_point for v in exps[1:]}
    assert later <= held.reach(first.index)
    assert problem.values


def test_model_building_checks_the_deadline_inside_one_capacity_sum(monkeypatch) -> None:
    # The first capacity sum that can bind creates the site literals of a whole chain:
    # for 1,073 exps that took 36 s in one call, so the deadline is checked inside it too.
    from planning_support import target, with_capacity

    import planner.solve.model as model
    from planner.solve.build import build_problem
    from tests.bench_modules import load_bench

    kernel = load_bench("solve").softmax_chain(120)
    tight = with_capacity(target("x86-avx2"), "local", 40 * 4 * 70 * 4)  # 40 row blocks
    problem = build_problem(kernel, tight, {"M": 8, "N": 70}, max_inline_depth=1000)
    depth, checks = [0], [0]
    real = model._capacity

    def measured(*args: object) -> None:
        depth[0] += 1
        try:
            real(*args)  # type: ignore[arg-type]
        finally:
            depth[0] -= 1

    def counted(deadline: float | None) -> None:
        checks[0] += depth[0] > 0

    monkeypatch.setattr(model, "_capacity", measured)
    monkeypatch.setattr(model, "check_deadline", counted)
    bm = model.build_model(problem, deadline=float("inf"))
    assert bm.capacity_exprs, "a capacity sum can bind (else nothing is checked inside)"
    assert checks[0] > 0
