"""The state of one problem build and the graph arithmetic every pricing step reads.

:class:`Context` holds the kernel's dataflow graph, its regions, names and execution
binding, and the caches of one :func:`~planner.solve.build.build_problem` call (execution
counts, access checks, recompute chains).  Around it: the parallel instance that owns a
node, how often a node executes, tile shapes, the compute and traffic cycles of one
execution of an op and its exposed latency, a node's priced terms, and the ``[def, use)``
span of a value for one use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from planner.catalog import Backend, Operation, Resource, Target
from planner.ir import core
from planner.ir.core import Kernel, LoopOp, ParallelOp
from planner.ir.expr import Expr
from planner.ir.types import TileType
from planner.realize.binding import ExecutionBinding
from planner.realize.copies import CopyRealization, StagedTransfer, staged_transfer
from planner.solve.figures import Figures
from planner.solve.problem import COMPUTE, TRAFFIC, Placement, Terms, terms


@dataclass
class Context:
    """Mutable state while building one problem (private to the builder modules)."""

    kernel: Kernel
    target: Target
    fig: Figures
    env: dict[str, int]
    g: nx.MultiDiGraph
    names: dict[core.Value, str]
    binding: ExecutionBinding
    parallels: dict[str, ParallelOp] = field(default_factory=dict)
    loops: dict[str, LoopOp] = field(default_factory=dict)
    ordered: dict[str, str] = field(default_factory=dict)  # pipeline label -> why in order
    owner_scope: dict[str, str] = field(default_factory=dict)
    loop_span: dict[str, tuple[int, int]] = field(default_factory=dict)
    alloc_resource: dict[int, Resource | None] = field(default_factory=dict)
    node_name: dict[str, str] = field(default_factory=dict)
    node_by_name: dict[str, str] = field(default_factory=dict)
    static_infeasible: list[str] = field(default_factory=list)
    chains: dict[str, Chain] = field(default_factory=dict)
    stored_views: set[int] = field(default_factory=set)  # ids of views some op stores
    execs: dict[int, int] = field(default_factory=dict)
    access: dict[tuple[str, str, tuple[Operation, ...]], bool] = field(default_factory=dict)
    copies: dict[int, CopyRealization] = field(default_factory=dict)  # id(copy op)
    transfers: dict[int, StagedTransfer | None] = field(default_factory=dict)  # id(view op)
    #: ``g.nodes`` as a plain dict (node -> its data dict): read by the hundred thousand
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    shapes: dict[core.Value, tuple[int, ...]] = field(default_factory=dict)
    cycles: dict[tuple[int, str], tuple[float, float]] = field(default_factory=dict)
    node_terms: dict[tuple[str, int], Terms] = field(default_factory=dict)

    preds: dict[str, list[str]] = field(default_factory=dict)  # node -> in-edge sources
    placements: dict[tuple[object, ...], tuple[Placement, ...]] = field(default_factory=dict)
    reads: dict[tuple[object, ...], tuple[tuple[Terms | None, ...], tuple[str, ...]]] = field(
        default_factory=dict)  # :func:`planner.solve.pricing.price_reads`'s, per kind of read
    chain_steps: dict[str, tuple[str | None, list[tuple[str, bool, str | None]]]] = field(
        default_factory=dict)  # :func:`planner.solve.legality.recompute_chain`'s, per node

    def __post_init__(self) -> None:
        self.nodes.update(self.g.nodes(data=True))

    def producers(self, node: str) -> list[str]:
        """The source of each in-edge of ``node`` (a list: ``g.in_edges`` is slow), cached."""
        found = self.preds.get(node)
        if found is None:
            found = self.preds[node] = [u for u, keys in self.g.pred[node].items()
                                        for _ in keys]  # g.in_edges(node)'s order
        return found

    def accessible(self, r: Resource, scope: str, ops: tuple[Operation, ...]) -> bool:
        key = (r.name, scope, ops)
        if key not in self.access:
            self.access[key] = self.fig.accessible(r, scope, ops)
        return self.access[key]


@dataclass(frozen=True, slots=True)
class Chain:
    """What recomputing a value re-derives: the value and its recomputable ancestors.

    ``members`` are graph nodes the consumer re-derives (loads re-read from their view,
    elementwise ops, broadcasts, transposes, full, iota) whatever their own edges
    decided; the chain stops at values that cannot be recomputed (reductions, mma
    results, loop carries) and at values of another parallel instance, which are read
    as their edges decided.  ``why_not``: why no consumer may recompute through it.
    """

    members: frozenset[str]
    why_not: str | None = None


def owner_of(ctx: Context, region: tuple[str, ...]) -> str:
    for label in reversed(region):
        if label in ctx.parallels:
            return label
    return "kernel"


def executions_of(ctx: Context, d: Mapping[str, object]) -> int:
    key = int(d["order"])  # type: ignore[call-overload]
    if key not in ctx.execs:
        ctx.execs[key] = _count_executions(ctx, d)
    return ctx.execs[key]


def _count_executions(ctx: Context, d: Mapping[str, object]) -> int:
    instances = eval_int(d["instances"], ctx.env)  # type: ignore[arg-type]
    if instances <= 0:
        return 0
    waves = -(-instances // max(1, ctx.target.costs.concurrent_instances))
    trips = 1
    for label in d["loops"]:  # type: ignore[attr-defined]
        for a in ctx.loops[label].axes:
            trips *= max(0, eval_int(a.extent, ctx.env))
    return waves * trips


def tile_shape(ctx: Context, v: core.Value) -> tuple[int, ...]:
    found = ctx.shapes.get(v)
    if found is None:
        assert isinstance(v.type, TileType)
        found = ctx.shapes[v] = tuple(eval_int(e, ctx.env) for e in v.type.shape)
    return found


def clamped_shape(ctx: Context, v: core.Value) -> tuple[float, ...]:
    """``v``'s tile shape, each dimension the mean part of it an instance computes on.
    The llvm-cpu backend clamps an mma operand loaded (or stored whole into the Memory
    it reads) from a view window with fill 0 to what the view holds, so tiles of ``t``
    over a view extent ``E`` average ``E / ceil(E / t)`` (edge tiles do remainder-sized
    work); other backends compute whole tiles."""
    shape = tile_shape(ctx, v)
    src = v.owner
    if ctx.target.backend is not Backend.LLVM_CPU:
        return shape
    if isinstance(src, core.MemLoadOp) and isinstance(src.state.owner, core.MemStoreOp) \
            and not src.state.owner.windowed:
        src = src.state.owner.tile.owner
    if not isinstance(src, core.LoadOp) or src.fill != 0.0 or len(src.shape) != len(shape):
        return shape
    views = (eval_int(e, ctx.env) for e in src.view.type.shape)  # type: ignore[attr-defined]
    return tuple(e / -(-e // t) if t > 0 and e > 0 else float(min(t, max(e, 0)))
                 for t, e in zip(shape, views, strict=True))


def eval_int(e: Expr, env: Mapping[str, int]) -> int:
    return int(e.evaluate(env))


def _memory_resource(ctx: Context, op: core.Op) -> Resource | None:
    mem = getattr(op, "memory", None)
    return ctx.alloc_resource.get(id(mem)) if mem is not None else None


def op_cycles(ctx: Context, d: Mapping[str, object], scope: str) -> tuple[float, float]:
    """(compute, traffic) cycles of one execution of the node's op, cached."""
    key = (int(d["order"]), scope)  # type: ignore[call-overload]
    found = ctx.cycles.get(key)
    if found is None:
        found = ctx.cycles[key] = _op_cycles(ctx, d, scope)
    return found


