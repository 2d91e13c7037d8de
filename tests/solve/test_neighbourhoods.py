"""Window-by-window improvement of a complete plan (:mod:`planner.solve.neighbourhoods`):
every constraint of the model holds after it, the plan never costs more, and the
windows' searches are deterministic."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from bench_modules import load_bench
from ortools.sat.python import cp_model

from planner.catalog import CatalogRegistry
from planner.errors import PlannerError
from planner.solve.costs import build_problem, evaluate
from planner.solve.lp import complete_hint
from planner.solve.model import (
    BuiltModel,
    add_hint,
    build_model,
    decode_values,
    fallback_assignment,
    solve,
)
from planner.solve.neighbourhoods import Structure, hinted_values, improve, lp_guided, prepare

BINDINGS = {"M": 64, "N": 64}


@pytest.fixture(scope="module")
def started() -> tuple[object, BuiltModel, np.ndarray, int]:
    """The 300-edge synthetic graph of bench/solve.py, its model hinted with the
    heuristic's plan (every variable), and that plan's cost."""
    problem = build_problem(load_bench("solve").synthetic_kernel(300),
                            CatalogRegistry().get("x86-avx2"), BINDINGS)
    bm = build_model(problem, cuts=False)
    plan = fallback_assignment(problem, {})
    assert plan is not None
    add_hint(bm, plan)
    assert complete_hint(bm, 30, 1)
    values = hinted_values(bm)
    assert values is not None and decode_values(bm, values) == plan
    return problem, bm, values, evaluate(problem, plan, {}).objective


def _holds_every_constraint(bm: BuiltModel, values: np.ndarray) -> bool:
    """CP-SAT finds the model feasible with every variable fixed to ``values``."""
    model = bm.model.clone()
    model.clear_hints()
    model.clear_objective()
    for i, value in enumerate(values.tolist()):
        var = model.get_int_var_from_proto_index(i)
        model.add(var == value)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    return solver.solve(model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def test_windows_lower_the_plan_and_keep_every_constraint(started) -> None:  # type: ignore[no-untyped-def]
    problem, bm, values, heuristic = started
    structure = prepare(bm)
    assert structure is not None
    found = improve(structure, values, time.perf_counter() + 60, workers=2, window_vars=150)
    assert found.passes >= 2 and found.searched > 4  # several windows and passes
    assert found.improved > 0
    assert _holds_every_constraint(bm, found.values)
    plan = decode_values(bm, found.values)
    ev = evaluate(problem, plan, {})
    assert ev.feasible, ev.violations[:3]
    optimum = solve(build_model(problem), time_limit_s=60, tie_break=False)
    assert optimum.status == "optimal"
    assert optimum.objective <= ev.objective < heuristic


def test_the_starting_values_are_left_alone(started) -> None:  # type: ignore[no-untyped-def]
    _, bm, values, _ = started
    structure = prepare(bm)
    assert structure is not None
    before = values.copy()
    improve(structure, values, time.perf_counter() + 60, workers=2, window_vars=150)
    assert np.array_equal(values, before)


def test_windows_are_deterministic(started) -> None:  # type: ignore[no-untyped-def]
    _, bm, values, _ = started
    structure = prepare(bm)
    assert structure is not None
    runs = [improve(structure, values, time.perf_counter() + 60, workers=w, window_vars=150)
            for w in (1, 2)]
    assert np.array_equal(runs[0].values, runs[1].values)
    assert runs[0].improved == runs[1].improved


def test_lp_values_a_partial_relaxation_lacks_count_as_zero() -> None:
    from planner.solve.neighbourhoods import window_gains

    values = np.array([1.0, 0.0, 1.0, 1.0])
    window = np.array([0, 0, 1, 1])
    coef = np.array([4.0, 3.0, 2.0, 5.0])
    lp = np.array([0.5, 0.5, np.nan, np.nan])  # window 1 not solved by the LP
    # window 0: 4 - (2 + 1.5) = 0.5; window 1: 2 + 5 - 0 = 7
    assert window_gains(values, window, coef, lp, 2).tolist() == [0.5, 7.0]
    assert window_gains(values, window, coef, None, 2).tolist() == [4.0, 7.0]


def test_a_passed_deadline_searches_nothing(started) -> None:  # type: ignore[no-untyped-def]
    _, bm, values, _ = started
    structure = prepare(bm)
    assert structure is not None
    found = improve(structure, values, time.perf_counter() - 1, workers=2)
    assert (found.searched, found.improved, found.passes) == (0, 0, 0)
    assert np.array_equal(found.values, values)


def test_a_constraint_the_windows_cannot_copy_means_no_windows(started) -> None:  # type: ignore[no-untyped-def]
    _, bm, _, _ = started
    other = BuiltModel(bm.problem, bm.model.clone())
    a, b = other.model.new_int_var(0, 3, "a"), other.model.new_int_var(0, 3, "b")
    other.model.add_all_different([a, b])
    assert prepare(other) is None


@pytest.mark.parametrize(("template", "said"), [
    ("constraints {{ bogus {{ }} }}", "did not parse"),
    ("constraints {{ linear {{ vars: [0] coeffs: [1, 2] domain: [0, 1] }} }}", "rejected"),
], ids=["unparsed", "invalid"])
def test_a_window_cpsat_cannot_take_is_an_internal_error(started, template: str,  # type: ignore[no-untyped-def]
                                                         said: str) -> None:
    _, bm, values, _ = started
    structure = prepare(bm)
    assert structure is not None
    broken = dataclasses.replace(structure, constraints=tuple(
        (refs, template) for refs, _ in structure.constraints))
    with pytest.raises(PlannerError, match=f"internal error.*{said}") as info:
        improve(broken, values, time.perf_counter() + 60, workers=1, window_vars=150)
    assert info.value.kind == "internal"


@pytest.fixture(scope="module")
def relaxed(started) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The LP relaxation's values of the 300-edge model."""
    from planner.solve.lp import relax

    _, bm, _, _ = started
    relaxation = relax(bm, 60)
    assert relaxation is not None and not relaxation.partial
    return relaxation.values


