"""The CP-SAT model's 0-1 variable maker (:func:`planner.solve.model.new_literal`)."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

import planner.solve.model as model_module


def _check(make) -> None:
    m = cp_model.CpModel()
    named, plain = make(m, "x0_v"), make(m)
    proto = m.Proto()
    assert [list(proto.variables[v.Index()].domain) for v in (named, plain)] == [[0, 1], [0, 1]]
    assert proto.variables[named.Index()].name == "x0_v"
    assert proto.variables[plain.Index()].name == ""
    m.add_bool_or([named.Not(), plain.Not()])
    m.add_implication(plain, named)
    m.maximize(named + 2 * plain)
    solver = cp_model.CpSolver()
    assert solver.solve(m) == cp_model.OPTIMAL
    # both true is refused by the clause: the best is named alone (1) against plain's
    # implication forcing named (which would make both true)
    assert (solver.boolean_value(named), solver.boolean_value(plain)) == (True, False)


def test_new_literal_makes_named_and_unnamed_literals() -> None:
    # the pinned ortools (.ci/constraints.txt) takes the shared-domain path
    assert model_module.new_literal.__name__ == "shared"
    _check(model_module.new_literal)


def test_new_literal_falls_back_to_new_bool_var(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def __init__(self, *args: object) -> None:
            raise TypeError("another ortools")

    monkeypatch.setattr(model_module.cp_model, "IntVar", Broken)
    make = model_module._literal_maker()
    monkeypatch.undo()
    assert make.__name__ != "shared"  # the fallback, not the fast path
    _check(make)
