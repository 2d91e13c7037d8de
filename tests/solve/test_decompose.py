"""Solving a CP-SAT model part by part (``planner.solve.decompose``) gives the whole
model's plan: the same optimum, the same lexicographic tie-break, the sum of the bounds."""

from __future__ import annotations

import time

from ortools.sat.python import cp_model
from planning_support import kernel, target
from test_plan_budget import repeated_softmax

from planner.solve import build_problem, model
from planner.solve.decompose import (
    _greatest_parts,
    _Joint,
    _literal,
    _orders,
    solve_parts,
    split,
    tie_break_parts,
)
from planner.solve.model import _solver, build_model, lex_greatest, objective_terms, solve

# registers bind at every softmax (4×16 f32 tiles), and the softmaxes share no live range
BINDINGS = {"M": 100, "N": 16}


def _problem(times: int = 3) -> model.Problem:
    return build_problem(repeated_softmax(times), target("x86-avx2"), BINDINGS)


def test_independent_softmaxes_are_independent_parts() -> None:
    bm = build_model(_problem(3))
    assert bm.capacity_exprs  # the capacity sums bind, and each stays inside its part
    terms, _, _ = objective_terms(bm)
    parts = split(bm.model, terms, batch=1, min_vars=0)
    assert parts is not None and len(parts) == 3
    n = len(bm.model.Proto().variables)
    owners = [i for p in parts for i in p.index]
    assert sorted(owners) == list(range(n))  # every variable in exactly one part
    assert sum(len(p.model.Proto().constraints) for p in parts) \
        == len(bm.model.Proto().constraints)
    assert sum(len(p.terms) for p in parts) == len(terms)


def test_parts_give_the_whole_models_plan_and_objective() -> None:
    p = _problem(3)
    whole = solve(build_model(p), time_limit_s=30)
    parts = solve_parts(build_model(p), time_limit_s=30, batch=1, min_vars=0)
    assert whole.status == parts.status == "optimal"
    assert whole.canonical and parts.canonical
    assert parts.assignment == whole.assignment
    assert parts.objective == whole.objective == parts.bound == whole.bound


def test_bound_is_the_sum_of_the_parts_bounds() -> None:
    # each part minimized on its own with real CP-SAT: the optima (and so the bounds, all
    # proved) add up to the objective and bound solve_parts reports
    p = _problem(2)
    bm = build_model(p)
    terms, weight, scale = objective_terms(bm)
    own_sum = 0
    for part in split(bm.model, terms, batch=1, min_vars=0) or []:
        own = [(_literal(part, i), c) for i, c in part.terms]
        part.model.Minimize(sum(c * lit for lit, c in own))
        solver = _solver(30, 2)
        assert solver.Solve(part.model) == cp_model.OPTIMAL
        own_sum += round(solver.BestObjectiveBound())
    result = solve_parts(build_model(p), time_limit_s=30, batch=1, min_vars=0)
    offset = model.total(p.constant)
    assert result.bound == offset + own_sum // weight * scale == result.objective


def test_small_or_connected_models_are_solved_whole() -> None:
    bm = build_model(_problem(3))
    terms, _, _ = objective_terms(bm)
    assert split(bm.model, terms) is None  # under the size worth splitting
    assert solve_parts(bm) is None


