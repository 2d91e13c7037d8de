"""The kernel's Tile dataflow as a networkx graph: what the planner decides over.

Nodes are the ops that produce or consume Tiles (loads, elementwise ops,
reductions, mma, memory loads, stores) plus one node per loop-carried Tile
(``loop.carry``), so a recurrence such as ``acc`` is an explicit cycle.  Edges are
live def→use edges of Tile values, one per (value, consumer) pair, carrying the
bytes of the value, the pipeline stage distance between producer and consumer,
and whether the edge closes a loop.  Explicit Memory allocations are not
decisions: they are listed in ``graph.graph["allocs"]`` as fixed occupants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from planner.errors import Diagnostic, PlannerError, Severity
from planner.ir import core
from planner.ir.core import Block, Kernel, LoopKind, LoopOp, Op, ParallelOp, Value
from planner.ir.expr import Expr, product
from planner.ir.types import TileType


class CostClass:
    CHEAP = "cheap"
    TRANSCENDENTAL = "transcendental"
    MMA = "mma"
    MEMORY = "memory"
    NONE = "none"


def cost_class(op: Op) -> str:
    """Which catalog throughput figure prices one element of ``op``."""
    if isinstance(op, core.UnaryOp):
        return CostClass.TRANSCENDENTAL if op.fn.expensive else CostClass.CHEAP
    if isinstance(op, (core.BinaryOp, core.SelectOp, core.CastOp, core.ReduceOp)):
        return CostClass.CHEAP
    if isinstance(op, core.MmaOp):
        return CostClass.MMA
    if isinstance(op, (core.LoadOp, core.StoreOp, core.MemLoadOp)):
        return CostClass.MEMORY
    return CostClass.NONE


def op_kind(op: Op) -> str:
    fn = getattr(op, "fn", None)
    return f"{op.SPEC.name}.{fn.value}" if fn is not None else op.SPEC.name


@dataclass(frozen=True, slots=True)
class RegionInfo:
    path: tuple[str, ...]
    parallel_extents: tuple[Expr, ...]
    pipeline: LoopOp | None
    loops: tuple[LoopOp, ...]


def _elements(t: TileType) -> Expr:
    return t.num_elements()


def _eval(e: Expr, env: Mapping[str, int] | None) -> int | None:
    if env is None or not e.symbols() <= set(env):
        return None
    return e.evaluate(env)


#: Ops the IR, verifier and interpreter know but planning and lowering do not yet.
UNPLANNABLE_OPS: tuple[type[Op], ...] = ()


def window_store_errors(kernel: Kernel) -> list[Diagnostic]:
    """The verifier's S16 errors of a kernel with windowed ``memory.store`` ops: planning
    and lowering write each window into the one buffer of its Memory, which is sound only
    where z3 proved the instances' windows disjoint and inside the Memory, so they refuse
    what the verifier refutes (overlapping windows with the two instances and the element
    as counterexample, windows outside the Memory, unproved ones).  Empty without
    windowed stores (the verifier is not run then)."""
    if not any(isinstance(op, core.MemStoreOp) and op.windowed for op in kernel.walk()):
        return []
    from planner.ir.verify import collect_diagnostics  # lazily: its S16 checks load z3

    return [d for d in collect_diagnostics(kernel)
            if d.rule == "S16" and d.severity is Severity.ERROR]


def writing_parallel(op: core.MemStoreOp) -> ParallelOp | None:
    """The outermost parallel around ``op`` below the declaration of its Memory, if any:
    the child region whose instances write windows of an ancestor's Memory (S16)."""
    alloc = op.memory.owner
    home = alloc.parent if isinstance(alloc, Op) else None
    found, block = None, op.parent
    while block is not None and block is not home and block.parent is not None:
        region = block.parent
        if isinstance(region, ParallelOp):
            found = region
        block = region.parent
    return found


