"""A lower bound on a problem's objective that needs no search.

:func:`relaxed_bound` drops every constraint between values (capacity, shared
placements, sites): each value alone then takes its cheapest choices, and their sum
cannot exceed what any plan pays.  The planner reports it as the bound of a plan the
search did not prove (where it beats the solver's bound, or where the search never
ran), so a heuristic plan's gap is measured against something better than the constant
every plan pays.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.plan.decisions import Decision
from planner.solve.evaluator import allowed_choices
from planner.solve.problem import (
    FUSED,
    INLINING,
    MATERIALIZED,
    RECOMPUTED,
    VIRTUAL,
    Edge,
    Problem,
    Value,
    total,
)


def relaxed_bound(problem: Problem,
                  restrictions: Mapping[int, frozenset[Decision]] | None = None) -> int:
    """The constant plus, per value, the cheapest way to serve its edges alone, plus, per
    Memory, its cheapest home and version count (each term as :func:`evaluate` charges
    it; a value's placement write and stall, which depend on shared decisions, count
    only their negative parts)."""
    out = total(problem.constant)
    for m in problem.memories:
        out += min(m.home_cost, default=0) + min(m.stall, default=0)  # both always paid
    for v in problem.values:
        if v.edges:
            out += _value_bound(problem, v, restrictions)
    return out


def _value_bound(problem: Problem, v: Value,
                 restrictions: Mapping[int, frozenset[Decision]] | None) -> int:
    # Either every edge inlines (the producer never runs at home) or it runs once and
    # each edge takes its cheapest choice; the write, paid once when some edge is
    # materialized, and a stall only add (unless negative).
    inline: int | None = 0
    home = total(v.home)
    extra = (min(0, min((total(p.write) for p in v.placements), default=0))
             + min(0, min(v.stall, default=0)))  # both may be paid: each negative part
    for i in v.edges:
        e = problem.edges[i]
        prices = {c: p for c in allowed_choices(problem, e, restrictions)
                  if (p := _edge_price(v, e, c)) is not None}
        if not prices:
            return 0  # no plan serves this edge: nothing to bound (the plan is infeasible)
        home += min(prices.values())
        inlined = [p for c, p in prices.items() if c in INLINING]
        inline = None if inline is None or not inlined else inline + min(inlined)
    return min(home + extra, inline) if inline is not None else home + extra


def _edge_price(v: Value, e: Edge, c: Decision) -> int | None:
    """What :func:`evaluate` charges edge ``e`` itself for choice ``c`` (materialized:
    its cheapest admissible read)."""
    if c is FUSED:
        return total(e.fused)
    if c is RECOMPUTED:
        return total(e.recompute)
    if c is VIRTUAL:
        return 0
    assert c is MATERIALIZED
    reads = [total(r) for r in e.reads if r is not None]
    return min(reads) if reads else None
