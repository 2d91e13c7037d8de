"""Held intervals answer exactly what the segments say, for any assignment.

:func:`planner.solve.evaluator.held_at_points` lays each value's held intervals
(:meth:`Truth.spans`) onto the checked points by bisection instead of asking every
segment at every point.  The reference here is the segment's own definition, read off
its fields: held in registers where a covering edge is virtual, in its buffer where one
is materialized, and where a chained edge of that choice has a guard at or after the
segment's ``first`` that holds (each guard asked one by one through ``Truth.guard``).
"""

from __future__ import annotations

import dataclasses
import random
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.plan.decisions import Policy
from planner.solve.baselines import greedy_assignment
from planner.solve.costs import CHOICES, MATERIALIZED, VIRTUAL, Assignment, Problem, build_problem
from planner.solve.evaluator import Truth, held_at_points, segment_live
from tests.bench_modules import load_bench
from tests.solve.planning_support import bindings, chain_kernel, kernel, small_dag, target

CASES = (("chain", "x86-avx2"), ("synthetic", "x86-avx2"), ("softmax", "x86-avx2"),
         ("attention", "x86-avx2"), ("dag", "x86-avx2"), ("softmax", "nvidia-b200"),
         ("attention", "apple-m2"), ("layernorm", "npu-systolic"), ("chain12", "x86-avx2"))


@cache
def _problem(case: str, target_name: str) -> Problem:
    if case == "chain":
        k, b = load_bench("solve").softmax_chain(12), {"M": 9, "N": 70}
    elif case == "synthetic":
        k, b = load_bench("solve").synthetic_kernel(120), {"M": 64, "N": 64}
    elif case == "dag":
        k, b = small_dag(3, ops=10), {"M": 8, "N": 16}
    elif case == "chain12":
        k, b = chain_kernel(12), {"M": 8, "N": 16}
    else:
        k, b = kernel(case), bindings(case)
    return build_problem(k, target(target_name), b, Policy.DEFAULT)


def _random_assignment(p: Problem, seed: int) -> Assignment:
    base = greedy_assignment(p, {})
    assert base is not None
    rng = random.Random(seed)
    choices = [rng.choice([c for c in CHOICES if e.legal(c)] or [base.choices[e.index]])
               if rng.random() < 0.6 else base.choices[e.index] for e in p.edges]
    placement = [(base.placement[v.index] if base.placement[v.index] is not None else 0)
                 if v.placements and any(choices[i] is MATERIALIZED for i in v.edges)
                 else None for v in p.values]
    return dataclasses.replace(base, choices=tuple(choices), placement=tuple(placement))


def _by_segment(p: Problem, a: Assignment, truth: Truth, vi: int, si: int
                ) -> tuple[bool, bool]:
    v = p.values[vi]
    seg = v.segments[si]
    reg = any(a.choices[i] is VIRTUAL for i in seg.edges)
    mat = any(a.choices[i] is MATERIALIZED for i in seg.edges)
    for ci, first in seg.chained:
        chain = v.chains[ci]
        c = a.choices[chain.edge]
        if c in (VIRTUAL, MATERIALIZED) and any(truth.guard(g) for g in chain.guards[first:]):
            reg, mat = reg or c is VIRTUAL, mat or c is MATERIALIZED
    return reg, mat


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CASES), st.integers(0, 2**31))
def test_segment_live_and_held_points_match_the_segments(case: tuple[str, str],
                                                         seed: int) -> None:
    p = _problem(*case)
    a = _random_assignment(p, seed)
    truth = Truth(p, a)
    expected: list[set[tuple[int, bool, bool]]] = []
    for lp in p.live_points:
        here = set()
        for vi, si in lp.segments:
            want = _by_segment(p, a, truth, vi, si)
            v = p.values[vi]
            assert segment_live(p, a, v, v.segments[si], Truth(p, a)) == want, (vi, si)
            reg, mat = want
            reg = reg and v.register is not None
            mat = mat and a.placement[vi] is not None
            if reg or mat:
                here.add((vi, reg, mat))
        expected.append(here)
    got = held_at_points(p, a)
    assert [key for key, _ in got] == [(lp.owner, lp.point) for lp in p.live_points]
    carried = any(g.kind in ("split", "pingpong") for g in p.guards)
    for here, (_, held) in zip(expected, got, strict=True):
        values = {h.key[1] for h in held if h.key[0] == "value"}
        if not carried:  # a carry's buffer may hold its yielded value under its own key
            assert values == {vi for vi, _, _ in here}
            regs = {h.key[1] for h in held
                    if h.key[0] == "value" and h.resource == p.values[h.key[1]].register}
            assert regs == {vi for vi, reg, _ in here if reg}
