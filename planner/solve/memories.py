"""Explicit Memory as fixed occupants of the problem.

Each allocation with uses becomes a :class:`~planner.solve.problem.MemoryOccupant`: held
wherever its owner runs, with the homes the planner may choose (legal for the execution
binding and accessible to every scope that touches it, the default first), its bytes and
the traffic of its loads and stores in each home, and the versions and stalls a pipeline
wants of it.
"""

from __future__ import annotations

import math

from planner.catalog import Resource, Target
from planner.ir import core
from planner.solve.context import Context, executions_of, latency_cycles, owner_of, tile_shape
from planner.solve.copies import copy_realization
from planner.solve.layouts import align, version_bytes
from planner.solve.problem import MemoryOccupant

#: Ops that read or write an explicit Memory (a copy writes its destination).
MEMORY_OPS = (core.MemLoadOp, core.MemStoreOp, core.CopyAsyncOp)


def memory_occupants(ctx: Context) -> list[MemoryOccupant]:
    out: list[MemoryOccupant] = []
    for alloc in ctx.g.graph["allocs"]:
        op: core.AllocOp = alloc["op"]
        default = ctx.alloc_resource.get(id(op.memory))
        if default is None:
            continue
        uses = [n for n, d in ctx.g.nodes(data=True)
                if isinstance(d["op"], MEMORY_OPS) and d["op"].memory is op.memory]
        if not uses:
            continue
        # allocated per instance of its owner: held wherever the owner runs (the
        # lowering declares it for the whole instance, not around its uses)
        owner = op.owner if op.owner in ctx.parallels else None
        orders = [d["order"] for _, d in ctx.g.nodes(data=True)
                  if owner is None or owner in d["region"]]
        orders = orders or [ctx.nodes[n]["order"] for n in uses]
        lo, hi = min(orders), max(orders) + 1
        maxv, stall = _memory_versions(ctx, uses)
        homes = _memory_homes(ctx, op, default)
        name = "%" + ctx.names.get(op.memory, "memory")
        op.layout.require_defined(ctx.env, f"memory {name}", op.loc)  # S14, if non-empty
        storage = version_bytes(op.layout.storage_elements(ctx.env) * op.dtype.itemsize, maxv)
        traffic = [_memory_traffic_ns(ctx, uses, r) for r in homes]
        out.append(MemoryOccupant(len(out), name,
                                  tuple(r.name for r in homes),
                                  tuple(align(storage, r.alignment) for r in homes),
                                  (lo, hi), op.owner if op.owner in ctx.parallels else "kernel",
                                  maxv, stall, tuple(round(t - traffic[0]) for t in traffic),
                                  tuple(_memory_sync(ctx, op, r) for r in homes)))
    return out


def _memory_homes(ctx: Context, op: core.AllocOp, default: Resource) -> list[Resource]:
    """The homes the planner may choose: legal and accessible to every scope that
    touches the Memory with the operations it applies; the default home first."""
    reachable = ctx.binding.memory(op).reachable
    return [default, *(r for r in reachable if r.name != default.name)]


def _memory_sync(ctx: Context, op: core.AllocOp, res: Resource) -> str | None:
    """The sync rule ordering the Memory's stores before its loads in ``res``: the one
    for the scopes that touch it (the owner's, or the nearest scope above every access),
    named only; its cost is not part of the objective, so it never moves a decision.

    When the instances of a child parallel write windows of it (S16), the rule is the
    one at the join: the instances (other members of the owner's scope) must all have
    written before the owner reads, which a coherent resource needs too (its catalog
    rule for the owner's scope, where it names one)."""
    mb = ctx.binding.memory(op)
    scope = mb.owner_scope
    for s in mb.scopes:
        if not ctx.target.is_ancestor_or_self(scope, s):
            scope = ctx.binding.root
    rule = ctx.fig.sync_rule(res, scope)[0]
    if rule is not None or not any(_windowed(a.op) for a in mb.accesses
                                   if a.scope != mb.owner_scope):
        return rule
    return join_sync_rule(ctx.target, res, scope)


def join_sync_rule(target: Target, res: Resource, scope: str) -> str | None:
    """The catalog's sync rule of ``res`` that orders the members of ``scope`` (the join
    of a child parallel's windowed stores, S16): the rule at ``scope``, else the nearest
    one above it; None when the resource names none."""
    rules = [r for r in res.sync if target.is_ancestor_or_self(r.scope, scope)]
    if not rules:
        return None
    return max(rules, key=lambda r: target.scope_depth(r.scope)).name


