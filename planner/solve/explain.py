"""Explanations: why a plan is infeasible, and why each edge got its decision.

Infeasibility.  The model is rebuilt with every named constraint group (legality of
an edge, the policy for a value, a baseline's rule for an edge, capacity of a
resource at a point) guarded by an assumption literal.  CP-SAT's
``SufficientAssumptionsForInfeasibility`` gives a core; a deletion pass makes it
minimal (each group in it is needed).  Each group is then phrased with numbers: for a
capacity group the model is re-solved with the other core groups only, minimizing the
bytes held in that resource at that point, so the line shows the least the rest of
the core forces in (e.g. ``%As 16,640 B + %Bs 16,896 B = 33,536 B > threadgroup_memory
capacity 32,768 B at point 3 (memory.store(%As), stage load of pipeline k_tiles)``).

Decisions.  :func:`edge_reason` names, for the chosen option, the cheapest alternative
that was not taken and the constraint that blocked it (illegal, policy, baseline,
registers too small or full), or says it is the cheapest legal choice.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.plan.decisions import Baseline, Decision
from planner.solve.baselines import describe
from planner.solve.costs import (
    CHOICES,
    FUSED,
    INLINING,
    MATERIALIZED,
    PRESERVING,
    RECOMPUTED,
    VIRTUAL,
    Assignment,
    Edge,
    Evaluation,
    Problem,
    allowed_choices,
    evaluate,
    illegal_text,
    total,
)
from planner.solve.inline_depth import depth_cut
from planner.solve.model import (
    BuiltModel,
    Group,
    build_model,
    core_groups,
    minimum_occupancy,
)

Restrictions = Mapping[int, frozenset[Decision]]


def fmt_bytes(n: int) -> str:
    return f"{n:,} B"


# --------------------------------------------------------------------------- infeasibility


def explain_infeasible(problem: Problem, restrictions: Restrictions | None = None,
                       baseline: Baseline | None = None, time_limit_s: float = 10.0
                       ) -> tuple[str, ...]:
    """Lines naming the violated constraint groups with their numbers."""
    if problem.static_infeasible:
        return problem.static_infeasible
    bm = build_model(problem, restrictions, assumptions=True)
    core = core_groups(bm, time_limit_s)
    if core is None:
        return ("the solver reported infeasibility, but the infeasibility core could not be "
                f"computed within {time_limit_s:g} s; rerun with a longer --time-limit",)
    core = _minimal(bm, core, time_limit_s)
    lines = [_phrase(problem, restrictions, baseline, g, core, time_limit_s) for g in core]
    return tuple(dict.fromkeys(lines))


def _minimal(bm: BuiltModel, core: list[Group], time_limit_s: float) -> list[Group]:
    """Drop groups the infeasibility does not need (deletion filter, small cores only)."""
    if len(core) > 24:
        return core
    lit = dict(zip((g.name for g in bm.groups), bm.literals, strict=True))
    kept = list(core)
    for g in list(core):
        trial = [k for k in kept if k is not g]
        if trial and _infeasible_with(bm, [lit[k.name] for k in trial], time_limit_s):
            kept = trial
    return kept


def _infeasible_with(bm: BuiltModel, literals: list[object], time_limit_s: float) -> bool:
    from ortools.sat.python import cp_model

    bm.model.ClearAssumptions()
    bm.model.AddAssumptions(literals)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = max(0.1, time_limit_s / 10)
    return solver.Solve(bm.model) == cp_model.INFEASIBLE


def _phrase(problem: Problem, restrictions: Restrictions | None, baseline: Baseline | None,
            g: Group, core: list[Group], time_limit_s: float) -> str:
    if g.kind == "capacity":
        return _phrase_capacity(problem, restrictions, g, core, time_limit_s)
    if g.kind == "policy":
        v = problem.values[g.subject]
        must = "virtual or materialized" if v.policy == "preserve" else "fused or recomputed"
        return f"{v.policy_reason}: every edge of {v.name} must be {must}"
    e = problem.edges[g.subject]
    if g.kind == "baseline" and baseline is not None:
        want = " or ".join(sorted(c.value for c in (restrictions or {}).get(e.index, ())))
        return f"{describe(baseline, problem, e)}: {e.edge_id} must be {want}"
    reasons = [illegal_text(e)] if e.illegal else []
    v = problem.values[e.value]
    bad = [f"{v.placements[q].resource} ({why})" for q, why in enumerate(e.not_admissible)
           if why]
    if bad:
        reasons.append("not admissible in " + ", ".join(dict.fromkeys(bad)))
    return f"{e.edge_id} is restricted by legality: " + "; ".join(reasons)


def _phrase_capacity(problem: Problem, restrictions: Restrictions | None, g: Group,
                     core: list[Group], time_limit_s: float) -> str:
    point = problem.points[g.subject]
    resource = g.resource or "?"
    cap = problem.capacity(resource, point.owner) or 0
    bm = build_model(problem, restrictions, assumptions=True)
    lit = dict(zip((x.name for x in bm.groups), bm.literals, strict=True))
    active = [lit[x.name] for x in core if x is not g and x.name in lit]
    bm.model.ClearAssumptions()
    least = minimum_occupancy(bm, resource, g.subject, active, time_limit_s)
    holders: tuple[tuple[str, int], ...] = ()
    if least is not None:
        occ = next((o for o in evaluate(problem, least, restrictions).occupancy
                    if o.resource == resource and o.point == g.subject), None)
        holders = occ.holders if occ is not None else ()
    held = sum(b for _, b in holders)
    parts = " + ".join(f"{name} {fmt_bytes(b)}" for name, b in holders) or "its holders"
    total_part = f" = {fmt_bytes(held)}" if len(holders) > 1 else ""
    return (f"{parts}{total_part} > {resource} capacity {fmt_bytes(cap)} "
            f"{_where(problem, g.subject, {name for name, _ in holders})} "
            f"[capacity of {resource}]")


def _where(problem: Problem, point: int, holders: set[str] | None = None) -> str:
    """The points over which the holders checked at ``point`` (those named in
    ``holders`` when given: values, Memory and temporaries) are all live."""
    lp = next(lp for lp in problem.live_points if lp.point == point)
    names = {h.split(" ×")[0] for h in holders} if holders else None
    ends = [problem.values[vi].segments[si].end for vi, si in lp.segments
            if names is None or problem.values[vi].name in names]
    ends += [problem.memories[mi].span[1] for mi in lp.memories
             if names is None or problem.memories[mi].name in names]
    ends += [point + 1 for ti in lp.temps
             if names is not None and problem.temps[ti].name in names]
    last = min(ends, default=point + 1) - 1
    pts = [problem.points[i] for i in range(point, last + 1) if i in problem.points]
    if len(pts) <= 1:
        return f"at {problem.points[point].describe()}"
    stages = list(dict.fromkeys(p.stage for p in pts if p.stage))
    pipes = list(dict.fromkeys(p.pipeline for p in pts if p.pipeline))
    where = f"over points {point}..{last}"
    if stages and pipes:
        kind = "stage" if len(stages) == 1 else "stages"
        where += f" ({kind} {', '.join(stages)} of pipeline {', '.join(pipes)})"
    elif pipes:
        where += f" (in pipeline {', '.join(pipes)})"
    return where


# --------------------------------------------------------------------------- decisions


def _isolated(problem: Problem, e: Edge, c: Decision) -> int | None:
    """The price of ``c`` for ``e`` alone (a preserving choice pays the producer once)."""
    v = problem.values[e.value]
    if c is VIRTUAL:
        return total(v.home) if v.register is not None else None
    if c is FUSED:
        return total(e.fused)
    if c is RECOMPUTED:
        return total(e.recompute)
    prices = [total(v.home) + total(v.placements[q].write) + total(r)
              for q, r in enumerate(e.reads) if r is not None]
    return min(prices) if prices else None


def _blocked(problem: Problem, a: Assignment, e: Edge, c: Decision,
             restrictions: Restrictions | None, baseline: Baseline | None) -> str:
    v = problem.values[e.value]
    why = e.why_illegal(c)
    if why:
        return why
    if restrictions and e.index in restrictions and c not in restrictions[e.index]:
        return describe(baseline, problem, e) if baseline else "the baseline forbids it"
    if c not in allowed_choices(problem, e, restrictions):
        return v.policy_reason
    if c is VIRTUAL and v.register is not None:
        cap = problem.capacity(v.register, v.owner)
        if cap is not None and v.reg_bytes > cap:
            return f"{v.register} hold {fmt_bytes(cap)} < {fmt_bytes(v.reg_bytes)}"
        if cap is not None:
            return f"{v.register} ({fmt_bytes(cap)}) are needed by other values over " \
                   f"points {e.span[0]}..{e.span[1] - 1}"
    return "cheaper alone, dearer with the value's other edges (shared producer or buffer)"


def edge_reason(problem: Problem, a: Assignment, ev: Evaluation, e: Edge,
                restrictions: Restrictions | None = None, baseline: Baseline | None = None
                ) -> str:
    """One line: what the decision does and what blocked the cheapest alternative."""
    c = a.choices[e.index]
    v = problem.values[e.value]
    head = _summary(problem, a, e, c)
    mine = _isolated(problem, e, c)
    cheaper = [] if mine is None else sorted(
        (p, i, alt) for i, alt in enumerate(CHOICES) if alt is not c
        and e.legal(alt) and (p := _isolated(problem, e, alt)) is not None and p < mine)
    cut = depth_cut(e)
    if cut is not None and c in PRESERVING:  # refused by the limit, not by the hardware
        head = f"{head}; not inlined: {cut}"
    else:
        cut = None
    if cheaper:
        alt = cheaper[0][2]
        return f"{head}; {alt.value} would cost less but " + _blocked(
            problem, a, e, alt, restrictions, baseline)
    if cut is not None:
        return head
    if baseline is not None and restrictions and e.index in restrictions:
        return f"{head}; {describe(baseline, problem, e)}"
    if (v.policy == "preserve" and c in PRESERVING) or (v.policy == "inline" and c in INLINING):
        return f"{head}; {v.policy_reason}"
    return f"{head}; cheapest legal choice"


def _summary(problem: Problem, a: Assignment, e: Edge, c: Decision) -> str:
    v = problem.values[e.value]
    if c is VIRTUAL:
        return f"kept in {v.register} ({fmt_bytes(v.reg_bytes)})"
    if c is FUSED:
        return f"{v.kind} computed inline in the consumer"
    if c is RECOMPUTED:
        return f"re-derived for this consumer from its sources ({total(e.recompute):,} ns)"
    if c is MATERIALIZED:
        q = a.placement[v.index]
        if q is not None:
            p = v.placements[q]
            sync = f", {p.sync}" if p.sync else ""
            return f"buffered in {p.resource} ({p.layout}{sync})"
    return c.value


__all__ = ["edge_reason", "explain_infeasible", "fmt_bytes"]