def test_tie_break_of_parts_is_the_whole_models() -> None:
    # two independent exactly-one choices, each a three-way tie; the order interleaves
    # the parts: the greatest optimum of each part, over its share of the order, makes up
    # the whole model's greatest optimum
    m = cp_model.CpModel()
    a = [m.NewBoolVar(f"a{i}") for i in range(3)]
    b = [m.NewBoolVar(f"b{i}") for i in range(3)]
    m.AddExactlyOne(a)
    m.AddExactlyOne(b)
    order = [b[2], a[1], b[1], a[0], a[2], b[0]]
    parts = split(m, [], batch=1, min_vars=0)
    assert parts is not None and len(parts) == 2
    orders = _orders(parts, order)
    got: dict[int, bool] = {}
    for part in parts:
        part.model.Minimize(0)
        s = _solver(5, 1)
        assert s.Solve(part.model) == cp_model.OPTIMAL
        best, ok = lex_greatest(part.model, [], orders[id(part)], 0, s, 1,
                                time.perf_counter() + 10)
        assert ok
        for whole, own in part.index.items():
            got[whole] = best.BooleanValue(part.model.GetBoolVarFromProtoIndex(own))
    m.Minimize(0)
    first = _solver(5, 1)
    assert first.Solve(m) == cp_model.OPTIMAL
    whole_best, proved = lex_greatest(m, [], order, 0, first, 1, time.perf_counter() + 10)
    assert proved
    expected = [whole_best.BooleanValue(lit) for lit in order]
    assert [got[lit.Index()] for lit in order] == expected == \
        [True, True, False, False, False, False]


def test_tie_break_part_by_part_is_the_whole_models() -> None:
    # the whole model's proven optimum, then the tie-break: on the whole model, and on
    # each independent softmax alone (the planner's path for large models)
    p = _problem(3)
    bm = build_model(p)
    terms, _, _ = objective_terms(bm)
    bm.model.Minimize(sum(c * lit for lit, c in terms))
    first = _solver(30, 2)
    assert first.Solve(bm.model) == cp_model.OPTIMAL
    value = round(first.ObjectiveValue())
    deadline = time.perf_counter() + 60
    whole, proved = lex_greatest(bm.model, terms, model.tiebreak_order(bm), value, first, 2,
                                 deadline)
    assert proved
    by_parts = tie_break_parts(bm, terms, first, 2, deadline, min_vars=0)
    assert by_parts is not None
    assignment, parts_proved = by_parts
    assert parts_proved
    assert assignment == model.decode(bm, whole)
    assert solve(build_model(p)).assignment == assignment


def test_tiny_components_share_parts_and_keep_the_whole_models_tie_break() -> None:
    # 400 independent three-way ties (3 variables each): one part apiece unbatched, two
    # parts batched (``small`` = 64); one proof does not settle a batch whose ties move
    # up, so its components are redone one by one: the same greatest optimum
    m = cp_model.CpModel()
    groups = [[m.NewBoolVar(f"g{g}_{i}") for i in range(3)] for g in range(400)]
    for lits in groups:
        m.AddExactlyOne(lits)
    order = [lits[(g * 7) % 3] for g, lits in enumerate(groups)] + \
        [lit for lits in groups for lit in lits]
    assert len(split(m, [], batch=1, min_vars=0) or []) == 400
    parts = split(m, [], batch=1000, min_vars=0, small=64)
    assert parts is not None and [(len(p.index), p.components) for p in parts] == \
        [(1002, 334), (198, 66)]
    m.Minimize(0)
    first = _solver(5, 1)
    assert first.Solve(m) == cp_model.OPTIMAL
    joint = _Joint(0)
    joint.values = [bool(x) for x in first.ResponseProto().solution]
    deadline = time.perf_counter() + 60
    unsettled: set[int] = set()
    _greatest_parts(parts, order, joint, 1, deadline, unsettled)
    singles = [p for p in split(m, [], batch=1, min_vars=0) or []
               if next(iter(p.index)) in unsettled]
    assert _greatest_parts(singles, order, joint, 1, deadline)
    # the greatest optimum, by hand: each group's first literal in the order is set
    expected = [lit is lits[(g * 7) % 3] for g, lits in enumerate(groups) for lit in lits]
    assert [joint.values[lit.Index()] for lits in groups for lit in lits] == expected


def _another_optimum(part, order_lits, solver) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``part`` has an optimum other than ``solver``'s on ``order_lits``."""
    m = part.model.Clone()
    own = [(_literal(part, i), c) for i, c in part.terms]
    m.Add(sum(c * lit for lit, c in own) <= round(solver.ObjectiveValue()))
    m.AddBoolOr([lit.Not() if solver.BooleanValue(lit) else lit for lit in order_lits])
    return _solver(30, 1).Solve(m) == cp_model.OPTIMAL


