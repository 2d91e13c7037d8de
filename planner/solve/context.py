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
from planner.realize.edges import mean_granule, mean_valid
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
    cycles: dict[tuple[int, str, bool], tuple[float, float]] = field(default_factory=dict)
    node_terms: dict[tuple[str, int], Terms] = field(default_factory=dict)
    computed: dict[core.Value, tuple[float, ...]] = field(default_factory=dict)
    row_means: dict[int, float] | None = None  # id(value) -> mean rows (llvm-cpu row clamp)
    masked: dict[int, float] | None = None  # id(value) -> mean masked columns computed
    whole: bool = False  # while pricing whole tiles (:func:`op_cycles`)

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
            found = self.preds[node] = [u for u, keys in self.g._pred[node].items()
                                        for _ in keys]  # g.in_edges(node)'s order, no views
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
    found = ctx.execs.get(key)
    if found is None:
        found = ctx.execs[key] = _count_executions(ctx, d)
    return found


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


#: (tile, view extent) of one dimension of a fill-0 view window; None: not one
_Span = tuple[int, int] | None
_ELEMENTWISE = (core.UnaryOp, core.BinaryOp, core.SelectOp, core.CastOp)


def _llvm_cpu(ctx: Context) -> bool:
    """Whether edge tiles are priced clamped: the llvm-cpu backend, not pricing whole."""
    return ctx.target.backend is Backend.LLVM_CPU and not ctx.whole


def zero_spans(ctx: Context, v: core.Value) -> tuple[_Span, ...]:
    """Per dimension of ``v``, the (tile, view extent) past whose valid part
    (:func:`~planner.realize.edges.valid`) it is 0: a load (or a whole Memory copy of
    one) of a view window with fill 0, or a transpose of one; None where not known."""
    shape = tile_shape(ctx, v)
    src = v.owner
    if isinstance(src, core.MemLoadOp) and isinstance(src.state.owner, core.MemStoreOp) \
            and not src.state.owner.windowed:
        src = src.state.owner.tile.owner
    if isinstance(src, core.TransposeOp) and len(src.perm) == len(shape):
        inner = zero_spans(ctx, src.x)
        return tuple(inner[p] for p in src.perm)
    if not isinstance(src, core.LoadOp) or src.fill != 0.0 or len(src.shape) != len(shape):
        return (None,) * len(shape)
    views = (eval_int(e, ctx.env) for e in src.view.type.shape)  # type: ignore[attr-defined]
    return tuple((t, e) for t, e in zip(shape, views, strict=True))


def _mean(span: _Span, full: int) -> float:
    return float(full) if span is None else mean_valid(*span)


def clamped_shape(ctx: Context, v: core.Value) -> tuple[float, ...]:
    """``v``'s tile shape, each dimension the mean part of it an instance computes on
    (llvm-cpu: edge tiles do remainder-sized work, see :mod:`planner.realize.edges`;
    other backends compute whole tiles), cached.

    Rows: the row clamp of :func:`planner.lower.cpu.rows.clamp_rows` (:func:`_row_means`).
    Fill-0 windows: what :func:`~planner.lower.cpu.rows.zero_extents` knows, for a value
    only mmas read (:func:`~planner.lower.cpu.zero_tiles.clamp_zero_tiles`); a transpose
    of one runs its rows rounded up to the granule. Masked columns (attention's keys
    past the sequence): the columns of the mma they mask, rounded up to the granule
    (:func:`~planner.lower.cpu.rows.clamp_masked_columns`)."""
    found = ctx.computed.get(v)
    if found is None:
        found = ctx.computed[v] = _computed(ctx, v)
    return found


def _computed(ctx: Context, v: core.Value) -> tuple[float, ...]:
    shape = tile_shape(ctx, v)
    if not _llvm_cpu(ctx) or not shape:
        return tuple(float(t) for t in shape)
    out = [float(t) for t in shape]
    rows = _row_means(ctx).get(id(v))
    if rows is not None:
        out[0] = min(out[0], rows)
    if _mma_only(ctx, v):
        spans = zero_spans(ctx, v)
        if isinstance(v.owner, core.TransposeOp) and len(shape) == 2:
            x = zero_spans(ctx, v.owner.x)
            spans = (x[1], None)
            if x[0] is not None:
                out[1] = min(out[1], mean_granule(*x[0]))
        out = [min(o, _mean(sp, t)) for o, sp, t in zip(out, spans, shape, strict=True)]
    cols = _masked_columns(ctx, v)
    if cols is not None:
        out[-1] = min(out[-1], cols)
    return tuple(out)


def _consumers(ctx: Context, v: core.Value) -> list[core.Op | None]:
    node = _node_of(ctx, v)
    return [] if node is None else [  # g.out_edges(node, data=True)'s order, no views
        d["consumer"] for keys in ctx.g._succ[node].values() for d in keys.values()]


def _node_of(ctx: Context, v: core.Value) -> str | None:
    for key in (f"op{id(v.owner)}", f"carry{id(v)}"):
        d = ctx.nodes.get(key)
        if d is not None and d.get("value") is v:
            return key
    return None