def _windowed(op: object) -> bool:
    return isinstance(op, core.MemStoreOp) and op.windowed


def _memory_traffic_ns(ctx: Context, uses: list[str], res: Resource) -> float:
    """Time of the Memory's loads and stores if it lived in ``res``."""
    total = 0.0
    for n in uses:
        d = ctx.nodes[n]
        op = d["op"]
        if isinstance(op, core.CopyAsyncOp):
            real = copy_realization(ctx, op)
            if real.engine is not None or not real.nbytes:
                continue  # the engine's transfer is the copy's own price
            nbytes = real.nbytes  # a synchronous copy stores its window
        else:
            tile = op.result if isinstance(op, core.MemLoadOp) else op.tile
            nbytes = math.prod(tile_shape(ctx, tile)) * tile.type.dtype.itemsize
        scope = ctx.owner_scope[owner_of(ctx, d["region"])]
        total += ctx.fig.ns(ctx.fig.traffic_cycles(nbytes, res, scope), executions_of(ctx, d))
    return total


def _memory_versions(ctx: Context, uses: list[str]) -> tuple[int, tuple[int, ...]]:
    """Versions an explicit Memory wants: stores (copies included) and loads in different
    stages of a running pipeline, or an async copy overlapping the iteration before it is
    waited for (:mod:`planner.realize.copies`), whose transfer is exposed as a stall per
    missing version.  A Memory written in windows (S16) keeps one version: its versions
    must not rotate, and :mod:`planner.realize.pipeline` runs a pipeline that would need
    them in order."""
    if any(_windowed(ctx.nodes[n]["op"]) for n in uses):
        return 1, (0,)  # a window refines the one buffer: a fresh version would lack the rest
    stage_v, stage_stall = _stage_versions(ctx, uses)
    copy_v, copy_stall = _copy_versions(ctx, uses)
    maxv = max(stage_v, copy_v)
    stall = tuple(a + b for a, b in zip(_pad(stage_stall, maxv), _pad(copy_stall, maxv),
                                        strict=True))
    return maxv, stall


def _pad(stall: tuple[int, ...], n: int) -> tuple[int, ...]:
    return stall + (0,) * (n - len(stall))


def _copy_versions(ctx: Context, uses: list[str]) -> tuple[int, tuple[int, ...]]:
    """An overlapped async copy wants its versions; with fewer its transfer is exposed."""
    maxv, exposed = 1, 0.0
    for n in uses:
        d = ctx.nodes[n]
        if not isinstance(d["op"], core.CopyAsyncOp):
            continue
        real = copy_realization(ctx, d["op"])
        if real.versions > 1 and real.engine is not None and real.nbytes:
            maxv = max(maxv, real.versions)
            exposed += ctx.fig.ns(real.nbytes / real.engine.bandwidth, executions_of(ctx, d))
    if maxv == 1:
        return 1, (0,)
    return maxv, tuple(round(exposed * (maxv - k) / (maxv - 1)) for k in range(1, maxv + 1))


def _stage_versions(ctx: Context, uses: list[str]) -> tuple[int, tuple[int, ...]]:
    nodes = ctx.g.nodes
    stores = [n for n in uses if isinstance(nodes[n]["op"], core.MEMORY_WRITE_OPS)]
    loads = [n for n in uses if isinstance(nodes[n]["op"], core.MemLoadOp)]
    dist, window = 0, 1
    for s in stores:
        for ld in loads:
            sd, dd = nodes[s], nodes[ld]
            if (sd.get("pipeline") not in (None, *ctx.ordered)
                    and sd.get("pipeline") == dd.get("pipeline")
                    and sd.get("stage_index") is not None
                    and dd.get("stage_index") is not None):
                dist = max(dist, dd["stage_index"] - sd["stage_index"])
                window = max(window, int(dd.get("window") or 1))
    if dist <= 0 or window <= 1:
        return 1, (0,)
    maxv = min(dist, window - 1) + 1
    latency = 0.0
    for s in stores:  # the store and the producer of what it stores are no longer hidden
        for n in [s, *(u for u, _ in ctx.g.in_edges(s))]:
            d = nodes[n]
            scope = ctx.owner_scope[owner_of(ctx, d["region"])]
            latency += ctx.fig.ns(latency_cycles(ctx, d, scope), executions_of(ctx, d))
    return maxv, tuple(round(latency * (maxv - k) / (maxv - 1)) for k in range(1, maxv + 1))
