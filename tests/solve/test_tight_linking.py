"""The redundant linking constraints of the CP-SAT model (tighter LP) keep its optimum:
one sum per edge for a disjunction over that edge's choices (home, site) and the
delivery cuts (``held + via + via + x[materialized] >= site``), checked against
exhaustive enumeration on small DAGs whose registers bind and against the model
built without them."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model
from planning_support import exhaustive_optimum, small_dag, target, with_capacity

from planner.solve.costs import build_problem
from planner.solve.model import BuiltModel, build_model, objective_terms

BINDINGS = {"M": 16, "N": 16}


def _problem(seed: int, ops: int):
    t = with_capacity(target("x86-avx2"), "registers", 256)  # two of the 128 B tiles
    return build_problem(small_dag(seed, ops=ops), t, BINDINGS)


def _optimum(bm: BuiltModel) -> tuple[int, int]:
    """(cost optimum without the constant, constraint count) of ``bm``."""
    terms, weight, _ = objective_terms(bm)
    bm.model.Minimize(sum(c * lit for lit, c in terms))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 20
    assert solver.Solve(bm.model) == cp_model.OPTIMAL
    return round(solver.ObjectiveValue()) // weight, len(bm.model.Proto().constraints)


@pytest.mark.parametrize("seed", [2, 4, 5, 6, 9])
def test_linking_cuts_keep_the_exhaustive_optimum(seed: int) -> None:
    problem = _problem(seed, ops=5)
    best, visited = exhaustive_optimum(problem)
    assert visited > 0 and best is not None
    tight, tight_rows = _optimum(build_model(problem))
    loose, loose_rows = _optimum(build_model(problem, cuts=False))
    constant = sum(v for _, v in problem.constant)
    assert tight + constant == best == loose + constant
    assert tight_rows > loose_rows  # the cuts exist here, else this checks nothing


def test_linking_cuts_are_emitted_where_holds_are_guarded() -> None:
    # a larger DAG than exhaustive enumeration affords: the optimum is unchanged
    problem = _problem(3, ops=9)
    tight, tight_rows = _optimum(build_model(problem))
    loose, loose_rows = _optimum(build_model(problem, cuts=False))
    assert tight == loose
    assert tight_rows > loose_rows