def refuse_unplannable(kernel: Kernel) -> None:
    """Raise PlannerError (kind ``unsupported``) naming each op planning cannot handle.

    Today there are none (asynchronous copies are planned since issue 12; how each runs
    is :mod:`planner.realize.copies`).  A kernel whose windowed stores the verifier
    refutes (S16, :func:`window_store_errors`) raises kind ``invalid-ir``.  Called by
    :func:`dataflow_graph`, which planning and lowering under a plan both build.
    """
    found: dict[str, list[Op]] = {}
    for op in kernel.walk():
        if isinstance(op, UNPLANNABLE_OPS):
            found.setdefault(op.SPEC.name, []).append(op)
    diags = []
    for name, ops in found.items():
        more = f" (and {len(ops) - 1} more)" if len(ops) > 1 else ""
        diags.append(Diagnostic(
            f"kernel {kernel.name!r} uses {name} at line {ops[0].loc.line}{more}: planning "
            "it is not built yet, so planning and lowering refuse it (the verifier and "
            "the reference interpreter support it: `planner check`, `planner interpret`)",
            ops[0].loc))
    if diags:
        raise PlannerError(diags, kind="unsupported")
    windows = window_store_errors(kernel)
    if windows:
        raise PlannerError(windows, kind="invalid-ir")


def dataflow_graph(kernel: Kernel, bindings: Mapping[str, int] | None = None
                   ) -> nx.MultiDiGraph:
    """Build the Tile dataflow graph; concrete sizes are filled in when ``bindings`` bind
    every symbol they need (``elements_value``/``bytes_value`` attributes).  A kernel with
    ops planning does not know yet is refused (:func:`refuse_unplannable`)."""
    refuse_unplannable(kernel)
    g = nx.MultiDiGraph(kernel=kernel.name, allocs=[])
    node_of: dict[int, str] = {}
    counter = [0]
    # a kernel has few distinct tile types and regions: their sizes are computed once
    sizes: dict[TileType, tuple[Expr, int | None, Expr]] = {}
    instances: dict[tuple[Expr, ...], Expr] = {}

    def size_of(t: TileType) -> tuple[Expr, int | None, Expr]:
        """(elements, their count under ``bindings`` or None, bytes) of a tile type."""
        found = sizes.get(t)
        if found is None:
            elems = _elements(t)
            found = sizes[t] = (elems, _eval(elems, bindings), elems * t.dtype.itemsize)
        return found

    def instances_of(region: RegionInfo) -> Expr:
        found = instances.get(region.parallel_extents)
        if found is None:
            found = instances[region.parallel_extents] = product(region.parallel_extents)
        return found

    def add_node(key: str, op: Op | None, value: Value, region: RegionInfo, kind: str,
                 cls: str) -> str:
        t = value.type
        assert isinstance(t, TileType)
        elems, count, _ = size_of(t)
        stage = op.stage if op is not None else None
        pipe = region.pipeline
        g.add_node(
            key, op=op, value=value, kind=kind, cost_class=cls, dtype=t.dtype,
            shape=t.shape, elements=elems, elements_value=count,
            bytes_value=None if count is None else count * t.dtype.itemsize,
            region=region.path, loops=tuple(lp.label for lp in region.loops),
            instances=instances_of(region),
            pipeline=pipe.label if pipe is not None else None,
            window=pipe.window if pipe is not None else 1,
            stage=stage,
            stage_index=(pipe.stages.index(stage) if pipe is not None and stage in pipe.stages
                         else None),
            expensive=cls == CostClass.TRANSCENDENTAL,
            name=value.name_hint or f"{kind}#{counter[0]}",
            order=counter[0],
        )
        counter[0] += 1
        return key

    def consumer_node(op: Op, region: RegionInfo) -> str:
        key = f"op{id(op)}"
        if key not in g:
            g.add_node(key, op=op, value=None, kind=op_kind(op), cost_class=cost_class(op),
                       region=region.path, loops=tuple(lp.label for lp in region.loops),
                       pipeline=region.pipeline.label if region.pipeline else None,
                       stage=op.stage, name=f"{op_kind(op)}#{counter[0]}", order=counter[0],
                       stage_index=(region.pipeline.stages.index(op.stage)
                                    if region.pipeline is not None
                                    and op.stage in region.pipeline.stages else None),
                       sink=True, instances=instances_of(region))
            counter[0] += 1
        return key

    def add_edge(value: Value, consumer_key: str, op: Op | None, index: int,
                 carried: bool = False) -> None:
        src = node_of.get(id(value))
        if src is None:
            return
        t = value.type
        assert isinstance(t, TileType)
        src_attrs, dst_attrs = g.nodes[src], g.nodes[consumer_key]
        distance = 0
        s_idx, d_idx = src_attrs.get("stage_index"), dst_attrs.get("stage_index")
        if (src_attrs.get("pipeline") is not None and s_idx is not None and d_idx is not None
                and src_attrs.get("pipeline") == dst_attrs.get("pipeline")):
            distance = max(0, d_idx - s_idx)
        _, ev, nbytes = size_of(t)
        g.add_edge(src, consumer_key, value=value, consumer=op, operand=index,
                   bytes=nbytes, bytes_value=None if ev is None
                   else ev * t.dtype.itemsize, stage_distance=distance,
                   consumer_kind=dst_attrs["kind"], loop_carried=carried)

    def walk(block: Block, region: RegionInfo) -> None:
        for op in block.ops:
            tile_results = [r for r in op.results if isinstance(r.type, TileType)]
            if isinstance(op, ParallelOp):
                walk(op.body, RegionInfo((*region.path, op.label),
                                         region.parallel_extents
                                         + tuple(a.extent for a in op.axes),
                                         region.pipeline, region.loops))
                continue
            if isinstance(op, LoopOp):
                loop_region(op, region)
                continue
            tile_operands = [(i, v) for i, v in enumerate(op.operands())
                             if isinstance(v.type, TileType)]
            if tile_results and not isinstance(op, core.YieldOp):
                key = add_node(f"op{id(op)}", op, tile_results[0], region, op_kind(op),
                               cost_class(op))
                node_of[id(tile_results[0])] = key
            elif (tile_operands and not isinstance(op, core.YieldOp)) \
                    or isinstance(op, core.CopyAsyncOp):
                key = consumer_node(op, region)  # a copy: a sink without Tile operands
            else:
                key = None
            if key is not None:
                for i, v in tile_operands:
                    add_edge(v, key, op, i)

    def loop_region(op: LoopOp, region: RegionInfo) -> None:
        inner = RegionInfo((*region.path, op.label), region.parallel_extents,
                           op if op.kind is LoopKind.PIPELINE else region.pipeline,
                           (*region.loops, op))
        carries: list[tuple[int, str]] = []
        for i, (arg, init) in enumerate(zip(op.body.args, op.inits, strict=True)):
            if isinstance(arg.type, TileType):
                key = add_node(f"carry{id(arg)}", None, arg, inner, "loop.carry",
                               CostClass.NONE)
                g.nodes[key]["loop"] = op.label
                add_edge(init, key, op, i)
                node_of[id(arg)] = key
                carries.append((i, key))
        walk(op.body, inner)
        term = op.body.ops[-1] if op.body.ops else None
        if isinstance(term, core.YieldOp):
            for i, key in carries:
                add_edge(term.values[i], key, term, i, carried=True)
        for i, key in carries:
            node_of[id(op.results[i])] = key

    walk(kernel.body, RegionInfo((), (), None, ()))
    for op in kernel.walk():
        if isinstance(op, core.AllocOp):
            elems = op.layout.num_elements()
            g.graph["allocs"].append({"op": op, "name": op.memory.name_hint, "owner": op.owner,
                                      "resource": op.resource, "elements": elems})
    return g