def _op_cycles(ctx: Context, d: Mapping[str, object], scope: str) -> tuple[float, float]:
    op = d["op"]
    kind = str(d["kind"])
    fig = ctx.fig
    if isinstance(op, (core.LoadOp, core.StoreOp)) and staged(ctx, op) is not None:
        return 0.0, staged(ctx, op).cycles()  # type: ignore[union-attr]  # by its engine
    if isinstance(op, (core.LoadOp, core.StoreOp, core.MemLoadOp, core.MemStoreOp)):
        tile = op.results[0] if isinstance(op, (core.LoadOp, core.MemLoadOp)) else op.tile
        shape = tile_shape(ctx, tile)
        assert isinstance(tile.type, TileType)
        nbytes = math.prod(shape) * tile.type.dtype.itemsize
        res = (fig.global_resource if isinstance(op, (core.LoadOp, core.StoreOp))
               else _memory_resource(ctx, op))
        return 0.0, (fig.traffic_cycles(nbytes, res, scope) if res is not None else 0.0)
    if isinstance(op, core.CopyAsyncOp):
        from planner.solve.copies import copy_cycles  # it reads this module's Context

        return copy_cycles(ctx, op, scope)
    if isinstance(op, core.MmaOp):
        m, k = clamped_shape(ctx, op.a)[-2:]
        n = clamped_shape(ctx, op.b)[-1]
        return 2.0 * m * n * k / fig.throughput("mma"), 0.0
    if isinstance(op, core.ReduceOp):
        return math.prod(tile_shape(ctx, op.x)) / fig.throughput("cheap"), 0.0
    cls = str(d["cost_class"])
    if cls in ("cheap", "transcendental") and kind != "loop.carry":
        return float(d["elements_value"] or 0) / fig.throughput(cls), 0.0  # type: ignore[arg-type]
    return 0.0, 0.0