def test_search_by_parts_is_one_plan_whatever_the_workers_and_the_limit() -> None:
    # the attention case of test_determinism with tied optima: its largest part has two
    # optima (checked first, so the test keeps its premise); one deterministic worker per
    # part gives one plan over worker counts and time limits, marked canonical, at the
    # whole model's optimum
    p = build_problem(kernel("attention"), target("x86-avx2"), {"L": 128, "S": 1, "D": 3})
    bm = build_model(p)
    terms, _, _ = objective_terms(bm)
    parts = split(bm.model, terms, batch=1, min_vars=0)
    assert parts is not None and len(parts) > 1
    largest = max(parts, key=lambda q: len(q.index))
    largest.model.Minimize(sum(c * _literal(largest, i) for i, c in largest.terms))
    first = _solver(30, 1)
    assert first.Solve(largest.model) == cp_model.OPTIMAL
    lits = [largest.literal(lit.Index()) for lit in model.tiebreak_order(bm)
            if lit.Index() in largest.index]
    assert _another_optimum(largest, lits, first)
    results = [solve_parts(build_model(p), time_limit_s=limit, workers=workers, batch=1,
                           min_vars=0) for workers, limit in ((1, 20), (2, 20), (2, 60),
                                                              (2, 20))]
    assert all(r is not None and r.status == "optimal" and r.canonical for r in results)
    assert len({r.assignment for r in results}) == 1  # type: ignore[union-attr]
    whole = solve(build_model(p), time_limit_s=30)
    assert {r.objective for r in results} == {whole.objective}  # type: ignore[union-attr]


def _two_pass_solver(monkeypatch, first_calls: int, second_limit: float | None):  # type: ignore[no-untyped-def]
    """Make solve_parts' first ``first_calls`` searches stop at their first solution
    (FEASIBLE, unproved) and the later ones stop after ``second_limit`` s (None: as
    asked)."""
    import planner.solve.decompose as decompose

    real = decompose._solver
    calls = []

    def solver(limit: float, workers: int, seed: int = 0) -> cp_model.CpSolver:
        calls.append(limit)
        s = real(limit, workers, seed)
        if len(calls) <= first_calls:
            s.parameters.stop_after_first_solution = True
        elif second_limit is not None:
            s.parameters.max_time_in_seconds = second_limit
        return s

    monkeypatch.setattr(decompose, "_solver", solver)
    return calls


def test_a_second_search_that_finds_nothing_keeps_the_first_solution(monkeypatch) -> None:
    p = _problem(3)
    n_parts = len(split(build_model(p).model, objective_terms(build_model(p))[0],
                        batch=1, min_vars=0) or [])
    calls = _two_pass_solver(monkeypatch, n_parts, 1e-6)
    import planner.solve.decompose as decompose

    def no_fallback(*_: object, **__: object) -> None:
        raise AssertionError("every part has a solution: the heuristic is not needed")

    monkeypatch.setattr(decompose, "fallback_assignment", no_fallback)
    result = solve_parts(build_model(p), time_limit_s=30, workers=1, batch=1, min_vars=0)
    assert len(calls) > n_parts  # the second pass ran, and found nothing in 1 µs
    assert result is not None and result.status == "feasible" and not result.canonical
    # the first pass's solutions, not the heuristic's fallback: each part's first
    # solution, whose objective is at least the optimum
    optimum = solve(build_model(p), time_limit_s=30).objective
    assert result.objective >= optimum
    assert result.assignment is not None
    assert model.evaluate(p, result.assignment).objective >= optimum
    assert result.bound <= optimum


