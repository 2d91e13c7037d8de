"""The LP relaxation (:mod:`planner.solve.lp`): a true lower bound, and the plans built
from it are feasible.

The bound must never exceed an optimum (exhaustive enumeration, or CP-SAT's proof); the
rows of each constraint kind are checked on hand-made models whose LP optimum is known;
the LP-guided heuristic's plan must pass the reference evaluator; and a large problem's
plan (the path taken from :data:`planner.solve.planner._EARLY_FALLBACK_EDGES` edges,
lowered here) reports the LP's bound, never above the proved optimum.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ortools.sat.python import cp_model
from planning_support import bindings, exhaustive_optimum, kernel, small_dag, target

import planner.solve.lp as lp_module
import planner.solve.planner as planner_module
from planner.solve import Policy, Status, plan_kernel
from planner.solve.baselines import greedy_assignment
from planner.solve.bounds import relaxed_bound
from planner.solve.costs import VIRTUAL, build_problem, evaluate, total
from planner.solve.lp import complete_hint, relax, rounded_choices
from planner.solve.model import add_hint, build_model, decode, solve

CASES = [("softmax", "x86-avx2"), ("gemm", "apple-m2"), ("manual_gemm", "nvidia-h100"),
         ("layernorm", "x86-avx2"), ("attention", "apple-m2")]


def _plain_and_worse():  # type: ignore[no-untyped-def]
    """(plan_kernel's arguments, the problem, the plain heuristic's plan, a costlier plan
    (every edge materialized, repaired), their objectives) on a small DAG."""
    from planner.solve.costs import MATERIALIZED

    args = (small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    problem = build_problem(*args)
    plain = greedy_assignment(problem, {})
    worse = greedy_assignment(problem, {}, [MATERIALIZED] * len(problem.edges))
    assert plain is not None and worse is not None
    good, bad = evaluate(problem, plain, {}).objective, evaluate(problem, worse, {}).objective
    assert bad > good
    return args, problem, plain, worse, good, bad


def _toy(build, costs):  # type: ignore[no-untyped-def]
    """A stand-in BuiltModel: ``build(model)`` returns the literals ``costs`` prices."""
    m = cp_model.CpModel()
    lits = build(m)
    return SimpleNamespace(model=m, cost=list(zip(lits, costs, strict=True)),
                           problem=SimpleNamespace(constant=()))


@pytest.mark.parametrize(("name", "target_name"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_bound_is_below_the_proved_optimum(name: str, target_name: str) -> None:
    problem = build_problem(kernel(name), target(target_name), bindings(name))
    bm = build_model(problem)
    relaxation = relax(bm)
    assert relaxation is not None
    result = solve(build_model(problem), time_limit_s=30)
    assert result.status == "optimal"
    assert total(problem.constant) <= relaxation.bound <= result.objective
    # not weaker than the capacity-free relaxation on these kernels (measured, with
    # the model's LP cuts)
    assert relaxation.bound >= relaxed_bound(problem) - 1


@pytest.mark.parametrize("seed", [2, 4, 5, 6])
def test_bound_is_below_the_exhaustive_optimum(seed: int) -> None:
    problem = build_problem(small_dag(seed, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    best, _ = exhaustive_optimum(problem)
    relaxation = relax(build_model(problem))
    assert best is not None and relaxation is not None
    assert total(problem.constant) <= relaxation.bound <= best


def test_literal_rows_have_their_lp_optimum() -> None:
    # bool_or(a, b): min a + b is 1; exactly_one(c, d) with d costing 3: c = 1, 0;
    # bool_or(~e, f) (f >= e) with e worth -2 and f costing 5: e = f = 0 (cost 0);
    # bool_and(g) enforced by h, g costing 1, h worth -4: h = g = 1 (cost -3)
    def build(m):  # type: ignore[no-untyped-def]
        a, b, c, d, e, f, g, h = (m.new_bool_var(n) for n in "abcdefgh")
        m.add_bool_or([a, b])
        m.add_exactly_one([c, d])
        m.add_bool_or([e.Not(), f])
        m.add_bool_and([g]).only_enforce_if(h)
        return [a, b, d, e, f, g, h]

    relaxation = relax(_toy(build, [1, 1, 3, -2, 5, 1, -4]))  # type: ignore[arg-type]
    assert relaxation is not None
    assert relaxation.bound == -2  # LP optimum 1 + 0 + 0 - 3


def test_enforced_linear_rows_are_dropped_not_misread() -> None:
    # x + y >= 2 enforced by z (dropped: valid), x + y <= 1 kept: min -(x + y) is -1
    def build(m):  # type: ignore[no-untyped-def]
        x, y, z = (m.new_bool_var(n) for n in "xyz")
        m.add(x + y >= 2).only_enforce_if(z)
        m.add(x + y <= 1)
        m.add_at_most_one([x, z.Not()])
        return [x, y, z]

    relaxation = relax(_toy(build, [-1, -1, 0]))  # type: ignore[arg-type]
    assert relaxation is not None
    assert relaxation.bound == -1


def test_independent_blocks_are_solved_apart_exactly() -> None:
    # two blocks sharing no row: bool_or(a, b) with a costing 1, b 2 (LP optimum 1) and
    # exactly_one(c, d) with c costing 3, d 5 (3); windows of two columns keep both rows
    def build(m):  # type: ignore[no-untyped-def]
        a, b, c, d = (m.new_bool_var(n) for n in "abcd")
        m.add_bool_or([a, b])
        m.add_exactly_one([c, d])
        return [a, b, c, d]

    relaxation = relax(_toy(build, [1, 2, 3, 5]), window_columns=2)  # type: ignore[arg-type]
    assert relaxation is not None
    assert relaxation.bound == 4
    assert list(relaxation.values) == [1, 0, 1, 0]


def test_a_row_across_windows_is_dropped_and_the_bound_stays_below() -> None:
    # two triangles of bool_or rows (a, b, c and d, e, f; LP optimum 1.5 each, all
    # halves) joined by c + d == 2: the whole LP pays 1 + 1 for c, d and 0.5 + 0.5 for
    # a, b and e, f (4); two windows of three columns cut at the bridge, the only row
    # crossing there, and drop it: 1.5 + 1.5 (3)
    def build(m):  # type: ignore[no-untyped-def]
        a, b, c, d, e, f = lits = [m.new_bool_var(n) for n in "abcdef"]
        for x, y in [(a, b), (b, c), (a, c), (d, e), (e, f), (d, f)]:
            m.add_bool_or([x, y])
        m.add(c + d == 2)
        return lits

    whole = relax(_toy(build, [1] * 6))  # type: ignore[arg-type]
    windowed = relax(_toy(build, [1] * 6), window_columns=3)  # type: ignore[arg-type]
    assert whole is not None and windowed is not None
    assert whole.bound == 4
    assert windowed.bound == 3


def test_windows_partition_the_columns_into_k_blocks() -> None:
    import numpy as np

    from planner.solve.lp import windows

    rng = np.random.default_rng(0)
    n, count = 200, 150
    # banded rows: each over 2-4 columns near a random position
    row, var = [], []
    for r in range(count):
        at = int(rng.integers(0, n - 4))
        for c in rng.choice(4, size=int(rng.integers(2, 5)), replace=False):
            row.append(r)
            var.append(at + int(c))
    block = windows(np.array(row), np.array(var), count, n, 5)
    assert block.shape == (n,)
    assert sorted(set(block.tolist())) == [0, 1, 2, 3, 4]
    # each block is about n / 5 columns (cuts move at most a quarter block)
    sizes = np.bincount(block)
    assert sizes.min() >= n // 5 - 2 * (n // 20) and sizes.max() <= n // 5 + 2 * (n // 20)
    assert (windows(np.array(row), np.array(var), count, n, 1) == 0).all()


def test_a_cut_moves_to_where_no_row_crosses() -> None:
    import numpy as np

    from planner.solve.lp import windows

    # two chains of 45 and 55 columns: the even cut (50) splits the longer one; 45 is
    # within a quarter block of it and no row crosses there
    pairs = [(i, i + 1) for i in range(44)] + [(i, i + 1) for i in range(45, 99)]
    row = np.repeat(np.arange(len(pairs)), 2)
    var = np.array(pairs).ravel()
    block = windows(row, var, len(pairs), 100, 2)
    assert sorted(np.bincount(block).tolist()) == [45, 55]
    assert all(block[a] == block[b] for a, b in pairs)


@pytest.mark.parametrize(("name", "target_name"), CASES[:3], ids=[f"{n}-{t}" for n, t in CASES[:3]])
def test_windowed_bound_is_below_the_whole_lp(name: str, target_name: str) -> None:
    problem = build_problem(kernel(name), target(target_name), bindings(name))
    whole = relax(build_model(problem), window_columns=10**9)
    windowed = relax(build_model(problem), window_columns=40)
    assert whole is not None and windowed is not None
    assert total(problem.constant) <= windowed.bound <= whole.bound


@pytest.mark.parametrize(("name", "target_name"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_rounded_plan_is_feasible_and_keeps_the_lp_choices(name: str,
                                                            target_name: str) -> None:
    problem = build_problem(kernel(name), target(target_name), bindings(name),
                            Policy.DEFAULT)
    bm = build_model(problem)
    relaxation = relax(bm)
    assert relaxation is not None
    start = rounded_choices(bm, relaxation)
    plan = greedy_assignment(problem, {}, start)
    assert plan is not None
    ev = evaluate(problem, plan, {})
    assert ev.feasible, ev.violations[:3]
    assert ev.objective >= relaxation.bound
    # the heuristic repairs virtual edges only: every fixed choice is kept
    kept = [i for i, c in enumerate(start) if c is not None and c is not VIRTUAL]
    assert all(plan.choices[i] is start[i] for i in kept)


def test_large_problem_path_reports_the_lp_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "attention"
    proved = plan_kernel(kernel(name), target("apple-m2"), bindings(name), time_limit_s=30)
    assert proved.status is Status.OPTIMAL
    monkeypatch.setattr(planner_module, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_module, "_MIN_LARGE_SEARCH_S", 0.0)
    plan = plan_kernel(kernel(name), target("apple-m2"), bindings(name), time_limit_s=30)
    # the windows' search, then the whole model's from its plan: a proof is the problem's
    assert plan.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert plan.objective >= proved.objective
    if plan.status is Status.OPTIMAL:
        assert plan.objective == proved.objective
    assert plan.bound <= proved.objective <= plan.objective
    assert plan.gap == pytest.approx((plan.objective - plan.bound) / plan.objective,
                                     abs=1e-6)


@pytest.fixture
def large_without_search(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Every problem takes the large-problem path, with no time for a whole-model
    search (which must not run)."""
    def no_search(*a: object, **k: object) -> object:
        raise AssertionError("the search must not run")

    monkeypatch.setattr(planner_module, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_module, "_MIN_LARGE_SEARCH_S", 1e9)
    monkeypatch.setattr(planner_module, "solve", no_search)
    return monkeypatch


