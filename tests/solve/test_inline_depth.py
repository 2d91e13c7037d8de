"""The inline depth limit: no plan fuses or recomputes a value through more than
``max_inline_depth`` consumers inlined further, and the limit cuts no more than it must.

Depths are measured here on the graph of the problem's (or the plan's) inlining edges
with networkx, independently of :mod:`planner.solve.inline_depth`.
"""

from __future__ import annotations

import networkx as nx
import pytest
from planning_support import target

from planner.errors import PlannerError
from planner.ir.core import Kernel
from planner.plan.decisions import Decision, Status
from planner.solve.build import build_problem
from planner.solve.planner import plan_kernel
from planner.solve.problem import FUSED, RECOMPUTED, Problem
from tests.bench_modules import load_bench

BINDINGS = {"M": 8, "N": 70}


def _chain(n: int) -> Kernel:
    return load_bench("solve").softmax_chain(n)


def _inline_graph(problem: Problem) -> nx.DiGraph:
    """Values and sinks, an arc wherever an edge may be fused or recomputed."""
    g = nx.DiGraph()
    for e in problem.edges:
        if e.legal(FUSED) or e.legal(RECOMPUTED):
            head = ("value", e.consumer_value) if e.consumer_value is not None \
                else ("sink", e.index)
            g.add_edge(("value", e.value), head)
    return g


@pytest.mark.parametrize(("n_exp", "limit"), [(10, 3), (40, 8), (40, 32), (70, 32)])
def test_every_inlining_chain_of_the_problem_fits_the_limit(n_exp: int, limit: int) -> None:
    kernel = _chain(n_exp)
    free = nx.dag_longest_path_length(_inline_graph(
        build_problem(kernel, target("x86-avx2"), BINDINGS, max_inline_depth=10_000)))
    limited = build_problem(kernel, target("x86-avx2"), BINDINGS, max_inline_depth=limit)
    longest = nx.dag_longest_path_length(_inline_graph(limited))
    assert longest == min(free, limit)  # within the limit, and no shorter than needed
    cut = [e for e in limited.edges
           if any(why.startswith("the inline depth limit") for _, why in e.illegal)]
    if free <= limit:
        assert not cut  # kernels whose chains fit are not restricted at all
    else:
        # a unary chain of ``free`` inlinable edges is cut into pieces of at most
        # ``limit`` edges: at least ceil(free / limit) - 1 cuts, and each cut refuses
        # both inlining choices
        assert len(cut) >= -(-free // limit) - 1
        assert all({c for c, _ in e.illegal} >= {FUSED, RECOMPUTED} for e in cut)


def test_planned_depths_stay_within_the_limit_and_cuts_are_explained() -> None:
    kernel = _chain(40)
    plan = plan_kernel(kernel, target("x86-avx2"), BINDINGS, max_inline_depth=6)
    assert plan.status is Status.OPTIMAL
    g = nx.DiGraph()
    for e in plan.edges:
        if e.decision in (Decision.FUSED, Decision.RECOMPUTED):
            g.add_edge(e.producer, f"{e.consumer}#{e.edge_id}" if e.consumer_kind in (
                "tile.store", "memory.store") else e.consumer)
    assert g.number_of_edges() > 20  # the chain is still mostly fused
    assert nx.dag_longest_path_length(g) <= 6
    cuts = [e for e in plan.edges if "the inline depth limit of 6" in e.reason]
    assert cuts and all(e.decision in (Decision.VIRTUAL, Decision.MATERIALIZED)
                        for e in cuts)
    assert all("not inlined: the inline depth limit of 6" in e.reason for e in cuts)


def test_the_limit_is_part_of_the_plans_identity() -> None:
    kernel = _chain(12)
    t = target("x86-avx2")
    a = plan_kernel(kernel, t, BINDINGS, max_inline_depth=4)
    b = plan_kernel(kernel, t, BINDINGS)
    assert a.content_hash != b.content_hash
    assert a.objective > b.objective  # cuts cost a store and a load each


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(PlannerError, match="max_inline_depth must be at least 1, got 0"):
        build_problem(_chain(3), target("x86-avx2"), BINDINGS, max_inline_depth=0)