def _mma_only(ctx: Context, v: core.Value) -> bool:
    """Whether every reader of ``v`` is an mma, or a transpose only mmas read."""
    readers = _consumers(ctx, v)
    return bool(readers) and all(
        isinstance(r, core.MmaOp) or (isinstance(r, core.TransposeOp) and _mma_only(
            ctx, r.results[0]) and not isinstance(v.owner, core.TransposeOp))
        for r in readers)


def _masked_columns(ctx: Context, v: core.Value) -> float | None:
    """The mean columns computed of a value over columns masked to -inf
    (``where(j < B, mma(a, b), -inf)`` and elementwise ops of it), else None."""
    if ctx.masked is None:
        ctx.masked = {}
        for d in ctx.nodes.values():  # in program order: operands first
            got = _masked_of(ctx, d["op"], ctx.masked)
            if got is not None:
                ctx.masked[id(d["value"])] = got
    return ctx.masked.get(id(v))


def _masked_of(ctx: Context, op: core.Op | None, known: Mapping[int, float]
               ) -> float | None:
    if isinstance(op, core.SelectOp) and isinstance(op.b.owner, core.FullOp) \
            and op.b.owner.value == float("-inf") and isinstance(op.a.owner, core.MmaOp):
        span = zero_spans(ctx, op.a.owner.b)[-1]
        return None if span is None else mean_granule(*span)
    if isinstance(op, _ELEMENTWISE):
        shape = tile_shape(ctx, op.results[0])
        return next((known[id(x)] for x in op.operands() if id(x) in known
                     and tile_shape(ctx, x) == shape), None)
    return None


def _row_means(ctx: Context) -> dict[int, float]:
    """id(value) -> the mean rows an instance computes of it, for the row values of each
    parallel instance whose stores all write rows of one view dimension 0 (the clamp of
    :func:`planner.lower.cpu.rows.clamp_rows`), cached."""
    if ctx.row_means is None:
        ctx.row_means = {}
        for label in ctx.parallels:
            ctx.row_means.update(_instance_rows(ctx, label))
    return ctx.row_means


def _instance_rows(ctx: Context, label: str) -> dict[int, float]:
    stores = [(n, d["op"]) for n, d in ctx.nodes.items() if isinstance(d["op"], core.StoreOp)
              and owner_of(ctx, d["region"]) == label]
    kinds = {(tile_shape(ctx, op.tile)[0], eval_int(op.view.type.shape[0], ctx.env))
             for _, op in stores if tile_shape(ctx, op.tile)}
    if len(kinds) != 1:
        return {}
    (tile, extent), = kinds
    rows = mean_valid(tile, extent)
    seen: dict[int, float] = {}
    pred = ctx.g._pred  # g.in_edges(n, data=True)'s order: its plain dicts, no views
    todo = [(u, d["value"]) for n, _ in stores
            for u, keys in pred[n].items() for d in keys.values()]
    while todo:
        node, v = todo.pop()
        if id(v) in seen or owner_of(ctx, ctx.nodes[node]["region"]) != label:
            continue
        seen[id(v)] = rows
        todo += [(u, x) for u, keys in pred[node].items() for e in keys.values()
                 if _row_operand(ctx, ctx.nodes[node], x := e["value"], tile)]
    return seen


def _row_operand(ctx: Context, d: Mapping[str, Any], x: core.Value, tile: int) -> bool:
    """Whether row ``r`` of node ``d``'s value reads row ``r`` of its operand ``x``."""
    op = d["op"]
    if d["kind"] == "loop.carry":
        return True
    if isinstance(op, core.MmaOp):
        return x is op.a or x is op.acc
    if isinstance(op, core.ReduceOp):
        return op.axis != 0
    if isinstance(op, core.BroadcastOp):
        return 0 in op.dims
    shape = tile_shape(ctx, x)
    return isinstance(op, _ELEMENTWISE) and bool(shape) and shape[0] == tile


def store_shape(ctx: Context, op: core.StoreOp) -> tuple[float, ...]:
    """The mean part of a stored tile inside the view (llvm-cpu edge stores)."""
    shape = tile_shape(ctx, op.tile)
    if not _llvm_cpu(ctx):
        return tuple(float(t) for t in shape)
    views = [eval_int(e, ctx.env) for e in op.view.type.shape]  # type: ignore[attr-defined]
    if len(views) != len(shape):
        return tuple(float(t) for t in shape)
    return tuple(mean_valid(t, e) for t, e in zip(shape, views, strict=True))


def eval_int(e: Expr, env: Mapping[str, int]) -> int:
    return int(e.evaluate(env))


def _memory_resource(ctx: Context, op: core.Op) -> Resource | None:
    mem = getattr(op, "memory", None)
    return ctx.alloc_resource.get(id(mem)) if mem is not None else None