def test_a_part_proved_by_the_second_search_is_the_first_searchs_plan(monkeypatch) -> None:
    # the second search starts afresh (no hint from the first), so a proof there gives
    # the plan a first search with enough time gives: canonical
    p = _problem(3)
    plain = solve_parts(build_model(p), time_limit_s=30, workers=1, batch=1, min_vars=0)
    n_parts = len(split(build_model(p).model, objective_terms(build_model(p))[0],
                        batch=1, min_vars=0) or [])
    calls = _two_pass_solver(monkeypatch, n_parts, None)
    again = solve_parts(build_model(p), time_limit_s=30, workers=1, batch=1, min_vars=0)
    assert len(calls) == 2 * n_parts
    assert plain is not None and again is not None
    assert again.status == plain.status == "optimal" and again.canonical and plain.canonical
    assert again.assignment == plain.assignment and again.objective == plain.objective


def test_renumbered_parts_keep_a_constraint_without_a_kind() -> None:
    # more parts than FEW_PARTS (renumbered); one constraint has only an enforcement
    # literal (what an empty bool_and becomes): copying it must not invent a kind
    from planner.solve.decompose import FEW_PARTS

    m = cp_model.CpModel()
    pairs = [(m.NewBoolVar(f"a{i}"), m.NewBoolVar(f"b{i}")) for i in range(FEW_PARTS + 2)]
    for a, b in pairs:
        m.AddBoolOr([a, b])
    m.Proto().constraints.add().enforcement_literal.append(pairs[0][0].Index())
    terms = [(a, 1) for a, _ in pairs] + [(b, 2) for _, b in pairs]
    m.Minimize(sum(c * lit for lit, c in terms))
    whole = _solver(10, 1)
    assert whole.Solve(m) == cp_model.OPTIMAL
    parts = split(m, terms, batch=1, min_vars=0)
    assert parts is not None and len(parts) > FEW_PARTS
    total_value = 0
    for part in parts:
        part.model.Minimize(sum(c * _literal(part, i) for i, c in part.terms))
        s = _solver(10, 1)
        assert s.Solve(part.model) == cp_model.OPTIMAL
        total_value += round(s.ObjectiveValue())
    assert total_value == round(whole.ObjectiveValue()) == len(pairs)


def test_every_part_gets_a_turn_when_the_limit_is_short(monkeypatch) -> None:
    # parts that use up their whole first share (here: each search sleeps out its limit,
    # then stops at its first solution); under a 1 s limit on one thread the floor of
    # MIN_PART_S must not starve the last parts, or the heuristic replaces every part
    import planner.solve.decompose as decompose

    real = decompose._solver
    limits: list[float] = []

    class Slow(cp_model.CpSolver):
        def Solve(self, m, callback=None):  # type: ignore[no-untyped-def, override]
            time.sleep(self.parameters.max_time_in_seconds * 0.95)
            self.parameters.stop_after_first_solution = True
            return super().Solve(m)

    def solver(limit: float, workers: int, seed: int = 0) -> cp_model.CpSolver:
        limits.append(limit)
        s = Slow()
        s.parameters.copy_from(real(limit, workers, seed).parameters)
        return s

    monkeypatch.setattr(decompose, "_solver", solver)

    def no_fallback(*_: object, **__: object) -> None:
        raise AssertionError("every part has a solution: the heuristic is not needed")

    monkeypatch.setattr(decompose, "fallback_assignment", no_fallback)
    p = _problem(3)
    result = solve_parts(build_model(p), time_limit_s=1.0, workers=1, batch=1, min_vars=0)
    assert len(limits) >= 3 and sum(limits[:3]) <= 1.0 + 1e-9
    assert result is not None and result.status in ("feasible", "optimal")


