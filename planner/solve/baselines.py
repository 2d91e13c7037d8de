"""Baselines: fixed strategies planned by the same model and priced by the same costs.

A baseline restricts each edge to the choices its strategy makes; the CP-SAT model
still picks the cheapest placement, layout and version count, and the capacity and
legality constraints still apply, so a baseline that cannot run on the target comes
back infeasible with an explanation.  A baseline replaces the planning policy (it is
a complete strategy of its own).

* ``all-materialize``: every edge goes through a buffer.
* ``greedy-fusion`` (XLA-like): a single-consumer elementwise producer is fused into
  its consumer where fusion is legal; every other edge is materialized.
* ``all-virtual``: every edge stays in registers; infeasible when they cannot hold it.

:func:`greedy_assignment` is a cheap heuristic plan (the cheapest legal choice per
edge in isolation, then repaired for capacity); it hints CP-SAT and is the fallback
when the solver finds nothing within its time limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from planner.plan.decisions import Baseline, Decision
from planner.solve.costs import (
    FUSED,
    MATERIALIZED,
    RECOMPUTED,
    VIRTUAL,
    Assignment,
    Edge,
    Problem,
    Value,
    allowed_choices,
    derived_flags,
    is_fusible_kind,
    total,
)
from planner.solve.evaluator import (
    Held,
    evaluate_held,
    first_holders,
    held_at_points,
    overflows,
)
from planner.solve.problem import paused_gc

Restrictions = Mapping[int, frozenset[Decision]]
#: Per edge, ``(isolated price, position in allowed_choices, choice)`` of each allowed
#: choice with a price, where the heuristic has priced them already.
_Prices = dict[int, list[tuple[int, int, Decision]]]


def baseline_restrictions(problem: Problem, baseline: Baseline | str) -> dict[int, frozenset[
        Decision]]:
    """The choices ``baseline`` allows on each edge."""
    baseline = Baseline(baseline)
    out: dict[int, frozenset[Decision]] = {}
    for e in problem.edges:
        if baseline is Baseline.ALL_MATERIALIZE:
            out[e.index] = frozenset({MATERIALIZED})
        elif baseline is Baseline.ALL_VIRTUAL:
            out[e.index] = frozenset({VIRTUAL})
        else:
            out[e.index] = frozenset({_greedy_fusion(problem, e)})
    return out


def _greedy_fusion(problem: Problem, e: Edge) -> Decision:
    v = problem.values[e.value]
    if v.consumers == 1 and is_fusible_kind(v.kind) and e.legal(FUSED):
        return FUSED
    return MATERIALIZED


def describe(baseline: Baseline, problem: Problem, e: Edge) -> str:
    """Why the baseline forces what it forces on ``e`` (for explanations)."""
    if baseline is Baseline.GREEDY_FUSION:
        v = problem.values[e.value]
        if _greedy_fusion(problem, e) is FUSED:
            return f"baseline greedy-fusion fuses single-consumer {v.kind} {v.name}"
        return f"baseline greedy-fusion materializes {v.name} ({v.consumers} consumer(s), " \
               f"{v.kind})"
    return f"baseline {baseline.value} makes every edge " + (
        "virtual" if baseline is Baseline.ALL_VIRTUAL else "materialized")


# --------------------------------------------------------------------------- heuristic


def _isolated_price(problem: Problem, e: Edge, c: Decision) -> int | None:
    v = problem.values[e.value]
    if c is FUSED:
        return total(e.fused)
    if c is RECOMPUTED:
        return total(e.recompute)
    if c is VIRTUAL:
        cap = problem.capacity(v.register, v.owner) if v.register else None
        if v.register is None or (cap is not None and v.reg_bytes * 2 > cap):
            return None  # registers would not hold it comfortably
        return 0
    prices = [total(v.placements[q].write) + total(r) for q, r in enumerate(e.reads)
              if r is not None]
    return min(prices) if prices else None


def greedy_assignment(problem: Problem, restrictions: Restrictions | None = None,
                      start: Sequence[Decision | None] | None = None) -> Assignment | None:
    """A heuristic plan, or None when the heuristic's plan is not feasible.  ``start``:
    a first choice per edge (e.g. a rounded LP solution; None, or a choice not allowed,
    takes the cheapest choice in isolation), repaired the same way."""
    with paused_gc():  # the plans it checks allocate many small objects, none garbage
        return _greedy_assignment(problem, restrictions, start)


def _greedy_assignment(problem: Problem, restrictions: Restrictions | None,
                       start: Sequence[Decision | None] | None) -> Assignment | None:
    choices: list[Decision] = []
    prices: _Prices = {}
    for e in problem.edges:
        allowed = allowed_choices(problem, e, restrictions)
        if not allowed:
            return None
        first = start[e.index] if start is not None else None
        if first is not None and first in allowed:
            choices.append(first)
            continue
        priced = prices[e.index] = [(p, i, c) for i, c in enumerate(allowed)
                                    if (p := _isolated_price(problem, e, c)) is not None]
        choices.append(min(priced)[2] if priced else allowed[-1])
    if not _repair_registers(problem, choices, restrictions, prices):
        return None
    # The sweep above counts only a segment's own virtual edges; the evaluation also
    # holds values over chains of guarded segments.  Its register overflows are repaired
    # the same way (evict the biggest value held there), until it passes or cannot.
    # Overflows are found from what each plan holds; only a plan without any is evaluated
    # (infeasible for another reason, it has nothing to evict either).
    for _ in range(_EVALUATED_REPAIRS):
        placement, versions = _placements(problem, tuple(choices))
        if placement is None:
            return None
        last = None  # what the last plan tried holds, and where it overflows
        tried: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        for k in ("max", "min"):
            vers = tuple(v if k == "max" else 1 for v in versions)
            mems = tuple(m.max_versions if k == "max" else 1 for m in problem.memories)
            if (vers, mems) in tried:
                continue  # nothing has versions to drop: the same assignment again
            tried.add((vers, mems))
            a = Assignment(tuple(choices), placement, vers, mems)
            held = held_at_points(problem, a)
            over = overflows(problem, held)
            if not over and evaluate_held(problem, a, restrictions, held).feasible:
                return a
            last = (held, over)
        if last is None or not _evict_overflows(problem, *last, choices, restrictions, prices):
            return None
    return None


#: Rounds of evaluation-driven register repair before the heuristic gives up.
_EVALUATED_REPAIRS = 20


def _evict_overflows(problem: Problem, listing: list[tuple[tuple[str, int], list[Held]]],
                     over: list[tuple[str, str, int]], choices: list[Decision],
                     restrictions: Restrictions | None, prices: _Prices) -> bool:
    """At every point where a plan holding ``listing`` overflows a register resource
    (``over``: :func:`overflows`), move the biggest value with a virtual edge held there
    out of registers; False when no point changed."""
    registers = {v.register for v in problem.values if v.register}
    held = dict(listing)
    changed = False
    for resource, owner, point in over:
        if resource not in registers:
            continue
        owners = [h.key[1] for h in held.get((owner, point), ())
                  if h.resource == resource and h.key[0] == "value"
                  and isinstance(h.key[1], int)
                  and any(choices[i] is VIRTUAL for i in problem.values[h.key[1]].edges)]
        if not owners:
            continue
        worst = max(owners, key=lambda i: (problem.values[i].reg_bytes, i))
        changed = _evict_priced(problem, worst, choices, restrictions, prices) or changed
    return changed


def _repair_registers(problem: Problem, choices: list[Decision],
                      restrictions: Restrictions | None, prices: _Prices) -> bool:
    """Sweep the checked points; where registers overflow, move the biggest virtual value
    out (its virtual edges take their cheapest other allowed choice).

    Only an evicted value's choices change: what each value's segments hold in registers,
    and its bytes there, are cached per value and dropped when it is evicted.  An
    eviction only takes edges out of registers, so the values with a virtual segment
    at the start are the only ones the sweep ever looks at."""
    values = problem.values
    virtual: dict[int, set[int]] = {}  # value -> its segments with a virtual edge
    for v in values:
        if v.register and any(choices[i] is VIRTUAL for i in v.edges):
            virtual[v.index] = _virtual_segments(v, choices)
    used: dict[int, int] = {}  # value -> its register bytes (every version it keeps)
    empty: set[int] = set()
    for lp in problem.live_points:
        order = [vi for vi, si in lp.segments if si in virtual.get(vi, empty)]
        while order:
            held: dict[str, list[int]] = {}
            for vi in order:
                held.setdefault(values[vi].register, []).append(vi)  # type: ignore[arg-type]
            vs = next((vs for r, vs in held.items()
                       if _overflows(problem, r, lp.owner, vs, choices, used)), None)
            if vs is None:
                break
            worst = max(vs, key=lambda i: (values[i].reg_bytes, i))
            del virtual[worst]  # none left once evicted (else the repair gives up)
            used.pop(worst, None)
            if not _evict_priced(problem, worst, choices, restrictions, prices):
                return False
            order = [vi for vi in order if vi != worst]
    return True


def _virtual_segments(v: Value, choices: list[Decision]) -> set[int]:
    """The segments of ``v`` that some virtual edge covers."""
    virtual = {i for i in v.edges if choices[i] is VIRTUAL}
    if not virtual:
        return set()
    return {si for si, s in enumerate(v.segments) if not virtual.isdisjoint(s.edges)}


def _overflows(problem: Problem, resource: str, owner: str, values: list[int],
               choices: list[Decision], cache: dict[int, int]) -> bool:
    cap = problem.capacity(resource, owner)
    if cap is None:
        return False
    used = 0
    for vi in values:
        got = cache.get(vi)
        if got is None:
            v = problem.values[vi]
            _, _, cross = derived_flags(problem, choices, v)
            got = cache[vi] = v.reg_bytes * (v.max_versions if cross else 1)
        used += got
    return used > cap


def _evict(problem: Problem, vi: int, choices: list[Decision],
           restrictions: Restrictions | None) -> bool:
    return _evict_priced(problem, vi, choices, restrictions, {})


def _evict_priced(problem: Problem, vi: int, choices: list[Decision],
                  restrictions: Restrictions | None, prices: _Prices) -> bool:
    """Move value ``vi``'s virtual edges to their cheapest other choice; False when one
    has none."""
    for i in problem.values[vi].edges:
        if choices[i] is not VIRTUAL:
            continue
        e = problem.edges[i]
        priced = prices.get(i)
        if priced is None:
            priced = [(p, n, c) for n, c in enumerate(allowed_choices(problem, e, restrictions))
                      if (p := _isolated_price(problem, e, c)) is not None]
        others = [x for x in priced if x[2] is not VIRTUAL]
        if not others:
            return False
        choices[i] = min(others)[2]
    return True


def _placements(problem: Problem, choices: tuple[Decision, ...]
                ) -> tuple[tuple[int | None, ...] | None, tuple[int, ...]]:
    placement: list[int | None] = []
    versions: list[int] = []
    edges = problem.edges
    for v in problem.values:
        readers = [edges[i] for i in v.edges if choices[i] is MATERIALIZED]
        cross = first_holders(problem, choices, v)[2] is not None
        versions.append(v.max_versions if cross else 1)
        if not readers:
            placement.append(None)
            continue
        ok = [q for q in range(len(v.placements))
              if all(e.reads[q] is not None for e in readers)]
        if not ok:
            return None, ()
        placement.append(min(ok, key=lambda q: total(v.placements[q].write) + sum(
            total(e.reads[q] or ()) for e in readers)))
    return tuple(placement), tuple(versions)
