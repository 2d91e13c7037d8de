"""The price of every choice of one edge and of one value.

An edge's fused and recomputed terms and its forbidden choices; a value's home compute,
the versions and stalls a pipeline wants of it, its register home, the placements it may
be materialized in (resource × layout, with write, sync and layout terms) and the policy's
restriction; and the read of each placement by each consumer, bank conflicts and swizzle
arithmetic included.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from planner.catalog import MmaOperand, Operation, Resource
from planner.ir import core
from planner.ir.graph import edge_id
from planner.plan.decisions import Decision, Policy
from planner.realize.copies import StagedTransfer
from planner.solve.context import (
    Chain,
    Context,
    executions_of,
    latency_cycles,
    node_terms,
    op_cycles,
    owner_of,
    span,
    staged,
    tile_shape,
)
from planner.solve.layouts import (
    align,
    conflict_degree,
    layout_bytes,
    layout_candidates,
    version_bytes,
)
from planner.solve.legality import (
    LOADS,
    fusion_illegal,
    is_recomputable_kind,
    recompute_chain,
    recompute_illegal,
)
from planner.solve.problem import (
    BANK,
    BARRIERS,
    FUSED,
    LAYOUT,
    MATERIALIZED,
    RECOMPUTE,
    RECOMPUTED,
    TRAFFIC,
    VIRTUAL,
    Edge,
    Placement,
    Terms,
    Value,
    replaced,
    terms,
)


def _writer_ops(kind: str) -> tuple[Operation, ...]:
    if kind == "tile.mma":
        return (Operation.MMA_WRITE, Operation.WRITE)
    if kind in LOADS:
        return (Operation.WRITE, Operation.COPY_ASYNC)
    return (Operation.WRITE,)


def _readable(ctx: Context, r: Resource, unit: str, e: Edge) -> bool:
    """Whether ``unit`` (or a member of its subtree) may read a placement in ``r`` for the
    consumer of ``e``: a plain ``read``, or for tile.mma an in-place ``mma_read`` of that
    operand, which the catalog's ``mma_operands`` may restrict (B200: not b from tmem)."""
    if ctx.accessible(r, unit, (Operation.READ,)):
        return True
    if e.consumer_kind != "tile.mma" or not r.supports(Operation.MMA_READ):
        return False
    operand = tuple(MmaOperand)[e.operand]
    return any(ctx.target.mma_operand_allowed(m, r.name, operand)
               for m in ctx.fig.subtree(unit))


def _unit(ctx: Context, d: Mapping[str, object], scope: str) -> str:
    """The scope whose access rights an op's reads and writes use: the unit the catalog
    has execute it (:func:`planner.realize.binding.op_class`), else its owner's scope."""
    op = d.get("op")
    found = ctx.binding.contexts.get(id(op)) if op is not None else None
    return found.scope if found is not None else scope


def _columns_read(kind: str, op: core.Op | None, operand: int) -> bool:
    if kind == "tile.mma":
        return operand == 1
    if kind == "tile.transpose":
        return True
    return isinstance(op, core.ReduceOp) and op.axis == 0


def _chain_cycles(ctx: Context, chain: Chain, scope: str) -> float:
    """Cycles of one re-derivation at ``scope``: every member once (a load's tile read
    through the global resource, shared among the concurrent instances), on whole tiles
    (:func:`~planner.solve.context.op_cycles`)."""
    cycles = 0.0
    for n in chain.members:
        compute, traffic = op_cycles(ctx, ctx.nodes[n], scope, whole=True)
        cycles += compute + traffic
    return cycles