def live_edges(g: nx.MultiDiGraph) -> list[tuple[str, str, int]]:
    """All def→use edges as (producer, consumer, key), in program order of producers."""
    return sorted(g.edges(keys=True),
                  key=lambda e: (g.nodes[e[0]]["order"], g.nodes[e[1]]["order"], e[2]))


def node_names(g: nx.MultiDiGraph, value_names: Mapping[Value, str]) -> dict[str, str]:
    """Printable, unique names of the graph's nodes, in program order.

    A Tile-producing node takes its value's printed name (``%x``); a sink takes
    ``kind(%target)`` (``tile.store(%Y)``); repeats get ``#n``.  The planner's edge ids
    and the lowering's lookup of plan decisions both use these names, so they agree.
    """
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for n, d in sorted(g.nodes(data=True), key=lambda x: x[1]["order"]):
        value = d.get("value")
        if value is not None and value in value_names:
            name = "%" + value_names[value]
        else:
            target = getattr(d["op"], "view", None) or getattr(d["op"], "memory", None)
            what = value_names.get(target, "?") if target is not None else str(d["order"])
            name = f"{d['kind']}(%{what})"
        if name in seen:
            seen[name] += 1
            name = f"{name}#{seen[name]}"
        else:
            seen[name] = 0
        out[n] = name
    return out


def edge_id(names: Mapping[str, str], producer: str, consumer: str, operand: int) -> str:
    """The stable id of a def→use edge: ``producer -> consumer#operand``."""
    return f"{names[producer]} -> {names[consumer]}#{operand}"
