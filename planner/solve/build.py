"""Building the priced planning problem of a kernel on a target.

:func:`build_problem` checks that every size is concrete, indexes the kernel's dataflow
graph, prices every edge and value (:mod:`planner.solve.pricing`), decides how long each
value is held and which temporaries it needs (:mod:`planner.solve.holding`), adds the
explicit Memory (:mod:`planner.solve.memories`), and assembles the per-owner capacities,
the checked program points and the constant every plan pays.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Mapping
from typing import TypeVar

import networkx as nx

from planner.catalog import Target
from planner.errors import Diagnostic, PlannerError
from planner.ir import core
from planner.ir.core import Kernel, LoopKind, LoopOp, ParallelOp
from planner.ir.expr import Expr
from planner.ir.graph import dataflow_graph, live_edges, node_names
from planner.ir.printer import value_names
from planner.ir.types import TileType
from planner.plan.decisions import Policy
from planner.realize.binding import ROOT_OWNER, bind_execution
from planner.realize.pipeline import KernelIndex, pipeline_schedule
from planner.solve.context import Context, executions_of, node_terms, owner_of
from planner.solve.figures import Figures
from planner.solve.holding import Holding
from planner.solve.inline_depth import (
    MAX_INLINE_DEPTH,
    depth_limit_reason,
    hop_within_limit,
    longest_inline_paths,
)
from planner.solve.legality import SINKS
from planner.solve.memories import memory_occupants
from planner.solve.pricing import price_edge, price_reads, price_value
from planner.solve.problem import (
    CHOICES,
    FUSED,
    RECOMPUTED,
    TRAFFIC,
    Edge,
    LivePoint,
    MemoryOccupant,
    Point,
    Problem,
    Temp,
    Terms,
    Value,
    add_terms,
    check_deadline,
    illegal_text,
    paused_gc,
    terms,
)

T = TypeVar("T")


def build_problem(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None = None,
                  policy: Policy = Policy.DEFAULT, *, deadline: float | None = None,
                  max_inline_depth: int = MAX_INLINE_DEPTH) -> Problem:
    """Price every choice of every live edge of ``kernel`` on ``target``.

    Every size must be concrete: unbound symbols raise :class:`PlannerError` naming them.
    Past ``deadline`` (a ``time.perf_counter()`` instant) :class:`OutOfTime` is raised,
    checked between the steps and every few hundred edges or values inside them.
    ``max_inline_depth``: the inline depth limit of every plan of the problem
    (:mod:`planner.solve.inline_depth`).  No cyclic garbage collection runs meanwhile
    (:func:`~planner.solve.problem.paused_gc`: ~40 % of the time on 10,000 edges).
    """
    with paused_gc():
        return _build_problem(kernel, target, bindings, policy, deadline, max_inline_depth)


def _build_problem(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None,
                   policy: Policy, deadline: float | None, max_inline_depth: int) -> Problem:
    if max_inline_depth < 1:
        raise PlannerError(Diagnostic(
            f"max_inline_depth must be at least 1, got {max_inline_depth}"), kind="invalid")
    env = {k: int(v) for k, v in (bindings or {}).items()}
    policy = Policy(policy)
    _check_bound(kernel, env)
    g = dataflow_graph(kernel, env)
    ctx = Context(kernel, target, Figures(target), env, g, value_names(kernel),
                  bind_execution(kernel, target, env))
    _index_regions(ctx)
    ctx.stored_views.update(id(op.view) for op in kernel.walk() if isinstance(op, core.StoreOp))
    _name_nodes(ctx)
    _resolve_allocs(ctx)
    points = _points(ctx)
    edge_keys = live_edges(g)
    producers = sorted({u for u, _, _ in edge_keys} | _value_nodes(g),
                       key=lambda n: g.nodes[n]["order"])
    value_of = {n: i for i, n in enumerate(producers)}
    edges_of: dict[str, list[int]] = {n: [] for n in producers}
    for i, (u, _, _) in enumerate(edge_keys):
        edges_of[u].append(i)
    check_deadline(deadline)
    raw_edges = [_checked(price_edge(ctx, i, key, value_of[key[0]]), i, deadline)
                 for i, key in enumerate(edge_keys)]
    values = [_checked(price_value(ctx, i, n, [raw_edges[j] for j in edges_of[n]], policy),
                       i, deadline) for i, n in enumerate(producers)]
    edges = [_checked(price_reads(ctx, e, values[e.value]), e.index, deadline)
             for e in raw_edges]
    edges = _depth_limited(ctx, values, edges, value_of, max_inline_depth)
    held = Holding(ctx, values, edges, value_of, deadline=deadline)
    values, edges = held.values, held.edges
    temps = held.temps()
    check_deadline(deadline)
    memories = memory_occupants(ctx)
    capacities = _capacities(ctx, values, memories, points)
    live = _live_points(values, memories, points, temps)
    check_deadline(deadline)
    # the constant prices each Memory's traffic in its first home: move the cheapest
    # home's difference into it, so that every home's own term is non-negative
    shifts = [min(m.home_cost, default=0) for m in memories]
    memories = [dataclasses.replace(m, home_cost=tuple(c - d for c in m.home_cost))
                for m, d in zip(memories, shifts, strict=True)]
    constant = add_terms(_constant(ctx, values), terms(**{TRAFFIC: sum(shifts)}))
    used = [r.name for r in target.resources if any(r.name == n for n, _ in capacities)]
    for e in edges:
        if not any(e.legal(c) for c in CHOICES):
            ctx.static_infeasible.append(f"{e.edge_id}: no legal choice ({illegal_text(e)})")
    return Problem(kernel.name, target.name, policy, tuple(sorted(env.items())),
                   tuple(values), tuple(edges), tuple(memories), points, tuple(live),
                   capacities, constant, tuple(ctx.static_infeasible), tuple(used),
                   tuple(held.guards), tuple(temps))


def _depth_limited(ctx: Context, values: list[Value], edges: list[Edge],
                   value_of: Mapping[str, int], limit: int) -> list[Edge]:
    """``edges`` with fusion and recomputation refused where the inline depth limit
    cuts inlining chains (:mod:`planner.solve.inline_depth`)."""
    inlining = (FUSED, RECOMPUTED)
    consumer = [value_of.get(ctx.node_by_name[e.consumer]) for e in edges]
    longest = longest_inline_paths(len(values), lambda vi: [
        consumer[i] for i in values[vi].edges
        if any(edges[i].legal(c) for c in inlining)])
    if max(longest, default=0) <= limit:
        return edges
    out = []
    for e, c in zip(edges, consumer, strict=True):
        if c is not None and not hop_within_limit(longest, e.value, c, limit) and any(
                e.legal(d) for d in inlining):
            why = depth_limit_reason(longest, e.value, c, limit)
            e = dataclasses.replace(e, illegal=(*e.illegal, *(
                (d, why) for d in inlining if e.legal(d))))
        out.append(e)
    return out


def _checked(item: T, i: int, deadline: float | None) -> T:
    """``item``, once every 256 items past ``deadline`` raising :class:`OutOfTime`."""
    if not i & 255:
        check_deadline(deadline)
    return item


def _value_nodes(g: nx.MultiDiGraph) -> set[str]:
    return {n for n, d in g.nodes(data=True) if not d.get("sink") and d.get("value") is not None}


def _check_bound(kernel: Kernel, env: Mapping[str, int]) -> None:
    exprs: list[Expr] = []
    for op in kernel.walk():
        if isinstance(op, (ParallelOp, LoopOp)):
            exprs += [a.extent for a in op.axes]
        if isinstance(op, core.AllocOp):
            exprs += list(op.layout.shape) + list(op.layout.strides)
        for r in op.results:
            if isinstance(r.type, TileType):
                exprs += list(r.type.shape)
    missing = _missing(exprs, env)
    if missing:
        names = ", ".join(sorted(missing))
        raise PlannerError(Diagnostic(
            f"planning kernel {kernel.name!r} needs concrete sizes: unbound symbol(s) "
            f"{names} (bind them, e.g. --bind {sorted(missing)[0]}=128)", kernel.loc),
            kind="unbound")


def _missing(exprs: Iterable[Expr], env: Mapping[str, int]) -> set[str]:
    out: set[str] = set()
    for e in exprs:
        out |= {s for s in e.symbols() if s not in env and not s.startswith("%")}
    return out


def _index_regions(ctx: Context) -> None:
    for op in ctx.kernel.walk():
        if isinstance(op, ParallelOp):
            ctx.parallels[op.label] = op
        elif isinstance(op, LoopOp):
            ctx.loops[op.label] = op
    index = KernelIndex(ctx.kernel, lambda v: ctx.names.get(v, "?"))
    for label, loop in ctx.loops.items():
        if loop.kind is LoopKind.PIPELINE:
            schedule = pipeline_schedule(loop, index)
            if isinstance(schedule, str):  # runs in order: one version of everything
                ctx.ordered[label] = schedule
    ctx.owner_scope[ROOT_OWNER] = ctx.binding.root
    ctx.owner_scope.update(ctx.binding.parallel_scope)
    for _, d in ctx.g.nodes(data=True):
        for label in d["region"]:
            if label in ctx.loops:
                lo, hi = ctx.loop_span.get(label, (d["order"], d["order"]))
                ctx.loop_span[label] = (min(lo, d["order"]), max(hi, d["order"]))


def _name_nodes(ctx: Context) -> None:
    ctx.node_name.update(node_names(ctx.g, ctx.names))
    ctx.node_by_name.update({name: n for n, name in ctx.node_name.items()})


def _resolve_allocs(ctx: Context) -> None:
    for mb in ctx.binding.memory_bindings():
        res = mb.home
        ctx.alloc_resource[id(mb.alloc.memory)] = res
        if res is None:
            op = mb.alloc
            ctx.static_infeasible.append(
                f"Memory %{ctx.names.get(op.memory, '?')} ({mb.resource_class}) owned by "
                f"{op.owner} at scope {mb.owner_scope} has no home on {ctx.target.name}: no "
                f"{mb.resource_class} resource serves {mb.owner_scope} (S17: the owner is "
                "not changed)")


def _points(ctx: Context) -> dict[int, Point]:
    out: dict[int, Point] = {}
    for n, d in ctx.g.nodes(data=True):
        out[d["order"]] = Point(d["order"], f"{ctx.node_name[n]} = {d['kind']}"
                                if not d.get("sink") else ctx.node_name[n],
                                owner_of(ctx, d["region"]), d.get("stage"), d.get("pipeline"))
    return dict(sorted(out.items()))


def _capacities(ctx: Context, values: list[Value], memories: list[MemoryOccupant],
                points: Mapping[int, Point]) -> dict[tuple[str, str], int | None]:
    owners = {p.owner for p in points.values()} | {v.owner for v in values}
    out: dict[tuple[str, str], int | None] = {}
    for owner in sorted(owners):
        scope = ctx.owner_scope[owner]
        reg = ctx.fig.register_home(scope)
        if reg is not None:
            out[(reg[0].name, owner)] = reg[1]
        for r in ctx.target.resources:
            if r.resource_class == "private" and reg is not None and r.name == reg[0].name:
                continue
            cap, reason = ctx.fig.capacity_for(r, scope)
            if not reason:
                out[(r.name, owner)] = cap
    for m in memories:
        for home in m.homes:
            out.setdefault((home, m.owner), ctx.target.resource(home).capacity)
    return out


def _live_points(values: list[Value], memories: list[MemoryOccupant],
                 points: Mapping[int, Point], temps: list[Temp] = ()  # type: ignore[assignment]
                 ) -> list[LivePoint]:
    """Holders live at each point where something starts (other points are dominated).

    Each holder is appended to the live points its ``[start, end)`` spans (found by
    bisection), in index order, so every point's tuples come out sorted: linear in the
    answer's size."""
    others: list[list[tuple[int, int, object]]] = [  # the segments are read in place
        [(m.span[0], m.span[1], m.index) for m in memories],
        [(t.point, t.point + 1, t.index) for t in temps]]
    starts = sorted(({s[0] for v in values for s in v.segments}
                     | {a for kind in others for a, _, _ in kind}) & points.keys())
    held: list[list[list[object]]] = [[[] for _ in starts] for _ in range(3)]
    first = bisect.bisect_left
    out = held[0]
    for v in values:  # a hot loop: a large kernel has some hundred thousand segments
        vi = v.index
        for i, (a, b, _, _) in enumerate(v.segments):
            key = (vi, i)
            for at in out[first(starts, a):first(starts, b)]:
                at.append(key)
    for kind, out in zip(others, held[1:], strict=True):
        for a, b, key in kind:
            for at in out[first(starts, a):first(starts, b)]:
                at.append(key)
    return [LivePoint(p, points[p].owner, tuple(held[0][j]), tuple(held[1][j]),  # type: ignore[arg-type]
                      tuple(held[2][j])) for j, p in enumerate(starts)]


def _constant(ctx: Context, values: list[Value]) -> Terms:
    parts: list[Terms] = [v.home for v in values if not v.edges]
    for n, d in ctx.g.nodes(data=True):
        if d.get("sink") and d["kind"] in SINKS:
            parts.append(node_terms(ctx, n, executions_of(ctx, d)))
    return add_terms(*parts)