def price_edge(ctx: Context, index: int, key: tuple[str, str, int], value: int) -> Edge:
    u, v, k = key
    data = ctx.g._succ[u][v][k]  # g.edges[u, v, k], without its views
    pd, cd = ctx.nodes[u], ctx.nodes[v]
    illegal: list[tuple[Decision, str]] = []
    pscope = ctx.owner_scope[owner_of(ctx, pd["region"])]
    if ctx.fig.register_home(pscope) is None:
        illegal.append((VIRTUAL, f"{ctx.target.name} has no private resource for {pscope} "
                                 "to keep it in"))
    fuse_why = fusion_illegal(ctx, u, v, data)
    if fuse_why:
        illegal.append((FUSED, fuse_why))
    rec_why = recompute_illegal(ctx, u, v, data, fuse_why)
    if rec_why:
        illegal.append((RECOMPUTED, rec_why))
    cexec = executions_of(ctx, cd)
    fused = node_terms(ctx, u, cexec) if not fuse_why else ()
    recompute: Terms = ()
    if not rec_why:
        scope = ctx.owner_scope[owner_of(ctx, cd["region"])]
        cycles = _chain_cycles(ctx, recompute_chain(ctx, u), scope)
        if data["stage_distance"]:
            cycles += latency_cycles(ctx, pd, scope, whole=True)
        recompute = terms(**{RECOMPUTE: ctx.fig.ns(cycles, cexec)})
    pname, cname = ctx.node_name[u], ctx.node_name[v]
    return Edge(index, edge_id(ctx.node_name, u, v, data["operand"]), value, pname, cname,
                cd["kind"], int(data["operand"]), int(data["bytes_value"] or 0),
                span(ctx, u, v, bool(data["loop_carried"])), int(data["stage_distance"]),
                bool(data["loop_carried"]), tuple(illegal), fused, recompute, (), (),
                _columns_read(cd["kind"], cd["op"], int(data["operand"])),
                lines=(_line(pd), _line(cd)))


def _line(node: Mapping[str, Any]) -> int:
    """The user's source line of a graph node's op (0: a block argument, or unknown)."""
    op = node.get("op")
    return op.loc.line if op is not None else 0


def price_value(ctx: Context, index: int, node: str, edges: list[Edge], policy: Policy) -> Value:
    d = ctx.nodes[node]
    owner = owner_of(ctx, d["region"])
    scope = ctx.owner_scope[owner]
    shape = tile_shape(ctx, d["value"])
    itemsize = d["dtype"].itemsize
    nbytes = math.prod(shape) * itemsize
    pexec = executions_of(ctx, d)
    home = node_terms(ctx, node, pexec)
    maxv = 1
    cross = [e.stage_distance for e in edges if not e.loop_carried]
    if d.get("pipeline") not in (None, *ctx.ordered) and cross and max(cross) > 0:
        maxv = min(max(cross), max(1, int(d.get("window") or 1)) - 1) + 1
    reg = ctx.fig.register_home(scope)
    register, reg_bytes = (None, 0) if reg is None else (
        reg[0].name, align(version_bytes(nbytes, maxv), reg[0].alignment))
    latency = ctx.fig.ns(latency_cycles(ctx, d, scope), pexec)
    stall = tuple(round(latency * (maxv - k) / (maxv - 1)) if maxv > 1 else 0
                  for k in range(1, maxv + 1))
    consumers = len({(e.consumer) for e in edges})
    kind = str(d["kind"])
    placements = _placements(ctx, d, scope, shape, itemsize, edges, pexec, maxv)
    pol, why = _policy(policy, kind, consumers, bool(d.get("expensive")))
    return Value(index, ctx.node_name[node], kind, node, owner, scope, shape, itemsize,
                 nbytes, d["order"], tuple(e.index for e in edges), consumers, home,
                 register, reg_bytes, tuple(placements), maxv, stall, pol, why,
                 expensive=bool(d.get("expensive")))


def _policy(policy: Policy, kind: str, consumers: int, expensive: bool
            ) -> tuple[str | None, str]:
    if consumers < 2:
        return None, ""
    if policy is Policy.DEFAULT:
        return "preserve", f"policy default preserves every multi-consumer definition " \
                           f"({consumers} consumers)"
    if expensive:
        return "preserve", f"policy expensive-only preserves shared {kind.split('.')[-1]} " \
                           f"({consumers} consumers)"
    if is_recomputable_kind(kind):
        return "inline", f"policy expensive-only recomputes shared cheap {kind} in each of " \
                         f"its {consumers} consumers"
    return None, ""


def _placements(ctx: Context, d: Mapping[str, object], scope: str, shape: tuple[int, ...],
                itemsize: int, edges: list[Edge], pexec: int, maxv: int = 1
                ) -> list[Placement]:
    cols = any(e.column_reader for e in edges)
    op = d.get("op")
    how = staged(ctx, op) if isinstance(op, core.LoadOp) else None
    writers = _writer_ops(str(d["kind"]))
    unit = _unit(ctx, d, scope)
    # values alike share their placements: the answer depends on nothing else
    key = (scope, unit, writers, how.landings if how is not None else None, shape, itemsize,
           cols, pexec, maxv)
    found = ctx.placements.get(key)
    if found is None:
        found = ctx.placements[key] = _placements_of(ctx, scope, unit, writers, how, shape,
                                                     itemsize, cols, pexec, maxv)
    return list(found)


