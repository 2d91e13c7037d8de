"""How a kernel's values are used under a plan.

:func:`plan_edge_map` matches the plan's edge decisions to the kernel's uses (by the
planner's edge ids); :class:`PlannedUses` answers what the builder and the pipeline
analysis both ask of a use: does its value get a buffer, and does the use read that
buffer, inline the producer (fused) or re-derive its chain (recomputed).
"""

from __future__ import annotations

from planner.errors import error
from planner.ir import core
from planner.ir.core import Block, Kernel, Op, ParallelOp, Value
from planner.ir.graph import dataflow_graph, edge_id, live_edges, node_names, refuse_unplannable
from planner.ir.printer import Printer, PrintOptions, ValueNamer
from planner.ir.types import TileType, ViewType
from planner.plan.decisions import (
    CopyPlan,
    Decision,
    EdgePlan,
    MaterializationPlan,
    MemoryPlan,
    Status,
)

__all__ = ["INLINABLE", "REDERIVABLE", "STORING", "EdgeKey", "PlannedUses", "plan_edge_map"]

_KIND = "lowering"

#: Ops whose expression a use may inline instead of reading the value's buffer.
INLINABLE = (core.LoadOp, core.FullOp, core.IotaOp, core.UnaryOp, core.BinaryOp,
             core.SelectOp, core.CastOp, core.BroadcastOp, core.TransposeOp, core.SliceOp,
             core.MemLoadOp)
#: Ops a recomputation re-derives (``planner.solve.costs.is_recomputable_kind``): a
#: Memory snapshot, a reduction, an mma result or a loop carry stops the chain.
REDERIVABLE = tuple(c for c in INLINABLE if c is not core.MemLoadOp)
#: Decisions under which a use reads the value's buffer.
STORING = (Decision.VIRTUAL, Decision.MATERIALIZED)


EdgeKey = tuple[int, int, int]  # (id(value), id(consumer op), operand index)


def _edge_ids(kernel: Kernel, namer: ValueNamer) -> list[tuple[str, EdgeKey]]:
    """Each live edge's planner id (:func:`planner.ir.graph.edge_id`) and its key."""
    g = dataflow_graph(kernel)
    node_name = node_names(g, namer.names)
    out = []
    for u, w, k in live_edges(g):
        d = g.edges[u, w, k]
        key = (id(d["value"]), id(d["consumer"]), d["operand"])
        out.append((edge_id(node_name, u, w, d["operand"]), key))
    return out


def plan_edge_map(kernel: Kernel, plan: MaterializationPlan | None,
                  namer: ValueNamer | None = None) -> dict[EdgeKey, EdgePlan]:
    """The plan's decision for each (value, consumer, operand) of ``kernel``.

    Edges are matched by their ids (``producer -> consumer#operand`` over the dataflow
    graph's node names); a plan whose ids do not match is matched in program order when
    it has exactly one decision per edge.  Raises when the plan is for another kernel.
    """
    if plan is None:
        return {}
    if plan.status is Status.INFEASIBLE:
        why = "; ".join(plan.explanation) or "no explanation given"
        raise error(f"cannot lower an infeasible plan for {plan.kernel!r}: {why}",
                    kernel.loc, kind=_KIND)
    if namer is None:
        namer = ValueNamer()
        Printer(PrintOptions(locations=False), namer).print_kernel(kernel)
    ids = _edge_ids(kernel, namer)
    by_id = {e.edge_id: e for e in plan.edges}
    out = {key: by_id[eid] for eid, key in ids if eid in by_id}
    if len(out) == len(ids):
        return out
    if len(plan.edges) == len(ids):
        return {key: e for (_, key), e in zip(ids, plan.edges, strict=True)}
    missing = [eid for eid, _ in ids if eid not in by_id][:3]
    raise error(f"plan for {plan.kernel!r} does not match kernel {kernel.name!r}: "
                f"{len(plan.edges)} edge decisions for {len(ids)} edges (no decision for "
                f"{', '.join(missing)})", kernel.loc, kind=_KIND)