def staged(ctx: Context, op: core.LoadOp | core.StoreOp) -> StagedTransfer | None:
    """How a view load/store is staged by a copy engine (None: a plain access), cached."""
    if id(op) not in ctx.transfers:
        ctx.transfers[id(op)] = staged_transfer(ctx.target, ctx.binding, op, ctx.env)
    return ctx.transfers[id(op)]


def latency_cycles(ctx: Context, d: Mapping[str, object], scope: str) -> float:
    compute, traffic = op_cycles(ctx, d, scope)
    op = d["op"]
    source = 0.0
    if isinstance(op, core.LoadOp) and ctx.fig.global_resource is not None:
        source = ctx.fig.global_resource.latency
    elif isinstance(op, core.MemLoadOp):
        res = _memory_resource(ctx, op)
        source = res.latency if res is not None else 0.0
    return compute + traffic + source


def node_terms(ctx: Context, node: str, executions: int) -> Terms:
    """The terms of ``node``'s op run ``executions`` times, cached."""
    key = (node, executions)
    found = ctx.node_terms.get(key)
    if found is None:
        found = ctx.node_terms[key] = _node_terms(ctx, node, executions)
    return found


def _node_terms(ctx: Context, node: str, executions: int) -> Terms:
    d = ctx.nodes[node]
    scope = ctx.owner_scope[owner_of(ctx, d["region"])]
    compute, traffic = op_cycles(ctx, d, scope)
    return terms(**{COMPUTE: ctx.fig.ns(compute, executions),
                    TRAFFIC: ctx.fig.ns(traffic, executions)})


def _loops_entered(ctx: Context, pd: Mapping[str, object], cd: Mapping[str, object]
                   ) -> list[str]:
    if not cd["loops"]:
        return []
    inner = set(pd["loops"])  # type: ignore[arg-type]
    return [lp for lp in cd["loops"] if lp not in inner]  # type: ignore[attr-defined]


def span(ctx: Context, u: str, v: str, carried: bool, inclusive: bool = False,
         in_place: bool = False) -> tuple[int, int]:
    """``[def, use)`` of ``u``'s value for a use at node ``v`` (the reported lifetime).

    ``inclusive`` gives the occupancy interval instead: the value is still held while
    the use is computed (its reader and the result it writes coexist), unless the use
    updates a loop carry ``in_place`` (element by element into the carry's own buffer).
    """
    pd, cd = ctx.nodes[u], ctx.nodes[v]
    start, use = pd["order"], cd["order"]
    last = 1 if inclusive else 0
    if carried:  # the yielded value lives to the loop end, then becomes the carry
        return start, ctx.loop_span[cd["loop"]][1] + 1
    if cd["kind"] == "loop.carry":  # an initial value is consumed at loop entry
        return start, max(use + last, start + 1)
    if pd["kind"] == "loop.carry" and pd["loop"] not in cd["loops"]:
        start = ctx.loop_span[pd["loop"]][1] + 1  # loop result: after the last iteration
    entered = _loops_entered(ctx, pd, cd)
    if entered:
        use = ctx.loop_span[entered[0]][1] + 1
    elif not in_place:
        use += last
    return start, max(use, start + 1)