def _placements_of(ctx: Context, scope: str, unit: str, writers: tuple[Operation, ...],
                   how: StagedTransfer | None, shape: tuple[int, ...], itemsize: int,
                   cols: bool, pexec: int, maxv: int) -> tuple[Placement, ...]:
    fig = ctx.fig
    out: list[Placement] = []
    nbytes = math.prod(shape) * itemsize
    elements = math.prod(shape)
    for r in ctx.target.resources:
        if r.resource_class == "private":
            continue  # registers hold virtual values; they are not addressable buffers
        if how is not None and r.name not in how.landings:
            continue  # a staged load's value is the buffer its engine lands it in
        _, reason = fig.capacity_for(r, scope)
        if reason or not ctx.accessible(r, unit, writers):
            continue
        sync, sync_cycles = fig.sync_rule(r, scope)
        banks = (r.banks.count, r.banks.width) if r.banks is not None else None
        for lay in layout_candidates(shape, itemsize, banks, cols):
            write = terms(**{
                TRAFFIC: fig.ns(fig.traffic_cycles(nbytes, r, scope), pexec),
                BARRIERS: fig.ns(sync_cycles, pexec),
                LAYOUT: fig.ns(elements / fig.throughput("cheap"), pexec)
                if lay.kind == "swizzled" else 0.0})
            out.append(Placement(r.name, lay, align(version_bytes(
                layout_bytes(shape, itemsize, lay), maxv), r.alignment), write, sync))
    return tuple(out)


def price_reads(ctx: Context, e: Edge, v: Value) -> Edge:
    cd = ctx.nodes[ctx.node_by_name[e.consumer]]
    cscope = ctx.owner_scope[owner_of(ctx, cd["region"])]
    cexec = executions_of(ctx, cd)
    unit = _unit(ctx, cd, cscope)
    # reads alike share their prices: the answer depends on nothing else.  Values alike
    # share their Placement objects (ctx.placements keeps them): keyed by identity, as
    # hashing and comparing the dataclasses costs more than the rest of the read
    key = (cscope, unit, cexec, e.consumer_kind, e.operand, e.bytes, e.column_reader,
           tuple(map(id, v.placements)), v.shape, v.itemsize)
    found = ctx.reads.get(key)
    if found is None:
        found = ctx.reads[key] = _reads(ctx, e, v, cscope, unit, cexec)
    reads, why = found
    illegal = e.illegal
    if all(r is None for r in reads):
        detail = "; ".join(sorted(set(why))) or (
            f"no resource of {ctx.target.name} can be written by {v.scope} for {v.kind}")
        illegal = (*illegal, (MATERIALIZED, f"no admissible resource ({detail})"))
    return replaced(e, illegal=illegal, reads=reads, not_admissible=why)


def _reads(ctx: Context, e: Edge, v: Value, cscope: str, unit: str, cexec: int
           ) -> tuple[tuple[Terms | None, ...], tuple[str, ...]]:
    """The read of each placement of ``v`` by ``e``'s consumer, and why it may not be."""
    fig = ctx.fig
    reads: list[Terms | None] = []
    why: list[str] = []
    for p in v.placements:
        r = ctx.target.resource(p.resource)
        if not _readable(ctx, r, unit, e):
            reads.append(None)
            why.append(f"{cscope} cannot read {r.name} for {e.consumer_kind}"
                       + (f" operand {tuple(MmaOperand)[e.operand]}"
                          if e.consumer_kind == "tile.mma" else ""))
            continue
        base = fig.traffic_cycles(e.bytes, r, cscope)
        degree = 1
        if e.column_reader and r.banks is not None:
            degree = conflict_degree(v.shape, v.itemsize, p.layout, (r.banks.count,
                                                                     r.banks.width))
        layout_cycles = (math.prod(v.shape) / fig.throughput("cheap")
                         if p.layout.kind == "swizzled" else 0.0)
        reads.append(terms(**{TRAFFIC: fig.ns(base, cexec),
                              BANK: fig.ns(base * (degree - 1), cexec),
                              LAYOUT: fig.ns(layout_cycles, cexec)}))
        why.append("")
    return tuple(reads), tuple(why)