class PlannedUses:
    """A kernel indexed by its uses, each with the plan's decision: which values are
    computed into a buffer, and whether a use reads that buffer, inlines the producer
    (fused) or re-derives its chain (recomputed)."""

    def __init__(self, kernel: Kernel, plan: MaterializationPlan | None) -> None:
        refuse_unplannable(kernel)  # ops no plan can cover yet, also without a plan
        self.kernel = kernel
        self.plan = plan
        namer = ValueNamer()
        Printer(PrintOptions(locations=False), namer).print_kernel(kernel)
        self.namer = namer
        self.edges = plan_edge_map(kernel, plan, namer)
        self.uses: dict[Value, list[tuple[Op, int]]] = {}
        self.parent_op: dict[Op, Op | None] = {}
        self.block_of: dict[Op, Block] = {}
        self._index_ops(kernel.body, None)
        self.stored_views = {op.view for op in kernel.walk() if isinstance(op, core.StoreOp)}

    def _index_ops(self, block: Block, parent: Op | None) -> None:
        for op in block.ops:
            self.parent_op[op] = parent
            self.block_of[op] = block
            for i, v in enumerate(op.operands()):
                self.uses.setdefault(v, []).append((op, i))
            for b in op.region_blocks():
                self._index_ops(b, op)

    def name(self, v: Value) -> str:
        return self.namer[v]

    def edge(self, v: Value, consumer: Op, operand: int) -> EdgePlan | None:
        return self.edges.get((id(v), id(consumer), operand))

    def decision(self, v: Value, consumer: Op, operand: int) -> Decision:
        e = self.edge(v, consumer, operand)
        return e.decision if e is not None else Decision.VIRTUAL

    def producer(self, v: Value) -> Op | None:
        return v.owner if isinstance(v.owner, Op) else None

    def inlinable(self, v: Value) -> bool:
        op = self.producer(v)
        if not isinstance(op, INLINABLE):
            return False
        if isinstance(op, core.LoadOp | core.MemLoadOp):
            return self._snapshot_safe(op)
        return True

    def _snapshot_safe(self, op: core.LoadOp | core.MemLoadOp) -> bool:
        """A read of mutable storage may be inlined only where no store can intervene:
        all uses in the same block, no store to the same storage in between."""
        source = op.view if isinstance(op, core.LoadOp) else op.memory
        if isinstance(op, core.LoadOp):
            vt = source.type
            assert isinstance(vt, ViewType)
            if vt.readonly:
                return True
        block = self.block_of[op]
        pos = block.ops.index(op)
        last = pos
        for user, _ in self.uses.get(op.result, []):
            top = user
            while top is not None and self.block_of.get(top) is not block:
                top = self.parent_op.get(top)
            if top is None:
                return False
            if self.parent_op.get(user) is not None and top is not user:
                return False  # used inside a nested region: may run after later stores
            last = max(last, block.ops.index(top))
        for other in block.ops[pos + 1:last]:
            for o in [other, *(x for b in other.region_blocks() for x in b.walk())]:
                if isinstance(o, core.StoreOp) and o.view is source:
                    return False
                if isinstance(o, core.MEMORY_WRITE_OPS) and o.memory is source:
                    return False
        return True

    def buffered(self, v: Value) -> bool:
        """Whether ``v`` is computed once into a buffer (some edge virtual/materialized,
        or a value that always needs storage)."""
        if not isinstance(v.type, TileType):
            return False
        if not self.inlinable(v):
            return True
        return any(self.decision(v, c, i) in STORING for c, i in self.uses.get(v, []))

    def reads_buffer(self, v: Value, consumer: Op, operand: int) -> bool:
        """Whether this use reads ``v``'s buffer (else it inlines ``v``'s expression)."""
        if not self.inlinable(v):
            return True
        return self.decision(v, consumer, operand) in STORING

    def owner(self, op: Op) -> Op | None:
        """The nearest enclosing parallel region of ``op`` (None: the kernel root)."""
        cur = self.parent_op.get(op)
        while cur is not None and not isinstance(cur, ParallelOp):
            cur = self.parent_op.get(cur)
        return cur

    def rederivable(self, v: Value, owner: Op | None) -> bool:
        """Whether a recomputation owned by ``owner`` re-derives ``v`` (else ``v`` stops
        the chain and is read as its edge decided): a load of a view no op stores, or an
        elementwise op, broadcast, transpose, full or iota, of the same parallel
        instance (``planner.solve.costs.recompute_chain``)."""
        op = self.producer(v)
        if not isinstance(op, REDERIVABLE) or not self.inlinable(v):
            return False
        if isinstance(op, core.LoadOp) and op.view in self.stored_views:
            return False
        return self.owner(op) is owner

    def recomputes(self, v: Value, consumer: Op, operand: int) -> bool:
        """Whether this use re-derives ``v``'s chain from the loads (a recomputed edge)."""
        return (not self.reads_buffer(v, consumer, operand)
                and self.decision(v, consumer, operand) is Decision.RECOMPUTED
                and self.rederivable(v, self.owner(consumer)))

    def copy_plan(self, op: core.CopyAsyncOp) -> CopyPlan | None:
        """The plan's record of how ``op`` runs (engine, mode, versions)."""
        if self.plan is None:
            return None
        want = "%" + self.name(op.memory)
        return next((c for c in self.plan.copies
                     if c.memory == want and c.line == op.loc.line), None)

    def memory_plan(self, op: core.AllocOp) -> MemoryPlan | None:
        if self.plan is None:
            return None
        want = "%" + self.name(op.memory)
        return next((m for m in self.plan.memories if m.name == want), None)
