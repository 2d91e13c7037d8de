"""What keeps planning work proportional to the problem, checked by structure (no
timings): the capacity model creates only the holding literals a binding sum reads, and
the evaluation's buffer listing is computed once and owned by the evaluation."""

from __future__ import annotations

import threading

from bench_modules import load_bench
from planning_support import target
from test_plan_budget import repeated_softmax

import planner.solve.evaluator as evaluator
from planner.solve import build_problem, model
from planner.solve.evaluator import evaluate, held_at_points, occupancies
from planner.solve.planner import planned_buffers


def test_register_sums_create_no_buffer_literals() -> None:
    # registers (512 B) bind, the local buffer (512 KiB) never does: the sums over
    # registers read only register holding literals
    p = build_problem(repeated_softmax(2), target("x86-avx2"), {"M": 100, "N": 16})
    bm = model.build_model(p)
    assert {r for r, _ in bm.capacity_exprs} == {"registers"}
    assert bm.reg and not bm.mat


def test_evaluation_owns_its_buffer_listing() -> None:
    assert not hasattr(evaluator, "_LAST_HELD")  # no global cache shared by threads
    kernel = load_bench("solve").synthetic_kernel(60)
    p = build_problem(kernel, target("x86-avx2"), {"M": 64, "N": 64})
    a = model.solve(model.build_model(p)).assignment
    assert a is not None
    ev = evaluate(p, a)
    assert list(ev.held) == held_at_points(p, a)
    assert tuple(ev.occupancy) == tuple(occupancies(p, a))
    assert planned_buffers(p, a, ev.held) == planned_buffers(p, a)


def test_evaluations_on_threads_do_not_share_answers() -> None:
    # two problems evaluated at once on threads (the HTTP server plans on threads): each
    # evaluation lists its own buffers
    cases = []
    for times in (2, 3):
        p = build_problem(repeated_softmax(times), target("x86-avx2"), {"M": 100, "N": 16})
        a = model.solve(model.build_model(p)).assignment
        assert a is not None
        cases.append((p, a, held_at_points(p, a)))
    seen: dict[int, bool] = {}

    def run(n: int) -> None:
        p, a, expected = cases[n]
        seen[n] = all(list(evaluate(p, a).held) == expected for _ in range(20))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {0: True, 1: True}