def test_large_problem_without_time_to_search_answers_with_the_lp_heuristic(
        large_without_search: pytest.MonkeyPatch) -> None:
    # the LP is solved, its rounding repaired; no search: the bound is the LP's (or the
    # capacity-free relaxation where that is higher), never above the objective
    large_without_search.setattr(planner_module, "prepare",
                                 lambda bm, message=None: None)  # no windows
    problem = build_problem(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    bm = build_model(problem, cuts=False)
    relaxation = relax(bm)
    assert relaxation is not None
    expected = greedy_assignment(problem, {}, rounded_choices(bm, relaxation))
    assert expected is not None
    plan = plan_kernel(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    assert plan.status is Status.FEASIBLE
    assert plan.objective == evaluate(problem, expected, {}).objective
    assert plan.bound == min(max(relaxation.bound, relaxed_bound(problem)), plan.objective)
    best, _ = exhaustive_optimum(problem)
    assert best is not None and plan.bound <= best <= plan.objective


def test_a_large_problem_plans_from_an_lp_that_ran_out_after_its_first_window(
        large_without_search: pytest.MonkeyPatch) -> None:
    # the LP in windows of 10 columns, its clock gone after the first: the plan is the
    # heuristic's from the partial rounding, its bound the partial LP's (or the
    # capacity-free relaxation where higher), never above the exhaustive optimum
    large_without_search.setattr(planner_module, "prepare",
                                 lambda bm, message=None: None)  # no windows
    real_relax = lp_module.relax
    seen = []

    def running_out(bm, *a, **k):  # type: ignore[no-untyped-def]
        k["window_columns"] = 10
        with pytest.MonkeyPatch.context() as clock:  # this call's clock only
            clock.setattr(lp_module, "time", _clock_running_out_after(2))
            seen.append((bm, real_relax(bm, *a, **k)))
        return seen[-1][1]

    large_without_search.setattr(planner_module, "relax", running_out)
    args = (small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    plan = plan_kernel(*args)
    assert len(seen) == 1
    bm, relaxation = seen[0]  # the planner's own model, its proto indices
    assert relaxation is not None and relaxation.partial
    problem = build_problem(*args)
    start = rounded_choices(bm, relaxation)
    assert None in start  # the edges of the windows not solved
    expected = greedy_assignment(problem, {}, start)
    assert expected is not None
    assert plan.status is Status.FEASIBLE
    assert plan.objective == evaluate(problem, expected, {}).objective
    assert plan.bound == min(max(relaxation.bound, relaxed_bound(problem)), plan.objective)
    best, _ = exhaustive_optimum(problem)
    assert best is not None and total(problem.constant) <= plan.bound <= best


@pytest.mark.usefixtures("large_without_search")
def test_large_problem_without_time_to_search_improves_the_heuristic_by_windows() -> None:
    # no whole-model search: the windows (here one window holds the whole small model,
    # searched exactly) improve the LP heuristic's plan of the softmax on AVX-512 (4,097
    # ns) to the exhaustive optimum (4,006 ns)
    name, avx512 = "softmax", target("x86-avx512")
    problem = build_problem(kernel(name), avx512, bindings(name))
    bm = build_model(problem, cuts=False)
    relaxation = relax(bm)
    assert relaxation is not None
    heuristic = greedy_assignment(problem, {}, rounded_choices(bm, relaxation))
    assert heuristic is not None
    plan = plan_kernel(kernel(name), avx512, bindings(name))
    best, _ = exhaustive_optimum(problem)
    assert plan.status is Status.FEASIBLE  # a window's optimum proves nothing of the whole
    assert best is not None and plan.objective == best
    assert best < evaluate(problem, heuristic, {}).objective  # the windows did improve it
    assert plan.bound <= best


def test_completed_hint_is_the_hinted_plan() -> None:
    problem = build_problem(kernel("attention"), target("apple-m2"), bindings("attention"))
    bm = build_model(problem)
    relaxation = relax(bm)
    assert relaxation is not None
    plan = greedy_assignment(problem, {}, rounded_choices(bm, relaxation))
    assert plan is not None
    add_hint(bm, plan)
    partial = len(bm.model.Proto().solution_hint.vars)
    assert complete_hint(bm, 10, 1)
    hint = bm.model.Proto().solution_hint
    assert len(hint.vars) == len(bm.model.Proto().variables) > partial
    values = dict(zip(hint.vars, hint.values, strict=True))

    class Hinted:
        def BooleanValue(self, lit):  # type: ignore[no-untyped-def]
            i = lit.Index()
            return bool(values[i]) if i >= 0 else not values[-i - 1]

    assert decode(bm, Hinted()) == plan  # type: ignore[arg-type]


def test_an_unproved_search_worse_than_its_hint_keeps_the_hint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.solve.model import SolveResult

    args, _, _, worse, good, bad = _plain_and_worse()

    def search(*a: object, **k: object) -> SolveResult:
        return SolveResult("feasible", worse, bad, 0, 0.0)

    monkeypatch.setattr(planner_module, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_module, "_MIN_LARGE_SEARCH_S", 0.0)
    monkeypatch.setattr(planner_module, "_MIN_LP_S", 1e9)  # the plain heuristic's hint
    monkeypatch.setattr(planner_module, "solve", search)
    plan = plan_kernel(*args)
    assert plan.status is Status.FEASIBLE and plan.objective == good


def test_a_better_search_plan_wins_whatever_cost_the_model_gives_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # plans are compared by the evaluator's objective: the model's cost of a plan
    # (rounded up, a completed hint's free literals) can exceed it
    from planner.solve.model import SolveResult

    args, _, better, worse, good, bad = _plain_and_worse()

    def search(*a: object, **k: object) -> SolveResult:
        return SolveResult("feasible", better, bad + 1000, 0, 0.0)

    monkeypatch.setattr(planner_module, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_module, "_MIN_LARGE_SEARCH_S", 0.0)
    monkeypatch.setattr(planner_module, "_MIN_LP_S", 1e9)
    monkeypatch.setattr(planner_module, "fallback_assignment", lambda *a, **k: worse)
    monkeypatch.setattr(planner_module, "solve", search)
    plan = plan_kernel(*args)
    assert plan.status is Status.FEASIBLE and plan.objective == good


def test_highs_writes_nothing_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    # the JSON command line writes its answer to the same stdout
    problem = build_problem(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    assert relax(build_model(problem)) is not None
    out, _ = capfd.readouterr()
    assert out == ""


@pytest.mark.parametrize("lp_per_model_s", [0.0, 1e9])
def test_the_lp_runs_only_when_its_estimate_from_the_model_build_fits(
        monkeypatch: pytest.MonkeyPatch, lp_per_model_s: float) -> None:
    # the LP's expected time is this call's model-building seconds times
    # _LP_PER_MODEL_S: far beyond the limit, it is not started; within it, it runs
    # with at most the time left less the evaluation's reserve and the heuristic's share
    seen: list[float] = []
    built: list[float] = []
    real_build = planner_module.build_model

    def timed_build(*a: object, **k: object):  # type: ignore[no-untyped-def]
        import time
        start = time.perf_counter()
        out = real_build(*a, **k)  # type: ignore[arg-type]
        built.append(time.perf_counter() - start)
        return out

    def spy(bm: object, limit: float, **kw: int) -> object:
        seen.append(limit)
        return relax(bm, limit, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_module, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_module, "_MIN_LP_S", 0.0)
    monkeypatch.setattr(planner_module, "_LP_PER_MODEL_S", lp_per_model_s)
    monkeypatch.setattr(planner_module, "_HEURISTIC_PER_MODEL_S", 50.0)
    monkeypatch.setattr(planner_module, "build_model", timed_build)
    monkeypatch.setattr(planner_module, "relax", spy)
    plan = plan_kernel(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16},
                       time_limit_s=20)
    if lp_per_model_s:  # the whole model searched, its optimum proved
        assert seen == [] and plan.status is Status.OPTIMAL
        return
    # the windows, then the whole model searched from their plan (a proof is the
    # problem's)
    assert plan.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert len(seen) == 1 and len(built) == 1
    # reserve: max(10 % of the limit, 0.4 x model); heuristic share: 50 x model
    assert seen[0] <= 20 - max(2.0, 0.4 * built[0]) - 50.0 * built[0]


@pytest.mark.parametrize(("whole_per_model_s", "whole"), [(0.0, True), (1e9, False)])
def test_the_lp_is_solved_whole_only_where_that_is_a_small_share_of_the_time(
        monkeypatch: pytest.MonkeyPatch, whole_per_model_s: float, whole: bool) -> None:
    windows: list[int] = []

    def spy(bm: object, limit: float, window_columns: int = lp_module.WINDOW_COLUMNS,
            **kw: object) -> object:
        windows.append(window_columns)
        return relax(bm, limit, window_columns, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_module, "_EARLY_FALLBACK_EDGES", 1)
    monkeypatch.setattr(planner_module, "_MIN_LP_S", 0.0)
    monkeypatch.setattr(planner_module, "_WHOLE_LP_PER_MODEL_S", whole_per_model_s)
    monkeypatch.setattr(planner_module, "relax", spy)
    plan = plan_kernel(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16},
                       time_limit_s=20)
    assert plan.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert len(windows) == 1
    if whole:  # one window holds every column
        assert windows[0] >= 2**62
    else:
        assert windows[0] == lp_module.WINDOW_COLUMNS


def test_rounding_keeps_an_edge_virtual_only_from_the_threshold_on() -> None:
    import numpy as np

    from planner.solve.costs import FUSED, MATERIALIZED
    from planner.solve.lp import VIRTUAL_AT_LEAST, Relaxation

    m = cp_model.CpModel()
    lits = [m.new_bool_var(f"v{i}") for i in range(7)]
    # edge 0: mostly virtual, under the threshold; edge 1: virtual at the threshold;
    # edge 2: virtual is its only choice; edge 3: fused beats materialized
    x = {(0, VIRTUAL): lits[0], (0, MATERIALIZED): lits[1],
         (1, VIRTUAL): lits[2], (1, FUSED): lits[3],
         (2, VIRTUAL): lits[4],
         (3, FUSED): lits[5], (3, MATERIALIZED): lits[6]}
    below = VIRTUAL_AT_LEAST - 0.05
    values = np.array([below, 1 - below, VIRTUAL_AT_LEAST, 1 - VIRTUAL_AT_LEAST, 0.3,
                       0.6, 0.4])
    bm = SimpleNamespace(x=x, problem=SimpleNamespace(edges=[0, 1, 2, 3]))
    got = rounded_choices(bm, Relaxation(0, values, 0.0))  # type: ignore[arg-type]
    assert got == [MATERIALIZED, VIRTUAL, VIRTUAL, FUSED]


def _two_blocks(m):  # type: ignore[no-untyped-def]
    """bool_or(a, b) with a costing 1, b 2 (LP optimum 1) and exactly_one(c, d) with c
    costing 3, d 5 (LP optimum 3): two windows of two columns."""
    a, b, c, d = (m.new_bool_var(n) for n in "abcd")
    m.add_bool_or([a, b])
    m.add_exactly_one([c, d])
    return [a, b, c, d]


def _clock_running_out_after(calls: int):  # type: ignore[no-untyped-def]
    """A stand-in for lp's ``time`` whose clock stands still for ``calls`` readings and
    then jumps past any limit."""
    readings = iter(range(10**6))
    return SimpleNamespace(perf_counter=lambda: 0.0 if next(readings) < calls else 1e9)


@pytest.mark.parametrize("partial", [True, False])
def test_a_partial_relaxation_keeps_the_windows_solved_in_time(
        monkeypatch: pytest.MonkeyPatch, partial: bool) -> None:
    import math

    # readings: the start, window 0's time left; window 1 then finds the time gone
    monkeypatch.setattr(lp_module, "time", _clock_running_out_after(2))
    got = relax(_toy(_two_blocks, [1, 2, 3, 5]), 10.0, window_columns=2,  # type: ignore[arg-type]
                partial=partial)
    if not partial:
        assert got is None
        return
    assert got is not None and got.partial
    solved = [not math.isnan(v) for v in got.values]
    # one block solved at its LP optimum; the other's box minimum is 0 (costs >= 0)
    assert solved in ([True, True, False, False], [False, False, True, True])
    if solved[0]:
        assert list(got.values[:2]) == [1, 0] and got.bound == 1
    else:
        assert list(got.values[2:]) == [1, 0] and got.bound == 3


def test_a_partial_relaxation_counts_negative_costs_of_unsolved_windows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import math

    # the box minimum of an unsolved window is its negative costs (every literal at 1)
    monkeypatch.setattr(lp_module, "time", _clock_running_out_after(2))
    got = relax(_toy(_two_blocks, [-1, -2, -3, -5]), 10.0,  # type: ignore[arg-type]
                window_columns=2, partial=True)
    assert got is not None and got.partial
    if math.isnan(got.values[0]):  # c, d solved (exactly one: d at -5), a, b boxed: -1 - 2
        assert got.bound == -5 - 3
    else:  # a, b solved (both at 1: -3), c, d boxed: -3 - 5
        assert got.bound == -3 - 8


def test_rounding_leaves_the_edges_of_unsolved_windows_to_the_heuristic() -> None:
    import numpy as np

    from planner.solve.costs import FUSED, MATERIALIZED
    from planner.solve.lp import Relaxation

    m = cp_model.CpModel()
    lits = [m.new_bool_var(f"v{i}") for i in range(4)]
    x = {(0, FUSED): lits[0], (0, MATERIALIZED): lits[1],
         (1, FUSED): lits[2], (1, MATERIALIZED): lits[3]}
    values = np.array([0.2, 0.8, np.nan, np.nan])
    bm = SimpleNamespace(x=x, problem=SimpleNamespace(edges=[0, 1]))
    got = rounded_choices(bm, Relaxation(0, values, 0.0, True))  # type: ignore[arg-type]
    assert got == [MATERIALIZED, None]


@pytest.mark.usefixtures("large_without_search")
def test_the_windows_structure_is_cut_while_the_lp_solves_and_no_plain_heuristic_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from planner.solve import neighbourhoods

    args, problem, _, _, _, _ = _plain_and_worse()
    spans: dict[str, tuple[float, float]] = {}
    threads: dict[str, int] = {}
    cut: list[object] = []
    given: list[object] = []

    def slow_relax(bm: object, limit: float, **kw: object) -> object:
        start = time.perf_counter()
        threads["lp"] = threading.get_ident()
        told = kw.pop("solving")

        def solving() -> None:
            spans["rows"] = (start, time.perf_counter())
            time.sleep(0.2)  # the structure must wait for the rows, not for this
            told()  # type: ignore[operator]

        out = relax(bm, limit, solving=solving, **kw)  # type: ignore[arg-type]
        time.sleep(0.3)  # a long LP solve: the GIL is free meanwhile
        spans["lp"] = (start, time.perf_counter())
        return out

    def timed_prepare(bm: object, message: object = None) -> object:
        start = time.perf_counter()
        threads["structure"] = threading.get_ident()
        out = neighbourhoods.prepare(bm, message)  # type: ignore[arg-type]
        spans["structure"] = (start, time.perf_counter())
        cut.append(out)
        return out

    def spy_improve(structure: object, *a: object, **k: object) -> object:
        given.append(structure)
        return neighbourhoods.improve(structure, *a, **k)  # type: ignore[arg-type]

    def no_plain(*a: object, **k: object) -> object:
        raise AssertionError("the plain heuristic must not run where the LP gave a plan")

    monkeypatch.setattr(planner_module, "_MIN_LP_S", 0.0)
    monkeypatch.setattr(planner_module, "relax", slow_relax)
    monkeypatch.setattr(planner_module, "prepare", timed_prepare)
    monkeypatch.setattr(planner_module, "improve", spy_improve)
    monkeypatch.setattr(planner_module, "fallback_assignment", no_plain)
    plan = plan_kernel(*args, time_limit_s=20)
    assert threads["lp"] != threads["structure"]
    (lp_start, lp_end), (s_start, s_end) = spans["lp"], spans["structure"]
    assert s_start < lp_end and lp_start < s_end  # side by side
    assert spans["rows"][1] + 0.2 <= s_start  # once the LP's rows are read
    assert len(cut) == 1 and cut[0] is not None  # cut once, and the windows used it
    assert given == cut
    bm = build_model(problem, cuts=False)
    lp = relax(bm)
    assert lp is not None
    expected = greedy_assignment(problem, {}, rounded_choices(bm, lp))
    assert expected is not None
    assert plan.status is Status.FEASIBLE
    assert plan.objective <= evaluate(problem, expected, {}).objective
    assert plan.bound == min(max(lp.bound, relaxed_bound(problem)), plan.objective)


@pytest.mark.usefixtures("large_without_search")
@pytest.mark.parametrize("lp_fails", ["not solved", "no plan from its rounding"])
def test_the_plain_heuristic_is_the_start_where_the_lp_gives_no_plan(
        monkeypatch: pytest.MonkeyPatch, lp_fails: str) -> None:
    args, _, _, _, good, _ = _plain_and_worse()
    calls: list[str] = []
    real_fallback = planner_module.fallback_assignment

    def counted_fallback(*a: object, **k: object) -> object:
        calls.append("plain")
        return real_fallback(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_module, "_MIN_LP_S", 0.0)
    monkeypatch.setattr(planner_module, "prepare", lambda bm, message=None: None)
    if lp_fails == "not solved":
        monkeypatch.setattr(planner_module, "relax", lambda *a, **k: None)
    else:
        monkeypatch.setattr(planner_module, "greedy_assignment", lambda *a, **k: None)
    monkeypatch.setattr(planner_module, "fallback_assignment", counted_fallback)
    plan = plan_kernel(*args, time_limit_s=20)
    assert calls == ["plain"]
    assert plan.status is Status.FEASIBLE and plan.objective == good


@pytest.mark.parametrize("built_s", [0.1, 2.0])
def test_the_windows_stop_before_the_deadline_by_their_tail(
        large_without_search: pytest.MonkeyPatch, built_s: float) -> None:
    # the windows leave the deadline what their plan's evaluation and listing take:
    # 0.3 s and 0.4 x the model's building (not the 10 % of the limit the search
    # paths keep)
    import time

    real_build = planner_module.build_model
    until: list[float] = []
    start: list[float] = []

    def slow_build(*a: object, **k: object):  # type: ignore[no-untyped-def]
        out = real_build(*a, **k)  # type: ignore[arg-type]
        time.sleep(built_s)  # the model's building, as the planner times it
        return out

    def spy(bm: object, problem: object, restrictions: object, early: object,
            deadline: float, workers: int) -> object:
        until.append(deadline)
        return early.plan  # type: ignore[attr-defined]

    large_without_search.setattr(planner_module, "build_model", slow_build)
    large_without_search.setattr(planner_module, "_neighbourhood_search", spy)
    large_without_search.setattr(planner_module, "_MIN_LP_S", 1e9)  # no LP
    start.append(time.perf_counter())
    plan = plan_kernel(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16},
                       time_limit_s=30)
    assert plan.status is Status.FEASIBLE and len(until) == 1
    model_s = dict(plan.phases)["model"]
    assert model_s >= built_s
    expected = start[0] + 30 - 0.3 - 0.4 * model_s
    # the phase's seconds hold the model's building and a little more (the phase call)
    assert expected - 0.05 <= until[0] <= expected + 0.4 * 0.05 + 0.05


def _cuts_seen(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The ``cuts`` argument of every build_model call plan_kernel makes from here on."""
    real_build = planner_module.build_model
    seen: list[bool] = []

    def spy(*a: object, **k: object):  # type: ignore[no-untyped-def]
        seen.append(bool(k["cuts"]))
        return real_build(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_module, "build_model", spy)
    return seen


@pytest.mark.usefixtures("large_without_search")
@pytest.mark.parametrize(("model_per_problem_s", "cuts"), [(0.0, True), (1e9, False)])
def test_a_large_problem_gets_the_lp_cuts_only_where_its_lp_is_expected_whole(
        monkeypatch: pytest.MonkeyPatch, model_per_problem_s: float, cuts: bool) -> None:
    # the cuts tighten the whole LP; in windows they cost the windows more than they give
    seen = _cuts_seen(monkeypatch)
    monkeypatch.setattr(planner_module, "_MODEL_PER_PROBLEM_S", model_per_problem_s)
    plan = plan_kernel(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16},
                       time_limit_s=20)
    assert plan.status is Status.FEASIBLE
    assert seen == [cuts]


def test_a_small_problem_always_gets_the_lp_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _cuts_seen(monkeypatch)
    monkeypatch.setattr(planner_module, "_MODEL_PER_PROBLEM_S", 1e9)
    plan = plan_kernel(small_dag(4, ops=5), target("x86-avx2"), {"M": 8, "N": 16})
    assert plan.status is Status.OPTIMAL and seen == [True]