def _objective(structure: Structure, values: np.ndarray) -> int:
    """The search objective of ``values`` (less its constant)."""
    return int(structure.coef @ values)


def test_the_lp_guided_search_frees_only_what_the_lp_disagrees_with(started, relaxed) -> None:  # type: ignore[no-untyped-def]
    problem, bm, values, heuristic = started
    structure = prepare(bm)
    assert structure is not None
    out = values.copy()
    searched, improved = lp_guided(structure, out, relaxed, time.perf_counter() + 60, 2,
                                   batch_vars=200)
    agree = (np.abs(relaxed - values) < 1e-6)
    assert (~agree).sum() > 0 and searched >= 1 and improved >= 1
    assert np.array_equal(out[agree], values[agree])  # what the LP agrees with stays
    assert _holds_every_constraint(bm, out)
    ev = evaluate(problem, decode_values(bm, out), {})
    assert ev.feasible, ev.violations[:3]
    assert ev.objective < heuristic
    assert _objective(structure, out) < _objective(structure, values)


def test_an_lp_that_agrees_everywhere_searches_nothing(started) -> None:  # type: ignore[no-untyped-def]
    _, bm, values, _ = started
    structure = prepare(bm)
    assert structure is not None
    out = values.copy()
    assert lp_guided(structure, out, values.astype(float), time.perf_counter() + 60) == (0, 0)
    unsolved = np.full(len(values), np.nan)  # a partial LP's unsolved windows: not guided
    assert lp_guided(structure, out, unsolved, time.perf_counter() + 60) == (0, 0)
    assert np.array_equal(out, values)


def test_the_lp_guided_search_is_deterministic(started, relaxed) -> None:  # type: ignore[no-untyped-def]
    _, bm, values, _ = started
    structure = prepare(bm)
    assert structure is not None
    runs = []
    for workers in (1, 2):
        out = values.copy()
        lp_guided(structure, out, relaxed, time.perf_counter() + 60, workers, batch_vars=200)
        runs.append(out)
    assert np.array_equal(runs[0], runs[1])


def test_the_widened_lp_guided_search_moves_what_the_plain_one_fixed(started, relaxed) -> None:  # type: ignore[no-untyped-def]
    problem, bm, values, _ = started
    structure = prepare(bm)
    assert structure is not None
    plain = values.copy()
    lp_guided(structure, plain, relaxed, time.perf_counter() + 60, 2, batch_vars=200)
    widened = plain.copy()
    lp_guided(structure, widened, relaxed, time.perf_counter() + 60, 2, batch_vars=200,
              reach=8)
    moved = np.flatnonzero(widened != plain)
    # after the plain search, what the LP agrees with stays there; only a widened search
    # can move a variable whose LP value is the plan's
    agree = np.abs(relaxed - plain) < 1e-6
    assert agree[moved].any()
    assert _holds_every_constraint(bm, widened)
    assert _objective(structure, widened) < _objective(structure, plain)
    ev = evaluate(problem, decode_values(bm, widened), {})
    assert ev.feasible, ev.violations[:3]