def test_an_infeasible_part_stops_the_other_searches(monkeypatch) -> None:
    # two parts on two threads: one made infeasible (CP-SAT proves it at once), the other
    # a search that would run out its 20 s limit unless it is stopped
    import planner.solve.decompose as decompose

    real = decompose._solver
    stopped: list[bool] = []

    class Slow(cp_model.CpSolver):
        def __init__(self) -> None:
            super().__init__()
            self._stop = False

        def Solve(self, m, callback=None):  # type: ignore[no-untyped-def, override]
            status = super().Solve(m)
            if status == cp_model.INFEASIBLE:
                return status
            until = time.perf_counter() + self.parameters.max_time_in_seconds
            while not self._stop and time.perf_counter() < until:
                time.sleep(0.005)
            stopped.append(self._stop)
            return status

        def stop_search(self) -> None:  # type: ignore[override]
            self._stop = True
            super().stop_search()

    def solver(limit: float, workers: int, seed: int = 0) -> cp_model.CpSolver:
        s = Slow()
        s.parameters.copy_from(real(limit, workers, seed).parameters)
        return s

    monkeypatch.setattr(decompose, "_solver", solver)
    bm = build_model(_problem(2))
    terms, _, _ = objective_terms(bm)
    parts = split(bm.model, terms, batch=1, min_vars=0)
    assert parts is not None and len(parts) == 2
    v = bm.model.GetIntVarFromProtoIndex(min(parts[1].index))
    bm.model.Add(v >= 1)
    bm.model.Add(v <= 0)
    t0 = time.perf_counter()
    result = solve_parts(bm, time_limit_s=20.0, workers=2, batch=1, min_vars=0)
    assert result is not None and result.status == "infeasible"
    assert time.perf_counter() - t0 < 5.0
    # the other search was told to stop (or refused, when the infeasible part was
    # proved before it entered)
    assert stopped in ([True], [])


def test_a_part_without_a_solution_takes_the_heuristics_choices_there_only(
        monkeypatch) -> None:
    # the searches of the second of three parts find nothing (1 ns each); the plan is the
    # other parts' optima with the heuristic's choices on that part's edges
    import planner.solve.decompose as decompose

    p = _problem(3)
    bm = build_model(p)
    parts = split(bm.model, objective_terms(bm)[0], batch=1, min_vars=0)
    assert parts is not None and len(parts) == 3
    starved = set(parts[1].index)
    real = decompose._solver
    calls: list[int] = []

    def solver(limit: float, workers: int, seed: int = 0) -> cp_model.CpSolver:
        calls.append(1)
        s = real(limit, workers, seed)
        if len(calls) in (2, 4):  # part 1's first and second search (one thread, in order)
            s.parameters.max_time_in_seconds = 1e-9
        return s

    monkeypatch.setattr(decompose, "_solver", solver)
    result = solve_parts(build_model(p), time_limit_s=30, workers=1, batch=1, min_vars=0)
    assert len(calls) == 4 and result is not None and result.status == "feasible"
    whole = solve(build_model(p), time_limit_s=30).assignment
    heuristic = model.fallback_assignment(p)
    assert whole is not None and heuristic is not None
    for (e, _), lit in bm.x.items():
        source = heuristic if lit.Index() in starved else whole
        assert result.assignment.choices[e] is source.choices[e], e  # type: ignore[union-attr]
    assert {lit.Index() in starved for lit in bm.x.values()} == {True, False}
    assert result.objective == model.evaluate(p, result.assignment).objective  # type: ignore[arg-type]
    assert result.objective >= solve(build_model(p), time_limit_s=30).objective


def test_fill_reads_a_heuristic_plan_without_memory_fields() -> None:
    # heuristic plans leave memory_versions / memory_homes empty: 1 version, home 0
    from types import SimpleNamespace

    from planner.solve.problem import Assignment

    m = cp_model.CpModel()
    home0, home1, v1, v2 = (m.new_bool_var(n) for n in ("h0", "h1", "v1", "v2"))
    bm = SimpleNamespace(x={}, y={}, u={}, mv={(0, 1): v1, (0, 2): v2},
                         mh={(0, 0): home0, (0, 1): home1})
    joint = _Joint(4)
    joint.fill(bm, Assignment((), (), ()), {0, 1, 2, 3})  # type: ignore[arg-type]
    assert joint.values == [True, False, True, False]
