"""The user's variable names reach every consumer: plan edges, DOT, loop program, LLVM, MSL."""

from __future__ import annotations

import re

import pytest

import planner
from planner.plan.plan_io import plan_to_dot

# softmax.py: x = X[...]; mx = reduce_max(x); sh = x - broadcast(mx); e = exp(sh);
# s = reduce_sum(e); y = e / broadcast(s)
SOFTMAX_NAMES = ("x", "mx", "sh", "e", "s", "y")


@pytest.fixture(scope="module")
def plan() -> planner.MaterializationPlan:
    return planner.plan("softmax", target="x86-avx2")


def test_plan_edges_name_the_users_values(plan) -> None:
    producers = {e.edge_id.split(" -> ")[0] for e in plan.edges}
    assert {f"%{n}" for n in SOFTMAX_NAMES} <= producers
    assert "%e -> %s#0" in {e.edge_id for e in plan.edges}


def test_dot_labels_carry_the_names(plan) -> None:
    dot = plan_to_dot(plan)
    for n in ("mx", "sh", "e"):
        assert re.search(rf'label="[^"]*%{n}\b', dot), dot


def test_loop_program_and_llvm_name_the_buffers(plan) -> None:
    loops = planner.lower("softmax", plan, emit="loops")
    llvm = planner.lower("softmax", plan, emit="llvm")
    names = [b.name.removeprefix("%") for b in plan.buffers]
    assert set(names) >= {"x", "e"}
    for n in names:
        assert f"buffer %{n}:" in loops
        assert f"%buf.{n} = " in llvm, n
    assert "%view.X = " in llvm


def test_msl_names_the_buffers() -> None:
    msl = planner.lower("softmax", target="apple-m2", emit="msl")
    assert re.search(r"\b(r|tg)_(x|e)\b", msl)
    assert "%x" in msl
