"""evaluate reuses its latest answers only for the same question, inside
reusing_evaluations and per thread."""

from __future__ import annotations

import dataclasses
import threading

from planner.catalog import CatalogRegistry
from planner.solve.baselines import greedy_assignment
from planner.solve.build import build_problem
from planner.solve.costs import MATERIALIZED, VIRTUAL, evaluate
from planner.solve.evaluator import reusing_evaluations
from tests.bench_modules import load_bench


def _problem_and_plan():
    target = CatalogRegistry().get("x86-avx2")
    problem = build_problem(load_bench("solve").synthetic_kernel(100), target,
                            {"M": 64, "N": 64})
    a = greedy_assignment(problem, {})
    assert a is not None
    return problem, a


def test_the_same_question_is_answered_once_and_a_different_one_afresh() -> None:
    problem, a = _problem_and_plan()
    with reusing_evaluations():
        first = evaluate(problem, a, {})
        _same_question_reused(problem, a, first)
    assert evaluate(problem, a, {}) is not first  # outside the block: evaluated again
    assert evaluate(problem, a, {}) is not evaluate(problem, a, {})
    assert evaluate(problem, a, {}).edge_terms == first.edge_terms


def _same_question_reused(problem, a, first) -> None:
    assert evaluate(problem, dataclasses.replace(a), {}) is first  # equal assignment
    i = next(i for i, c in enumerate(a.choices) if c is VIRTUAL)
    other = dataclasses.replace(a, choices=(*a.choices[:i], MATERIALIZED, *a.choices[i + 1:]))
    changed = evaluate(problem, other, {})
    assert changed is not first
    # materializing an edge the plan kept virtual writes the value: other terms or bytes
    assert (changed.edge_terms, changed.occupancy) != (first.edge_terms, first.occupancy)


def test_another_thread_does_not_see_this_threads_answers() -> None:
    problem, a = _problem_and_plan()
    theirs: list[object] = []

    def other_thread() -> None:
        with reusing_evaluations():
            theirs.append(evaluate(problem, a, {}))

    with reusing_evaluations():
        mine = evaluate(problem, a, {})
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert theirs[0] is not mine
        assert evaluate(problem, a, {}) is mine