def op_cycles(ctx: Context, d: Mapping[str, object], scope: str, whole: bool = False
              ) -> tuple[float, float]:
    """(compute, traffic) cycles of one execution of the node's op, cached. ``whole``:
    on whole tiles, as a re-derivation runs (the llvm-cpu backend clamps edge work on
    the buffer tiles of an instance, not inside what a consumer recomputes)."""
    key = (int(d["order"]), scope, whole)  # type: ignore[call-overload]
    found = ctx.cycles.get(key)
    if found is None:
        found = ctx.cycles[key] = _op_cycles(ctx, d, scope) if not whole else \
            _whole_cycles(ctx, d, scope)
    return found


def _whole_cycles(ctx: Context, d: Mapping[str, object], scope: str) -> tuple[float, float]:
    """:func:`_op_cycles` with every tile whole (the clamped shapes set aside meanwhile)."""
    clamped = ctx.computed
    ctx.computed = {}
    ctx.whole = True
    try:
        return _op_cycles(ctx, d, scope)
    finally:
        ctx.computed, ctx.whole = clamped, False


def _op_cycles(ctx: Context, d: Mapping[str, object], scope: str) -> tuple[float, float]:
    op = d["op"]
    kind = str(d["kind"])
    fig = ctx.fig
    if isinstance(op, (core.LoadOp, core.StoreOp)) and staged(ctx, op) is not None:
        return 0.0, staged(ctx, op).cycles()  # type: ignore[union-attr]  # by its engine
    if isinstance(op, (core.LoadOp, core.StoreOp, core.MemLoadOp, core.MemStoreOp)):
        tile = op.results[0] if isinstance(op, (core.LoadOp, core.MemLoadOp)) else op.tile
        assert isinstance(tile.type, TileType)
        nbytes = math.prod(_moved_shape(ctx, op, tile)) * tile.type.dtype.itemsize
        res = (fig.global_resource if isinstance(op, (core.LoadOp, core.StoreOp))
               else _memory_resource(ctx, op))
        return 0.0, (fig.traffic_cycles(nbytes, res, scope) if res is not None else 0.0)
    if isinstance(op, core.CopyAsyncOp):
        from planner.solve.copies import copy_cycles  # it reads this module's Context

        return copy_cycles(ctx, op, scope)
    if isinstance(op, core.MmaOp):
        m, n, k = mma_extents(ctx, op)
        return 2.0 * m * n * k / fig.throughput("mma"), 0.0
    if isinstance(op, core.ReduceOp):
        return math.prod(clamped_shape(ctx, op.x)) / fig.throughput("cheap"), 0.0
    cls = str(d["cost_class"])
    if cls in ("cheap", "transcendental") and kind != "loop.carry":
        elements = (math.prod(clamped_shape(ctx, op.results[0])) if isinstance(op, core.Op)
                    and op.results and isinstance(op.results[0].type, TileType)
                    else float(d["elements_value"] or 0))  # type: ignore[arg-type]
        return elements / fig.throughput(cls), 0.0
    return 0.0, 0.0


def _moved_shape(ctx: Context, op: core.Op, tile: core.Value) -> tuple[float, ...]:
    """The mean shape a view load or store moves (whole tiles for Memory copies)."""
    if isinstance(op, core.LoadOp):
        return clamped_shape(ctx, tile)
    if isinstance(op, core.StoreOp):
        return store_shape(ctx, op)
    return tuple(float(t) for t in tile_shape(ctx, tile))


def mma_extents(ctx: Context, op: core.MmaOp) -> tuple[float, float, float]:
    """The mean (m, n, k) an instance of ``op`` computes: m the rows of ``a`` (row clamp
    or fill-0 window), n the columns of ``b``, k the least of ``a``'s columns and
    ``b``'s rows (the llvm-cpu mma clamps to its operands' fill-0 windows)."""
    a, b = clamped_shape(ctx, op.a), clamped_shape(ctx, op.b)
    za, zb = zero_spans(ctx, op.a), zero_spans(ctx, op.b)
    ta, tb = tile_shape(ctx, op.a), tile_shape(ctx, op.b)
    if not _llvm_cpu(ctx):
        return float(ta[-2]), float(tb[-1]), float(ta[-1])
    m = min(a[-2], _mean(za[-2], ta[-2]))
    n = min(b[-1], _mean(zb[-1], tb[-1]))
    k = min(a[-1], b[-2], _mean(za[-1], ta[-1]), _mean(zb[-2], tb[-2]))
    return m, n, k


def staged(ctx: Context, op: core.LoadOp | core.StoreOp) -> StagedTransfer | None:
    """How a view load/store is staged by a copy engine (None: a plain access), cached."""
    if id(op) not in ctx.transfers:
        ctx.transfers[id(op)] = staged_transfer(ctx.target, ctx.binding, op, ctx.env)
    return ctx.transfers[id(op)]


def latency_cycles(ctx: Context, d: Mapping[str, object], scope: str, whole: bool = False
                   ) -> float:
    compute, traffic = op_cycles(ctx, d, scope, whole)
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
