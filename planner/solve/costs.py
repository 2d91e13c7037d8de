"""The cost model: the priced planning problem and its reference evaluator.

:func:`build_problem` turns a kernel's dataflow graph (``planner.ir.graph``) and a
target catalog into a :class:`Problem`: every value (a Tile definition) with its
edges, the choices each edge may take, what each choice costs, where each value
could live, and which program points are checked for capacity.  The CP-SAT model
(``planner.solve.model``) encodes exactly this problem; :func:`evaluate` is the
pure-Python reference of the same semantics (used to decode plans, to explain them,
and by the exhaustive tests that confirm CP-SAT's optimum).

Time units
    Integer nanoseconds.  A term is ``cycles × executions / clock_ghz`` rounded once,
    where cycles come from the catalog's figures and ``executions`` is how often the
    op runs: ``ceil(parallel instances / concurrent_instances) × loop trip counts``.

Compute (per execution)
    elementwise ops ``elements / throughput`` (``cheap`` or ``transcendental``),
    reductions ``input elements / cheap``, mma ``2·m·n·k / mma``; broadcast, full,
    iota and transpose are free (they become index arithmetic).

Traffic (per execution)
    ``bytes / bandwidth`` of the resource touched.  A resource instance shared by the
    concurrently running instances (an ancestor of the executing scope, e.g. DRAM for
    CPU workers) gives each of them ``bandwidth / concurrent_instances``.  A
    ``tile.load``/``tile.store`` moves its tile through the global resource; a
    ``memory.load``/``memory.store`` through the resource its Memory resolved to.

Per edge decision (producer value ``v`` → consumer ``c``)
    * virtual: free; ``v`` occupies registers (the private resource of its owner,
      aggregated over the owner's descendant instances) from definition to use.
    * materialized in ``(resource, layout)``: ``v`` is written once (write traffic,
      plus the catalog's sync rule when the resource is shared by several executing
      members and is not hardware-coherent) and read by each materialized consumer
      (read traffic; consumers that read columns — mma operand b, transpose,
      reductions over axis 0 — pay ``(degree - 1)`` times the read for bank conflicts
      of the layout; a swizzled layout pays one cheap op per element for its address
      arithmetic).  Padding counts toward capacity.
    * fused: ``v`` is computed inline in the consumer's loop, reading its own operands
      as their edges decided (their terms are theirs): the producer's compute (or, for
      a load, its read) at the consumer's execution count.
    * recomputed: the consumer re-derives ``v`` from the kernel's inputs, whatever its
      operands' edges decided: its chain (:func:`recompute_chain`: ``v`` and its
      recomputable ancestors of the same parallel instance, each once) back to the
      loads, each re-reading its tile from its view at the global resource's
      bandwidth (shared by the concurrent instances), or to values that cannot be
      recomputed (reductions, mma results, loop carries), which are read as their own
      edges decided; all at the consumer's execution count, plus the producer's
      exposed latency when the edge crosses pipeline stages.  Not offered where it is
      the same program as fused (fusion legal and the chain is ``v`` alone: nothing
      whose realization it would bypass), into an mma accumulator (as fusion), through
      a Memory snapshot or a load of a view the kernel also stores.
    The producer itself runs once ("home" compute) when at least one of its edges is
    virtual or materialized.

Versions
    Inside a pipeline a value preserved across stages wants ``min(stage distance,
    window - 1) + 1`` versions.  Fewer is legal: each missing version exposes a share
    of the producer's latency (load latency plus its own time) per iteration as a
    stall, and the lowering then overlaps the stages less (in order when no lag is
    left).  Explicit Memory versions are decided the same way.  Versions are one array
    live over the whole pipeline loop, 64 bytes apart (the lowering's version stride).

Capacity: what the lowering allocates
    Live ranges are half-open intervals of program points (the op order of the
    kernel).  A value is held from its definition through the evaluation of each
    reader (the reader's operands and the result it writes coexist), to the end of a
    loop when read inside a loop that does not define it.  A reader fused or
    recomputed into a later consumer is evaluated there, so the value stays held
    until then: these extensions depend on other edges' choices (:class:`Guard`
    ``site``).  A value kept in registers for some edges and in a buffer for others is
    held in both (the lowering keeps a register copy).  A loop carry's buffer exists
    for the whole loop: until the yielded value is written into it in place (two
    versions for the whole loop when the old value is read after the new one is
    written), and beside the yielded value when they live in different storage
    (:class:`Guard` ``split``); its initial value is held until the carry is filled.
    Compiler temporaries count too (:class:`Temp`): the staging copy of an mma
    operand the multiply cannot read in place (a view window, an inlined expression,
    a swizzled or non-row-major buffer) in the resource the lowering gives it, and,
    where registers are split among the owner's threads, the shared exchange area
    through which a register tile is read across threads (a reduction, broadcast,
    transpose or mma operand).  Explicit Memory is held wherever its owner runs (it is
    allocated per instance).  At every point where something starts to be live, each
    resource's occupancy (bytes × versions over live holders, explicit Memory
    included) must stay within its per-owner-instance capacity.
    ``tests/solve/test_plan_matches_lowering.py`` checks the loop program against it.

Approximations (documented, deliberate): a value is held to every point where its
consumer may be evaluated, also where a recomputation re-derives its operands instead
of reading them, and a value that stops a recompute chain to every point where the
chain's root may be evaluated (both over-approximations); reading a stop is free (it
is a buffer already paid for, usually registers); the op order is fixed (the
lowering's fusion of sibling loops, which runs two ops' statements as one loop, is
not modelled; the lowering does not move a nest writing registers earlier); stalls of
missing versions are priced per buffer, while the lowering overlaps whole stages (one
buffer short of versions orders the pipeline for all).  Edge terms are per edge, so
a producer evaluated at several places reading its operands as decided (at home and
fused into another consumer) pays their reads once, and the edges into a value that
is only ever recomputed are still priced though nothing reads them.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx

from planner.catalog import Operation, Resource, Target
from planner.errors import Diagnostic, PlannerError
from planner.ir import core
from planner.ir.core import Kernel, LoopOp, ParallelOp
from planner.ir.expr import Expr, product
from planner.ir.graph import dataflow_graph, edge_id, live_edges, node_names
from planner.ir.printer import Printer, PrintOptions
from planner.ir.types import TileType
from planner.plan.decisions import Decision, LayoutChoice, Policy
from planner.realize.binding import ROOT_OWNER, ExecutionBinding, bind_execution
from planner.realize.temporaries import exchange_home, register_home, temporary_home

# --------------------------------------------------------------------------- vocabulary

VIRTUAL, FUSED, RECOMPUTED, MATERIALIZED = (Decision.VIRTUAL, Decision.FUSED,
                                            Decision.RECOMPUTED, Decision.MATERIALIZED)
CHOICES: tuple[Decision, ...] = (VIRTUAL, FUSED, RECOMPUTED, MATERIALIZED)
PRESERVING = frozenset({VIRTUAL, MATERIALIZED})
INLINING = frozenset({FUSED, RECOMPUTED})

# Cost terms, the keys of EdgePlan.cost and of a plan's breakdown.
COMPUTE, TRAFFIC, RECOMPUTE = "compute", "traffic", "recompute"
BARRIERS, BANK, STALLS, LAYOUT, FIXED = ("barriers", "bank_conflicts", "stalls", "layout",
                                         "fixed")
TERMS = (COMPUTE, TRAFFIC, RECOMPUTE, BARRIERS, BANK, STALLS, LAYOUT, FIXED)

Terms = tuple[tuple[str, int], ...]

_ELEMENTWISE_PREFIXES = ("tile.unary.", "tile.binary.")
_FUSIBLE = frozenset({"tile.load", "memory.load", "tile.full", "tile.iota", "tile.cast",
                      "tile.select", "tile.broadcast"})
_RECOMPUTABLE = (_FUSIBLE - {"memory.load"}) | {"tile.transpose"}
_LOADS = frozenset({"tile.load", "memory.load"})
_SINKS = frozenset({"tile.store", "memory.store"})


def is_fusible_kind(kind: str) -> bool:
    """Producers that can be computed inline in a consumer (S3 fusion legality)."""
    return kind in _FUSIBLE or kind.startswith(_ELEMENTWISE_PREFIXES)


def is_recomputable_kind(kind: str) -> bool:
    """Producers a consumer may re-derive from global memory."""
    return kind in _RECOMPUTABLE or kind.startswith(_ELEMENTWISE_PREFIXES)


def terms(**kw: float) -> Terms:
    """Rounded, sorted, non-zero terms."""
    return tuple(sorted((k, round(v)) for k, v in kw.items() if round(v)))


def add_terms(*parts: Iterable[tuple[str, int]]) -> Terms:
    out: dict[str, int] = {}
    for part in parts:
        for k, v in part:
            out[k] = out.get(k, 0) + v
    return tuple(sorted((k, v) for k, v in out.items() if v))


def total(t: Iterable[tuple[str, int]]) -> int:
    return sum(v for _, v in t)


# --------------------------------------------------------------------------- problem data


@dataclass(frozen=True, slots=True)
class Point:
    """A program point: one node of the dataflow graph in op order."""

    index: int
    label: str  # "%4 = tile.unary.exp"
    owner: str  # the parallel instance it runs in ("kernel" at the root)
    stage: str | None = None
    pipeline: str | None = None

    def describe(self) -> str:
        where = f"point {self.index} ({self.label}"
        if self.pipeline is not None and self.stage is not None:
            where += f", stage {self.stage} of pipeline {self.pipeline}"
        elif self.pipeline is not None:
            where += f", in pipeline {self.pipeline}"
        return where + ")"


@dataclass(frozen=True, slots=True)
class Placement:
    """A (resource, layout) a value may be materialized in."""

    resource: str
    layout: LayoutChoice
    bytes: int  # one version: padding and the resource's alignment included
    write: Terms  # one write per execution of the producer, sync and layout included
    sync: str | None = None


@dataclass(frozen=True, slots=True)
class Segment:
    """Points ``[start, end)`` where the value is needed by exactly ``edges``.

    ``guarded`` holds it too, conditionally: ``(edge, guard)`` keeps the value (in
    registers when the edge is virtual, in its buffer when materialized) when the edge
    is preserving and the :class:`Guard` holds (the consumer is inlined into a consumer
    evaluated later, or a carry's storage is split from its yielded value's).
    """

    start: int
    end: int
    edges: tuple[int, ...]
    guarded: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Guard:
    """A condition on other edges' choices that a holder depends on.

    ``site``: value ``a`` is evaluated at point ``b`` (computed there into its buffer,
    or inlined, fused or recomputed, into a consumer evaluated there).  ``split``: the
    carry value ``a`` and the value ``b`` yielded to it live in different storage, or
    ``b`` is kept both in registers and in a buffer (the lowering then keeps the
    carry's buffer for the whole loop beside ``b``'s own and copies at the yield).
    """

    kind: str  # "site" | "split"
    a: int
    b: int


# A literal of a temporary's condition: ("x", edge, Decision) the edge takes the choice,
# ("y", value, placement) the value's buffer is that placement, ("g", guard) it holds.
Lit = tuple[str, int, object]


@dataclass(frozen=True, slots=True)
class Temp:
    """A compiler temporary the lowering allocates around one statement.

    Staging of an mma operand the matrix multiply cannot read in place (a view window,
    an inlined expression, a swizzled or non-row-major buffer), and, where registers are
    split among the owner's threads, the exchange area through which a register tile is
    read across threads (a reduction, broadcast, transpose or mma operand of a virtual
    value).  It is held at ``point`` when every literal of some alternative of ``when``
    holds.
    """

    index: int
    name: str
    resource: str
    bytes: int
    point: int
    owner: str
    when: tuple[tuple[Lit, ...], ...]


@dataclass(frozen=True, slots=True)
class Value:
    """A Tile definition: a graph node with outgoing edges."""

    index: int
    name: str
    kind: str
    node: str
    owner: str
    scope: str
    shape: tuple[int, ...]
    itemsize: int
    bytes: int
    def_point: int
    edges: tuple[int, ...]
    consumers: int  # distinct consumer ops
    home: Terms  # the producer running once
    register: str | None  # the private resource holding it when virtual
    reg_bytes: int  # one version in registers (aligned)
    placements: tuple[Placement, ...]
    max_versions: int
    stall: tuple[int, ...]  # stall[k - 1]: cost with k versions, when preserved across stages
    policy: str | None = None  # "preserve" | "inline" | None
    policy_reason: str = ""
    segments: tuple[Segment, ...] = ()
    expensive: bool = False
    inlinable: bool = False  # the lowering may compute it inline in its consumers
    sites: tuple[int, ...] = ()  # later points where inlining may evaluate it


@dataclass(frozen=True, slots=True)
class Edge:
    """One def→use edge and the price of each choice."""

    index: int
    edge_id: str
    value: int
    producer: str
    consumer: str
    consumer_kind: str
    operand: int
    bytes: int
    span: tuple[int, int]  # reported lifetime [def, use)
    stage_distance: int
    loop_carried: bool
    illegal: tuple[tuple[Decision, str], ...]  # forbidden choices and why
    fused: Terms
    recompute: Terms
    reads: tuple[Terms | None, ...]  # per placement of the value; None: not admissible
    not_admissible: tuple[str, ...]  # per placement: why not ("" when admissible)
    column_reader: bool = False
    consumer_value: int | None = None  # the value the consumer defines (None: a sink)
    consumer_point: int = -1
    aligned: bool = True  # the consumer reads element i of the value for its element i
    held: tuple[int, int] = (0, 0)  # occupancy [start, end) when the consumer is computed
    remote: tuple[tuple[int, int, int], ...] = ()  # (site, end, guard): later evaluations

    def legal(self, choice: Decision) -> bool:
        return all(c is not choice for c, _ in self.illegal)

    def why_illegal(self, choice: Decision) -> str | None:
        return next((why for c, why in self.illegal if c is choice), None)

    @property
    def cross_stage(self) -> bool:
        return self.stage_distance > 0


@dataclass(frozen=True, slots=True)
class MemoryOccupant:
    """An explicit Memory allocation: a fixed occupant whose home and versions are decided.

    ``homes`` are the legal placements of the execution binding that every scope touching
    the Memory may access (nearest first); ``home_bytes[h]`` is one version there (padding
    and that resource's alignment included) and ``home_cost[h]`` the traffic of the
    Memory's loads and stores there, relative to ``homes[0]`` (already in the constant).
    """

    index: int
    name: str
    homes: tuple[str, ...]
    home_bytes: tuple[int, ...]
    span: tuple[int, int]
    owner: str
    max_versions: int
    stall: tuple[int, ...]
    home_cost: tuple[int, ...] = ()

    def home_of(self, a: Assignment) -> int:
        """The index of the home ``a`` chose (the first when it chose none)."""
        return a.memory_homes[self.index] if a.memory_homes else 0


@dataclass(frozen=True, slots=True)
class LivePoint:
    """A checked program point and the holders that may be live there."""

    point: int
    owner: str
    segments: tuple[tuple[int, int], ...]  # (value, segment index)
    memories: tuple[int, ...]
    temps: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Problem:
    """Everything the planner decides over, priced."""

    kernel: str
    target: str
    policy: Policy
    bindings: tuple[tuple[str, int], ...]
    values: tuple[Value, ...]
    edges: tuple[Edge, ...]
    memories: tuple[MemoryOccupant, ...]
    points: Mapping[int, Point]
    live_points: tuple[LivePoint, ...]
    capacities: Mapping[tuple[str, str], int | None]  # (resource, owner) -> bytes
    constant: Terms  # sinks and dead values: paid whatever the plan
    static_infeasible: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()  # every resource that may hold something
    guards: tuple[Guard, ...] = ()
    temps: tuple[Temp, ...] = ()

    def capacity(self, resource: str, owner: str) -> int | None:
        return self.capacities.get((resource, owner))


@dataclass(frozen=True, slots=True)
class Assignment:
    """One complete decision: the unit the evaluator and the exhaustive tests handle."""

    choices: tuple[Decision, ...]  # per edge
    placement: tuple[int | None, ...]  # per value: index into its placements
    versions: tuple[int, ...]  # per value
    memory_versions: tuple[int, ...] = ()
    memory_homes: tuple[int, ...] = ()  # per Memory: index into its homes


@dataclass(frozen=True, slots=True)
class Occupancy:
    resource: str
    owner: str
    point: int
    bytes: int
    capacity: int | None
    holders: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """An assignment's feasibility, per-edge cost terms and occupancy."""

    violations: tuple[str, ...]
    edge_terms: tuple[Terms, ...]
    memory_terms: Terms
    constant: Terms
    occupancy: tuple[Occupancy, ...] = field(default=())

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def objective(self) -> int:
        return (sum(total(t) for t in self.edge_terms) + total(self.memory_terms)
                + total(self.constant))

    def breakdown(self) -> dict[str, int]:
        merged = add_terms(*self.edge_terms, self.memory_terms, self.constant)
        return dict(merged)


# --------------------------------------------------------------------------- target figures


@dataclass(frozen=True, slots=True)
class Figures:
    """Catalog figures the cost model reads, and scope arithmetic."""

    target: Target

    @property
    def clock(self) -> float:
        return self.target.costs.clock_ghz

    def ns(self, cycles: float, executions: int) -> float:
        return cycles * executions / self.clock

    def throughput(self, cost_class: str) -> float:
        c = self.target.costs
        return {"cheap": c.cheap, "transcendental": c.transcendental, "mma": c.mma}.get(
            cost_class, c.cheap)

    @property
    def global_resource(self) -> Resource | None:
        found = self.target.resources_for_class("global")
        if found:
            return found[0]
        return min(self.target.resources, key=lambda r: r.bandwidth, default=None)

    def share(self, resource: Resource, scope: str) -> int:
        """Concurrent owner instances sharing one instance of ``resource``."""
        if (resource.instance_scope != scope
                and self.target.is_ancestor_or_self(resource.instance_scope, scope)):
            return max(1, self.target.costs.concurrent_instances)
        return 1

    def traffic_cycles(self, nbytes: int, resource: Resource, scope: str) -> float:
        if resource.bandwidth <= 0:
            return 0.0
        return nbytes * self.share(resource, scope) / resource.bandwidth

    def instances_below(self, ancestor: str, scope: str, dynamic: str = "max") -> int:
        """Instances of ``scope`` per instance of ``ancestor``.

        A dynamic extent (chosen at launch) counts as its ``max_extent`` when
        ``dynamic="max"`` (dividing a resource among instances: the worst case) and as
        one when ``dynamic="one"`` (aggregating per-instance storage: only the instance
        the catalog guarantees).
        """
        count, current = 1, scope
        while current != ancestor:
            s = self.target.scope(current)
            if s.extent is not None:
                count *= s.extent
            elif dynamic == "max":
                count *= s.max_extent or 1
            if s.parent is None:
                break
            current = s.parent
        return count

    def exactly_one_below(self, ancestor: str, scope: str) -> bool:
        current = scope
        while current != ancestor:
            s = self.target.scope(current)
            if s.extent != 1 or s.parent is None:
                return False
            current = s.parent
        return True

    def subtree(self, scope: str) -> list[str]:
        """``scope`` and its descendants, breadth first: the members that execute its ops."""
        out, frontier = [scope], [scope]
        while frontier:
            kids = [c.name for s in frontier for c in self.target.children(s)]
            out += kids
            frontier = kids
        return out

    def several_members(self, scope: str) -> bool:
        kids = self.target.children(scope)
        return len(kids) > 1 or any(k.extent != 1 for k in kids)

    def register_home(self, scope: str) -> tuple[Resource, int | None] | None:
        """The private resource virtual values of ``scope`` live in, and its capacity there."""
        r = register_home(self.target, scope)
        if r is None:
            return None
        cap = None if r.capacity is None else r.capacity * self.instances_below(
            scope, r.instance_scope, dynamic="one")
        return r, cap

    def capacity_for(self, r: Resource, scope: str) -> tuple[int | None, str]:
        """Per-owner capacity of ``r`` for an owner at ``scope``; reason when unusable."""
        t = self.target
        if r.instance_scope == scope:
            return r.capacity, ""
        if t.is_ancestor_or_self(r.instance_scope, scope):
            if not r.slicing:
                return None, (f"{r.name} lives per {r.instance_scope} and cannot be sliced "
                              f"per {scope} (S17)")
            if r.capacity is None:
                return None, ""
            return r.capacity // self.instances_below(r.instance_scope, scope), ""
        if t.is_ancestor_or_self(scope, r.instance_scope):
            if self.exactly_one_below(scope, r.instance_scope):
                return r.capacity, ""
            return None, (f"{r.name} is private to each {r.instance_scope}; a whole tile of "
                          f"the {scope} cannot live there")
        return None, f"{r.name} (per {r.instance_scope}) cannot serve an owner at {scope}"

    def sync_rule(self, r: Resource, scope: str) -> tuple[str | None, float]:
        """The sync rule ordering write → read of ``r`` among the members of ``scope``."""
        if r.coherence.value in ("coherent", "none") or not self.several_members(scope):
            return None, 0.0
        rules = list(r.sync)
        for rule in rules:
            if rule.scope == scope:
                return rule.name, rule.cost
        ancestors = [rule for rule in rules if self.target.is_ancestor_or_self(rule.scope, scope)]
        if ancestors:
            rule = max(ancestors, key=lambda x: self.target.scope_depth(x.scope))
            return rule.name, rule.cost
        if rules:
            return rules[0].name, rules[0].cost
        return "barrier", self.target.costs.barrier

    def accessible(self, r: Resource, scope: str, ops: Iterable[Operation]) -> bool:
        members = self.subtree(scope)
        return any(r.supports(op) and self.target.can_access(m, r.name, op)
                   for op in ops for m in members)


# --------------------------------------------------------------------------- helpers


def _writer_ops(kind: str) -> tuple[Operation, ...]:
    if kind == "tile.mma":
        return (Operation.MMA_WRITE, Operation.WRITE)
    if kind in _LOADS:
        return (Operation.WRITE, Operation.COPY_ASYNC)
    return (Operation.WRITE,)


def _reader_ops(kind: str) -> tuple[Operation, ...]:
    if kind == "tile.mma":
        return (Operation.MMA_READ, Operation.READ)
    return (Operation.READ,)


def _align(nbytes: int, alignment: int) -> int:
    a = max(1, alignment)
    return -(-nbytes // a) * a


VERSION_ALIGN = 64  # the lowering keeps buffer versions this many bytes apart


def version_bytes(nbytes: int, max_versions: int) -> int:
    """Bytes of one version of a buffer that may keep several (the lowering's stride)."""
    return _align(nbytes, VERSION_ALIGN) if max_versions > 1 else nbytes


def _columns_read(kind: str, op: core.Op | None, operand: int) -> bool:
    if kind == "tile.mma":
        return operand == 1
    if kind == "tile.transpose":
        return True
    return isinstance(op, core.ReduceOp) and op.axis == 0


def conflict_degree(shape: tuple[int, ...], itemsize: int, layout: LayoutChoice,
                    banks: tuple[int, int]) -> int:
    """Worst bank conflict of reading one column of a row-major tile in this layout."""
    if len(shape) < 2:
        return 1
    rows, row_len = shape[-2], shape[-1]
    count, width = banks
    stride = row_len + (layout.pad if layout.kind == "padded" else 0)
    per_bank: dict[int, set[int]] = {}
    for i in range(min(count, rows)):
        offset = i * stride
        if layout.kind == "swizzled" and layout.swizzle:
            bits, base, shift = layout.swizzle
            mask = ((1 << bits) - 1) << (base + shift)
            offset ^= (offset & mask) >> shift
        word = offset * itemsize // width
        per_bank.setdefault(word % count, set()).add(word)
    return max((len(w) for w in per_bank.values()), default=1)


def layout_candidates(shape: tuple[int, ...], itemsize: int,
                      banks: tuple[int, int] | None, column_readers: bool
                      ) -> list[LayoutChoice]:
    """Dense always; padded rows and an XOR swizzle where banks and column reads meet."""
    out = [LayoutChoice("dense")]
    if banks is None or not column_readers or len(shape) < 2 or shape[-1] <= 1:
        return out
    count, width = banks
    unit = max(1, width // itemsize)
    for pad in sorted({1, unit}):
        out.append(LayoutChoice("padded", pad=pad))
    row_len = shape[-1]
    if row_len & (row_len - 1) == 0 and unit & (unit - 1) == 0 and row_len > unit:
        base = unit.bit_length() - 1
        words = row_len // unit
        bits = min(count, words, shape[-2]).bit_length() - 1
        shift = row_len.bit_length() - 1 - base
        if bits > 0 and shift >= bits:
            out.append(LayoutChoice("swizzled", swizzle=(bits, base, shift)))
    return out


def layout_bytes(shape: tuple[int, ...], itemsize: int, layout: LayoutChoice) -> int:
    elems = math.prod(shape)
    if layout.kind == "padded" and len(shape) >= 2 and elems:
        elems = elems // shape[-1] * (shape[-1] + layout.pad)
    elif layout.kind == "swizzled" and layout.swizzle and elems:
        bits, base, shift = layout.swizzle
        block = 1 << (bits + base + shift)
        elems = -(-elems // block) * block
    return elems * itemsize


def _missing(exprs: Iterable[Expr], env: Mapping[str, int]) -> set[str]:
    out: set[str] = set()
    for e in exprs:
        out |= {s for s in e.symbols() if s not in env and not s.startswith("%")}
    return out


def _eval(e: Expr, env: Mapping[str, int]) -> int:
    return int(e.evaluate(env))


# --------------------------------------------------------------------------- the builder


@dataclass
class _Ctx:
    """Mutable state while building one problem (private to this module)."""

    kernel: Kernel
    target: Target
    fig: Figures
    env: dict[str, int]
    g: nx.MultiDiGraph
    names: dict[core.Value, str]
    binding: ExecutionBinding
    parallels: dict[str, ParallelOp] = field(default_factory=dict)
    loops: dict[str, LoopOp] = field(default_factory=dict)
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

    def accessible(self, r: Resource, scope: str, ops: tuple[Operation, ...]) -> bool:
        key = (r.name, scope, ops)
        if key not in self.access:
            self.access[key] = self.fig.accessible(r, scope, ops)
        return self.access[key]


def build_problem(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None = None,
                  policy: Policy = Policy.DEFAULT) -> Problem:
    """Price every choice of every live edge of ``kernel`` on ``target``.

    Every size must be concrete: unbound symbols raise :class:`PlannerError` naming them.
    """
    env = {k: int(v) for k, v in (bindings or {}).items()}
    policy = Policy(policy)
    _check_bound(kernel, env)
    g = dataflow_graph(kernel, env)
    printer = Printer(PrintOptions(locations=False))
    printer.print_kernel(kernel)
    ctx = _Ctx(kernel, target, Figures(target), env, g, dict(printer.namer.names),
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
    raw_edges = [_edge(ctx, i, key, value_of[key[0]]) for i, key in enumerate(edge_keys)]
    values = [_value(ctx, i, n, [raw_edges[j] for j in edges_of[n]], policy)
              for i, n in enumerate(producers)]
    edges = [_with_reads(ctx, e, values[e.value]) for e in raw_edges]
    held = _Holding(ctx, values, edges, value_of)
    values, edges = held.values, held.edges
    temps = held.temps()
    memories = _memories(ctx)
    capacities = _capacities(ctx, values, memories, points)
    live = _live_points(values, memories, points, temps)
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


def illegal_text(e: Edge) -> str:
    """``fused, recomputed: <why>; materialized: <why>``: the edge's forbidden choices."""
    by_reason: dict[str, list[str]] = {}
    for c, why in e.illegal:
        by_reason.setdefault(why, []).append(c.value)
    return "; ".join(f"{', '.join(cs)}: {why}" for why, cs in by_reason.items())


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


def _index_regions(ctx: _Ctx) -> None:
    for op in ctx.kernel.walk():
        if isinstance(op, ParallelOp):
            ctx.parallels[op.label] = op
        elif isinstance(op, LoopOp):
            ctx.loops[op.label] = op
    ctx.owner_scope[ROOT_OWNER] = ctx.binding.root
    ctx.owner_scope.update(ctx.binding.parallel_scope)
    for _, d in ctx.g.nodes(data=True):
        for label in d["region"]:
            if label in ctx.loops:
                lo, hi = ctx.loop_span.get(label, (d["order"], d["order"]))
                ctx.loop_span[label] = (min(lo, d["order"]), max(hi, d["order"]))


def owner_of(ctx: _Ctx, region: tuple[str, ...]) -> str:
    for label in reversed(region):
        if label in ctx.parallels:
            return label
    return "kernel"


def _name_nodes(ctx: _Ctx) -> None:
    ctx.node_name.update(node_names(ctx.g, ctx.names))
    ctx.node_by_name.update({name: n for n, name in ctx.node_name.items()})


def _resolve_allocs(ctx: _Ctx) -> None:
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


def _points(ctx: _Ctx) -> dict[int, Point]:
    out: dict[int, Point] = {}
    for n, d in ctx.g.nodes(data=True):
        out[d["order"]] = Point(d["order"], f"{ctx.node_name[n]} = {d['kind']}"
                                if not d.get("sink") else ctx.node_name[n],
                                owner_of(ctx, d["region"]), d.get("stage"), d.get("pipeline"))
    return dict(sorted(out.items()))


def _executions(ctx: _Ctx, d: Mapping[str, object]) -> int:
    key = int(d["order"])  # type: ignore[call-overload]
    if key not in ctx.execs:
        ctx.execs[key] = _count_executions(ctx, d)
    return ctx.execs[key]


def _count_executions(ctx: _Ctx, d: Mapping[str, object]) -> int:
    instances = _eval(d["instances"], ctx.env)  # type: ignore[arg-type]
    if instances <= 0:
        return 0
    waves = -(-instances // max(1, ctx.target.costs.concurrent_instances))
    trips = 1
    for label in d["loops"]:  # type: ignore[attr-defined]
        for a in ctx.loops[label].axes:
            trips *= max(0, _eval(a.extent, ctx.env))
    return waves * trips


def _tile_shape(ctx: _Ctx, v: core.Value) -> tuple[int, ...]:
    assert isinstance(v.type, TileType)
    return tuple(_eval(e, ctx.env) for e in v.type.shape)


def _memory_resource(ctx: _Ctx, op: core.Op) -> Resource | None:
    mem = getattr(op, "memory", None)
    return ctx.alloc_resource.get(id(mem)) if mem is not None else None


def _op_cycles(ctx: _Ctx, d: Mapping[str, object], scope: str) -> tuple[float, float]:
    """(compute, traffic) cycles of one execution of the node's op."""
    op = d["op"]
    kind = str(d["kind"])
    fig = ctx.fig
    if isinstance(op, (core.LoadOp, core.StoreOp, core.MemLoadOp, core.MemStoreOp)):
        tile = op.results[0] if isinstance(op, (core.LoadOp, core.MemLoadOp)) else op.tile
        shape = _tile_shape(ctx, tile)
        assert isinstance(tile.type, TileType)
        nbytes = math.prod(shape) * tile.type.dtype.itemsize
        res = (fig.global_resource if isinstance(op, (core.LoadOp, core.StoreOp))
               else _memory_resource(ctx, op))
        return 0.0, (fig.traffic_cycles(nbytes, res, scope) if res is not None else 0.0)
    if isinstance(op, core.MmaOp):
        m, k = _tile_shape(ctx, op.a)[-2:]
        n = _tile_shape(ctx, op.b)[-1]
        return 2.0 * m * n * k / fig.throughput("mma"), 0.0
    if isinstance(op, core.ReduceOp):
        return math.prod(_tile_shape(ctx, op.x)) / fig.throughput("cheap"), 0.0
    cls = str(d["cost_class"])
    if cls in ("cheap", "transcendental") and kind != "loop.carry":
        return float(d["elements_value"] or 0) / fig.throughput(cls), 0.0  # type: ignore[arg-type]
    return 0.0, 0.0


def _latency_cycles(ctx: _Ctx, d: Mapping[str, object], scope: str) -> float:
    compute, traffic = _op_cycles(ctx, d, scope)
    op = d["op"]
    source = 0.0
    if isinstance(op, core.LoadOp) and ctx.fig.global_resource is not None:
        source = ctx.fig.global_resource.latency
    elif isinstance(op, core.MemLoadOp):
        res = _memory_resource(ctx, op)
        source = res.latency if res is not None else 0.0
    return compute + traffic + source


def _node_terms(ctx: _Ctx, node: str, executions: int) -> Terms:
    d = ctx.g.nodes[node]
    scope = ctx.owner_scope[owner_of(ctx, d["region"])]
    compute, traffic = _op_cycles(ctx, d, scope)
    return terms(**{COMPUTE: ctx.fig.ns(compute, executions),
                    TRAFFIC: ctx.fig.ns(traffic, executions)})


MAX_RECOMPUTE_CHAIN = 16


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


def rederivable(ctx: _Ctx, node: str, owner: str) -> bool:
    """Whether a recomputation owned by ``owner`` re-derives ``node`` (else it stops)."""
    d = ctx.g.nodes[node]
    return is_recomputable_kind(d["kind"]) and owner_of(ctx, d["region"]) == owner


def recompute_chain(ctx: _Ctx, node: str) -> Chain:
    """``node``'s recompute chain (see :class:`Chain`), cached.

    Recomputing through it is refused when it re-reads a view the kernel also stores (a
    store may intervene between the load and the consumer), when it reaches a Memory
    snapshot (a snapshot is read once: re-reading the Memory could see another state),
    or when it has more than :data:`MAX_RECOMPUTE_CHAIN` ops.
    """
    if node in ctx.chains:
        return ctx.chains[node]
    owner = owner_of(ctx, ctx.g.nodes[node]["region"])
    members, stack = {node}, [node]
    why: str | None = None
    while stack and why is None:
        m = stack.pop()
        op = ctx.g.nodes[m]["op"]
        if isinstance(op, core.LoadOp) and id(op.view) in ctx.stored_views:
            why = (f"its chain re-reads %{ctx.names.get(op.view, '?')}, which the kernel "
                   "also stores (a store may intervene)")
        for u, _ in ctx.g.in_edges(m):
            if ctx.g.nodes[u]["kind"] == "memory.load":
                why = why or (f"its chain reaches the Memory snapshot {ctx.node_name[u]} "
                              "(a snapshot is read once)")
            elif u not in members and rederivable(ctx, u, owner):
                members.add(u)
                stack.append(u)
        if len(members) > MAX_RECOMPUTE_CHAIN:
            why = f"its producer chain is longer than {MAX_RECOMPUTE_CHAIN} ops"
    chain = Chain(frozenset(members), why)
    ctx.chains[node] = chain
    return chain


def _chain_cycles(ctx: _Ctx, chain: Chain, scope: str) -> float:
    """Cycles of one re-derivation at ``scope``: every member once (a load's tile read
    through the global resource, shared among the concurrent instances)."""
    cycles = 0.0
    for n in chain.members:
        compute, traffic = _op_cycles(ctx, ctx.g.nodes[n], scope)
        cycles += compute + traffic
    return cycles


def _loops_entered(ctx: _Ctx, pd: Mapping[str, object], cd: Mapping[str, object]
                   ) -> list[str]:
    inner = set(pd["loops"])  # type: ignore[arg-type]
    return [lp for lp in cd["loops"] if lp not in inner]  # type: ignore[attr-defined]


def _span(ctx: _Ctx, u: str, v: str, carried: bool, inclusive: bool = False,
          in_place: bool = False) -> tuple[int, int]:
    """``[def, use)`` of ``u``'s value for a use at node ``v`` (the reported lifetime).

    ``inclusive`` gives the occupancy interval instead: the value is still held while
    the use is computed (its reader and the result it writes coexist), unless the use
    updates a loop carry ``in_place`` (element by element into the carry's own buffer).
    """
    pd, cd = ctx.g.nodes[u], ctx.g.nodes[v]
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


def _fusion_illegal(ctx: _Ctx, u: str, v: str, data: Mapping[str, object]) -> str | None:
    pd, cd = ctx.g.nodes[u], ctx.g.nodes[v]
    kind, ckind = pd["kind"], cd["kind"]
    common = _inline_illegal(ctx, u, v, data)
    if common:
        return common
    if kind.startswith("tile.reduce"):
        return "a reduction's result cannot be fused into its consumer"
    if kind == "tile.mma":
        return "an mma accumulator cannot be fused into its consumer"
    if not is_fusible_kind(kind):
        return f"{kind} is not fusible (only elementwise, broadcast, load, full, iota, cast, " \
               "select producers are)"
    if ckind == "tile.mma":
        if data["operand"] == 2:
            return "never fused into an mma accumulator"
        if kind not in _LOADS:
            return "an mma operand is read from storage (fusing arithmetic would repeat it " \
                   "for every output column)"
    if data["stage_distance"]:
        return "fusion across pipeline stages would undo the schedule"
    if kind == "memory.load" and _stored_between(ctx, pd, cd):
        return "the Memory is stored between the snapshot and this use"
    op = cd["op"]
    result = op.results[0] if op is not None and op.results else None
    if (result is not None and isinstance(result.type, TileType)
            and not ckind.startswith(("tile.reduce", "tile.broadcast"))
            and ckind != "tile.mma"):
        pshape = _tile_shape(ctx, pd["value"])
        cshape = _tile_shape(ctx, result)
        if pshape != cshape:
            return f"iteration spaces differ ({list(pshape)} vs {list(cshape)})"
    return None


def _inline_illegal(ctx: _Ctx, u: str, v: str, data: Mapping[str, object]) -> str | None:
    pd, cd = ctx.g.nodes[u], ctx.g.nodes[v]
    if data["loop_carried"]:
        return "loop-carried edges are virtual or materialized"
    if cd["kind"] == "loop.carry":
        return "a loop-carried value's initial value is stored, not inlined"
    if pd["kind"] == "loop.carry":
        return "a loop carry is a recurrence: it cannot be re-derived per consumer"
    if owner_of(ctx, pd["region"]) != owner_of(ctx, cd["region"]):
        return "producer and consumer run in different parallel instances"
    return None


def _recompute_illegal(ctx: _Ctx, u: str, v: str, data: Mapping[str, object],
                       fuse_why: str | None) -> str | None:
    """Why ``u -> v`` may not be recomputed, or None.

    Besides what cannot be re-derived, recomputation is not offered where it is the
    same program as fusion: when fusion is legal and the producer's chain is the
    producer alone (a load, full or iota, or an op whose operands all stop the chain),
    re-deriving it bypasses no realization of an intermediate value, so both inline
    the producer reading its operands as their edges decided.
    """
    common = _inline_illegal(ctx, u, v, data)
    if common:
        return common
    kind = ctx.g.nodes[u]["kind"]
    if kind.startswith("tile.reduce"):
        return "a reduction is not re-executed per consumer"
    if kind == "tile.mma":
        return "an mma result is not recomputed"
    if kind == "memory.load":
        return "a Memory snapshot is read once (a later read could see another state)"
    if not is_recomputable_kind(kind):
        return f"{kind} is not recomputable"
    if ctx.g.nodes[v]["kind"] == "tile.mma" and data["operand"] == 2:
        return "never recomputed into an mma accumulator (as for fusion)"
    chain = recompute_chain(ctx, u)
    if chain.why_not:
        return chain.why_not
    if fuse_why is None and chain.members == {u}:
        return (f"the same program as fused: {ctx.node_name[u]} has no recomputable operand "
                "whose realization re-deriving it would bypass")
    return None


def _stored_between(ctx: _Ctx, pd: Mapping[str, object], cd: Mapping[str, object]) -> bool:
    mem = pd["op"].memory  # type: ignore[attr-defined]
    lo, hi = pd["order"], cd["order"]
    return any(isinstance(d["op"], core.MemStoreOp) and d["op"].memory is mem
               and lo < d["order"] < hi for _, d in ctx.g.nodes(data=True))


def _edge(ctx: _Ctx, index: int, key: tuple[str, str, int], value: int) -> Edge:
    u, v, k = key
    data = ctx.g.edges[u, v, k]
    pd, cd = ctx.g.nodes[u], ctx.g.nodes[v]
    illegal: list[tuple[Decision, str]] = []
    pscope = ctx.owner_scope[owner_of(ctx, pd["region"])]
    if ctx.fig.register_home(pscope) is None:
        illegal.append((VIRTUAL, f"{ctx.target.name} has no private resource for {pscope} "
                                 "to keep it in"))
    fuse_why = _fusion_illegal(ctx, u, v, data)
    if fuse_why:
        illegal.append((FUSED, fuse_why))
    rec_why = _recompute_illegal(ctx, u, v, data, fuse_why)
    if rec_why:
        illegal.append((RECOMPUTED, rec_why))
    cexec = _executions(ctx, cd)
    fused = _node_terms(ctx, u, cexec) if not fuse_why else ()
    recompute: Terms = ()
    if not rec_why:
        scope = ctx.owner_scope[owner_of(ctx, cd["region"])]
        cycles = _chain_cycles(ctx, recompute_chain(ctx, u), scope)
        if data["stage_distance"]:
            cycles += _latency_cycles(ctx, pd, scope)
        recompute = terms(**{RECOMPUTE: ctx.fig.ns(cycles, cexec)})
    pname, cname = ctx.node_name[u], ctx.node_name[v]
    return Edge(index, edge_id(ctx.node_name, u, v, data["operand"]), value, pname, cname,
                cd["kind"], int(data["operand"]), int(data["bytes_value"] or 0),
                _span(ctx, u, v, bool(data["loop_carried"])), int(data["stage_distance"]),
                bool(data["loop_carried"]), tuple(illegal), fused, recompute, (), (),
                _columns_read(cd["kind"], cd["op"], int(data["operand"])))


def _value(ctx: _Ctx, index: int, node: str, edges: list[Edge], policy: Policy) -> Value:
    d = ctx.g.nodes[node]
    owner = owner_of(ctx, d["region"])
    scope = ctx.owner_scope[owner]
    shape = _tile_shape(ctx, d["value"])
    itemsize = d["dtype"].itemsize
    nbytes = math.prod(shape) * itemsize
    pexec = _executions(ctx, d)
    home = _node_terms(ctx, node, pexec)
    maxv = 1
    cross = [e.stage_distance for e in edges if not e.loop_carried]
    if d.get("pipeline") is not None and cross and max(cross) > 0:
        maxv = min(max(cross), max(1, int(d.get("window") or 1)) - 1) + 1
    reg = ctx.fig.register_home(scope)
    register, reg_bytes = (None, 0) if reg is None else (
        reg[0].name, _align(version_bytes(nbytes, maxv), reg[0].alignment))
    latency = ctx.fig.ns(_latency_cycles(ctx, d, scope), pexec)
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


def _placements(ctx: _Ctx, d: Mapping[str, object], scope: str, shape: tuple[int, ...],
                itemsize: int, edges: list[Edge], pexec: int, maxv: int = 1
                ) -> list[Placement]:
    fig = ctx.fig
    out: list[Placement] = []
    cols = any(e.column_reader for e in edges)
    nbytes = math.prod(shape) * itemsize
    elements = math.prod(shape)
    for r in ctx.target.resources:
        if r.resource_class == "private":
            continue  # registers hold virtual values; they are not addressable buffers
        _, reason = fig.capacity_for(r, scope)
        if reason or not ctx.accessible(r, scope, _writer_ops(str(d["kind"]))):
            continue
        sync, sync_cycles = fig.sync_rule(r, scope)
        banks = (r.banks.count, r.banks.width) if r.banks is not None else None
        for lay in layout_candidates(shape, itemsize, banks, cols):
            write = terms(**{
                TRAFFIC: fig.ns(fig.traffic_cycles(nbytes, r, scope), pexec),
                BARRIERS: fig.ns(sync_cycles, pexec),
                LAYOUT: fig.ns(elements / fig.throughput("cheap"), pexec)
                if lay.kind == "swizzled" else 0.0})
            out.append(Placement(r.name, lay, _align(version_bytes(
                layout_bytes(shape, itemsize, lay), maxv), r.alignment), write, sync))
    return out


def _with_reads(ctx: _Ctx, e: Edge, v: Value) -> Edge:
    fig = ctx.fig
    cd = ctx.g.nodes[ctx.node_by_name[e.consumer]]
    cscope = ctx.owner_scope[owner_of(ctx, cd["region"])]
    cexec = _executions(ctx, cd)
    reads: list[Terms | None] = []
    why: list[str] = []
    for p in v.placements:
        r = ctx.target.resource(p.resource)
        if not ctx.accessible(r, cscope, _reader_ops(e.consumer_kind)):
            reads.append(None)
            why.append(f"{cscope} cannot read {r.name} for {e.consumer_kind}")
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
    illegal = e.illegal
    if all(r is None for r in reads):
        detail = "; ".join(sorted(set(why))) or (
            f"no resource of {ctx.target.name} can be written by {v.scope} for {v.kind}")
        illegal = (*illegal, (MATERIALIZED, f"no admissible resource ({detail})"))
    return Edge(e.index, e.edge_id, e.value, e.producer, e.consumer, e.consumer_kind,
                e.operand, e.bytes, e.span, e.stage_distance, e.loop_carried, illegal,
                e.fused, e.recompute, tuple(reads), tuple(why), e.column_reader)


# --------------------------------------------------------------------------- holding


def is_inlinable_kind(kind: str) -> bool:
    """Producers the lowering computes inline when none of their edges stores them."""
    return is_fusible_kind(kind) or kind == "tile.transpose"


def _is_elementwise(kind: str) -> bool:
    return kind.startswith(_ELEMENTWISE_PREFIXES) or kind in ("tile.select", "tile.cast")


@dataclass(frozen=True, slots=True)
class _Carry:
    """A loop carry and the value yielded to it (one buffer in the lowering when aliased)."""

    value: int
    yielded: int
    yield_node: str
    yield_def: int
    loop_end: int  # one past the loop's last point
    aliased: bool  # the yielded value is computed straight into the carry's buffer
    copies: int  # 2: the old value is read after the new one is written (ping-pong)


class _Holding:
    """Where and how long every value is held, as the lowering allocates it.

    * A value is held from its definition through the evaluation of its last reader
      (the reader's result and its operands coexist), and a reader fused or recomputed
      into a later consumer is evaluated there: the value's lifetime then extends to
      that consumer (a decision-dependent :class:`Guard` ``site``).
    * A loop carry's buffer exists for the whole loop: until its yielded value is
      written into it (in place, when the old value is not read afterwards, else two
      versions for the whole loop), and beside the yielded value when their storage
      differs (a :class:`Guard` ``split``: the lowering then copies at the yield).
    * Temporaries: mma operand staging and, where registers are split among the
      owner's threads, exchange areas (:class:`Temp`).
    """

    def __init__(self, ctx: _Ctx, values: list[Value], edges: list[Edge],
                 value_of: Mapping[str, int]) -> None:
        self.ctx = ctx
        g = ctx.g
        self.point_node = {int(d["order"]): n for n, d in g.nodes(data=True)}
        cnode = [ctx.node_by_name[e.consumer] for e in edges]
        self.edges = [dataclasses.replace(
            e, consumer_value=value_of.get(cn), consumer_point=int(g.nodes[cn]["order"]),
            aligned=self._aligned_hop(e, cn, values)) for e, cn in zip(edges, cnode,
                                                                         strict=True)]
        self.values = [dataclasses.replace(v, inlinable=is_inlinable_kind(v.kind))
                       for v in values]
        self._reach: dict[int, frozenset[int]] = {}
        self._aligned_to: dict[tuple[int, int], bool] = {}
        self.values = [dataclasses.replace(v, sites=tuple(sorted(self.reach(v.index))))
                       for v in self.values]
        self.guards: list[Guard] = []
        self._guard_index: dict[Guard, int] = {}
        self._chain_roots = self._stop_readers()
        self._chain_aligned: dict[tuple[int, str], bool] = {}
        self.carries = {c.value: c for c in self._carries()}
        self._scale_carries()
        self._held()
        self.values = [self._segments(v) for v in self.values]

    # ------------------------------------------------------------------ structure

    def _aligned_hop(self, e: Edge, cn: str, values: list[Value]) -> bool:
        kind = e.consumer_kind
        if kind in ("tile.store", "memory.store", "loop.carry"):
            return True
        if kind == "tile.mma":
            return e.operand == 2
        if _is_elementwise(kind):
            result = self.ctx.g.nodes[cn].get("value")
            return result is not None and _tile_shape(self.ctx, result) == values[e.value].shape
        return False

    def can_home(self, vi: int) -> bool:
        v = self.values[vi]
        return not v.inlinable or any(self.edges[i].legal(VIRTUAL)
                                      or self.edges[i].legal(MATERIALIZED) for i in v.edges)

    def _inline_edges(self, vi: int) -> list[Edge]:
        return [e for i in self.values[vi].edges if (e := self.edges[i]).legal(FUSED)
                or e.legal(RECOMPUTED)]

    def reach(self, vi: int) -> frozenset[int]:
        """Later points where value ``vi`` may be evaluated (inlined into consumers)."""
        if vi not in self._reach:
            out: set[int] = set()
            for e in self._inline_edges(vi):
                if e.consumer_value is None:
                    out.add(e.consumer_point)
                    continue
                if self.can_home(e.consumer_value):
                    out.add(self.values[e.consumer_value].def_point)
                out |= self.reach(e.consumer_value)
            self._reach[vi] = frozenset(out)
        return self._reach[vi]

    def aligned_to(self, vi: int, site: int) -> bool:
        """Whether every inlining path from ``vi`` to ``site`` reads element for element."""
        key = (vi, site)
        if key not in self._aligned_to:
            ok = True
            for e in self._inline_edges(vi):
                if e.consumer_value is None:
                    if e.consumer_point == site:
                        ok = ok and e.aligned
                    continue
                c = self.values[e.consumer_value]
                if c.def_point == site:
                    ok = ok and e.aligned
                elif site in self.reach(c.index):
                    ok = ok and e.aligned and self.aligned_to(c.index, site)
            self._aligned_to[key] = ok
        return self._aligned_to[key]

    def guard(self, kind: str, a: int, b: int) -> int:
        gd = Guard(kind, a, b)
        if gd not in self._guard_index:
            self._guard_index[gd] = len(self.guards)
            self.guards.append(gd)
        return self._guard_index[gd]

    def _sites_of(self, e: Edge) -> list[tuple[int, int | None, bool]]:
        """(point, site guard, read element for element) of every evaluation of ``e``'s
        consumer that may read ``e``'s value; guard None: the consumer is a sink.

        A value that stops a recompute chain (a reduction, mma result or loop carry) is
        also read wherever a recomputation re-derives its consumer: where the chain's
        root may be evaluated (an over-approximation when the root is evaluated there
        only in its own, decided, way)."""
        if e.consumer_value is None:
            return [(e.consumer_point, None, e.aligned)]
        c = self.values[e.consumer_value]
        out = [(c.def_point, self.guard("site", c.index, c.def_point), e.aligned)]
        out += [(n, self.guard("site", c.index, n), e.aligned and self.aligned_to(c.index, n))
                for n in sorted(self.reach(c.index))]
        for t in self._chain_roots.get(e.index, ()):
            along = e.aligned and self._aligned_in_chain(t, c.node)
            out += [(n, self.guard("site", t, n), along and self.aligned_to(t, n))
                    for n in sorted(self.reach(t))]
        return out

    def _stop_readers(self) -> dict[int, list[int]]:
        """Edge -> the values whose recompute chain contains the edge's consumer (not as
        its root) but not its producer: the chain stops there and reads the value."""
        ctx = self.ctx
        value_at = {v.node: v.index for v in self.values}
        edge_at = {(self.values[e.value].node, ctx.node_by_name[e.consumer], e.operand): e.index
                   for e in self.edges}
        out: dict[int, list[int]] = {}
        for t in self.values:
            if not any(self.edges[i].legal(RECOMPUTED) for i in t.edges):
                continue
            members = recompute_chain(ctx, t.node).members
            for m in members - {t.node}:
                for w, _, d in ctx.g.in_edges(m, data=True):
                    i = edge_at.get((w, m, d["operand"]))
                    if w not in members and w in value_at and i is not None:
                        out.setdefault(i, []).append(t.index)
        return out

    def _aligned_in_chain(self, t: int, node: str) -> bool:
        """Whether every path from chain member ``node`` to the chain's root ``t`` reads
        element for element."""
        key = (t, node)
        if key not in self._chain_aligned:
            root = self.values[t]
            members = recompute_chain(self.ctx, root.node).members
            ok = True
            if node != root.node:
                v = next(x for x in self.values if x.node == node)
                for i in v.edges:
                    e = self.edges[i]
                    if e.consumer_value is None:
                        continue
                    cn = self.values[e.consumer_value].node
                    if cn in members:
                        ok = ok and e.aligned and self._aligned_in_chain(t, cn)
            self._chain_aligned[key] = ok
        return self._chain_aligned[key]

    # ------------------------------------------------------------------ carries

    def _carries(self) -> list[_Carry]:
        g = self.ctx.g
        out = []
        for v in self.values:
            if v.kind != "loop.carry":
                continue
            fed = [e for e in self.edges if e.loop_carried and e.consumer_value == v.index]
            if len(fed) != 1:
                continue
            y = self.values[fed[0].value]
            label = g.nodes[v.node]["loop"]
            end = self.ctx.loop_span[label][1] + 1
            yields = sum(1 for i in y.edges if self.edges[i].loop_carried)
            aliased = (tuple(g.nodes[y.node]["region"][-1:]) == (label,) and yields == 1
                       and y.max_versions == 1 and y.kind != "loop.carry")
            copies = 1
            if aliased:
                for i in v.edges:
                    e = self.edges[i]
                    if label not in g.nodes[self.ctx.node_by_name[e.consumer]]["loops"]:
                        continue  # a use of the loop result
                    for n, _, aligned in self._sites_of(e):
                        if n > y.def_point or (n == y.def_point and not aligned):
                            copies = 2
            out.append(_Carry(v.index, y.index, y.node, y.def_point, end, aliased, copies))
        return out

    def _scale_carries(self) -> None:
        """A carry that ping-pongs keeps two versions of its buffer."""
        for c in self.carries.values():
            if c.copies == 1:
                continue
            v = self.values[c.value]
            reg = self.ctx.fig.register_home(v.scope)
            reg_bytes = v.reg_bytes
            if reg is not None:
                reg_bytes = c.copies * _align(version_bytes(v.bytes, 2), reg[0].alignment)
            placements = tuple(dataclasses.replace(p, bytes=c.copies * _align(version_bytes(
                layout_bytes(v.shape, v.itemsize, p.layout), 2), self.ctx.target.resource(
                p.resource).alignment)) for p in v.placements)
            self.values[c.value] = dataclasses.replace(v, reg_bytes=reg_bytes,
                                                       placements=placements)

    def _in_place(self, e: Edge, site: int, aligned: bool) -> bool:
        """A carry's read at the statement that writes its next value into its own buffer,
        element for element: the old and the new value share the buffer."""
        c = self.carries.get(e.value)
        return (c is not None and c.aliased and c.copies == 1 and site == c.yield_def
                and aligned)

    # ------------------------------------------------------------------ intervals

    def _held(self) -> None:
        ctx = self.ctx
        out = []
        for e in self.edges:
            v = self.values[e.value]
            cn = ctx.node_by_name[e.consumer]
            sites = self._sites_of(e) if not e.loop_carried else []
            direct = next((s for s in sites if s[0] == e.consumer_point), None)
            in_place = direct is not None and self._in_place(e, direct[0], direct[2])
            held = _span(ctx, v.node, cn, e.loop_carried, inclusive=True, in_place=in_place)
            pipe = ctx.g.nodes[v.node].get("pipeline")
            if v.max_versions > 1 and pipe in ctx.g.nodes[cn]["loops"]:
                # a value kept in versions is one array, live over the whole pipeline loop
                lo, hi = ctx.loop_span[pipe]
                held = (min(held[0], lo), max(held[1], hi + 1))
            remote = []
            for n, gd, aligned in sites:
                if n == e.consumer_point or gd is None:
                    continue
                _, end = _span(ctx, v.node, self.point_node[n], False, inclusive=True,
                               in_place=self._in_place(e, n, aligned))
                if end > held[1]:
                    remote.append((n, end, gd))
            out.append(dataclasses.replace(e, held=held, remote=tuple(remote)))
        self.edges = out

    def _segments(self, v: Value) -> Value:
        items: list[tuple[int, int, int, int | None]] = []  # start, end, edge, guard
        for i in v.edges:
            e = self.edges[i]
            items.append((e.held[0], e.held[1], i, None))
            for _, end, gd in e.remote:
                items.append((e.held[1], end, i, gd))
        c = self.carries.get(v.index)
        if c is not None:  # one buffer serves every use: held wherever any use holds it
            whole = not c.aliased or c.copies > 1
            after = max([self.edges[i].held[1] for i in v.edges], default=c.loop_end)
            for i in v.edges:
                items.append((v.def_point, c.loop_end if whole else c.yield_def, i, None))
                if not whole:
                    items.append((c.yield_def, c.loop_end, i,
                                  self.guard("split", v.index, c.yielded)))
                if after > c.loop_end:  # the loop result, read after the loop
                    items.append((c.loop_end, after, i, None))
        cuts = sorted({x for a, b, _, _ in items for x in (a, b)})
        # Sweep the cuts: an item covers [lo, hi) (consecutive cuts) iff a <= lo < b.
        starts: dict[int, list[tuple[int, int | None]]] = {}
        ends: dict[int, list[tuple[int, int | None]]] = {}
        for a, b, i, gd in items:
            if a < b:
                starts.setdefault(a, []).append((i, gd))
                ends.setdefault(b, []).append((i, gd))
        segs: list[Segment] = []
        active: dict[tuple[int, int | None], int] = {}  # item -> overlapping copies
        covered: dict[int, int] = {}  # unguarded edge -> items
        gsorted: list[tuple[int, int]] = []  # the active guarded items, sorted
        gedges: dict[int, int] = {}  # edge -> active guarded items
        for lo, hi in itertools.pairwise(cuts):
            for key in ends.get(lo, ()):
                n = active[key] - 1
                if n:
                    active[key] = n
                    continue
                del active[key]
                i, gd = key
                bag = covered if gd is None else gedges
                if bag[i] == 1:
                    del bag[i]
                else:
                    bag[i] -= 1
                if gd is not None:
                    del gsorted[bisect.bisect_left(gsorted, key)]  # type: ignore[arg-type]
            for key in starts.get(lo, ()):
                n = active.get(key, 0)
                active[key] = n + 1
                if n:
                    continue
                i, gd = key
                bag = covered if gd is None else gedges
                bag[i] = bag.get(i, 0) + 1
                if gd is not None:
                    bisect.insort(gsorted, key)  # type: ignore[arg-type]
            if not active:
                continue
            cover = tuple(sorted(covered))
            if any(i in gedges for i in cover):
                guarded = tuple(k for k in gsorted if k[0] not in covered)
            else:
                guarded = tuple(gsorted)
            segs.append(Segment(lo, hi, cover, guarded))
        return dataclasses.replace(v, segments=tuple(segs))

    # ------------------------------------------------------------------ temporaries

    def _temp_resource(self, nbytes: int, static: bool, scope: str) -> Resource | None:
        """Where the lowering puts a compiler temporary (the one rule of
        :func:`planner.realize.temporaries.temporary_home`)."""
        return temporary_home(self.ctx.target, scope, nbytes, static)

    def _exchange_resource(self, scope: str) -> Resource | None:
        """The shared resource through which threads of ``scope`` read each other's
        registers, when registers are per thread below the owner."""
        return exchange_home(self.ctx.target, scope)

    def _owner(self, point: int) -> str:
        return owner_of(self.ctx, self.ctx.g.nodes[self.point_node[point]]["region"])

    def _row_major_memory(self, v: Value) -> bool:
        op = self.ctx.g.nodes[v.node]["op"]
        for alloc in self.ctx.g.graph["allocs"]:
            a: core.AllocOp = alloc["op"]
            if a.memory is op.memory:
                lay = a.layout
                return not lay.swizzles and (not lay.strides or _eval(lay.strides[-1],
                                                                      self.ctx.env) == 1)
        return True

    def temps(self) -> list[Temp]:
        out: list[Temp] = []

        def add(name: str, res: Resource, nbytes: int, point: int,
                when: list[tuple[Lit, ...]]) -> None:
            if when:
                out.append(Temp(len(out), name, res.name, _align(nbytes, res.alignment), point,
                                self._owner(point), tuple(when)))

        for e in self.edges:
            if e.consumer_kind == "tile.mma" and e.operand in (0, 1):
                self._staging(e, add)
        for v in self.values:
            self._exchanges(v, add)
        return out

    def _staging(self, e: Edge, add: object) -> None:
        v = self.values[e.value]
        nbytes = math.prod(v.shape) * 4  # staging is f32, dense
        shape = self.ctx.g.nodes[v.node]["shape"]
        scope = self.ctx.owner_scope[self._owner(e.consumer_point)]
        res = self._temp_resource(nbytes, product(tuple(shape)).const_value() is not None,
                                  scope)
        if res is None:
            self.ctx.static_infeasible.append(
                f"staging of {v.name} for {e.consumer} ({nbytes:,} B, used by {scope}) has "
                f"no home on {self.ctx.target.name}: no resource serving {scope} that it may "
                "write and read has room for it")
            return
        view: list[tuple[Lit, ...]] = []  # a view window: read in place where it can be
        nest: list[tuple[Lit, ...]] = []  # a copy statement before the mma
        if e.legal(FUSED):
            if v.kind == "tile.load":
                view.append((("x", e.index, FUSED),))
            elif v.kind == "memory.load" and not self._row_major_memory(v):
                nest.append((("x", e.index, FUSED),))
        if e.legal(RECOMPUTED):
            (view if v.kind == "tile.load" else nest).append((("x", e.index, RECOMPUTED),))
        if v.kind not in ("tile.mma", "loop.carry"):  # those buffers are kept row-major
            for q, p in enumerate(v.placements):
                if p.layout.kind == "swizzled":
                    nest += [(("x", e.index, c), ("y", v.index, q))
                             for c in (VIRTUAL, MATERIALIZED) if e.legal(c)]
        where = f"{v.name} for {e.consumer}"
        add(f"staging of {where}", res, nbytes, e.consumer_point, view + nest)  # type: ignore[operator]
        xres = self._exchange_resource(scope)
        if xres is not None and res.resource_class == "private":
            add(f"exchange of the staging of {where}", xres, nbytes,  # type: ignore[operator]
                e.consumer_point, nest)

    def _exchanges(self, v: Value, add: object) -> None:
        if v.register is None:
            return
        by_site: dict[int, list[tuple[Lit, ...]]] = {}
        for i in v.edges:
            e = self.edges[i]
            if not e.legal(VIRTUAL) or e.loop_carried:
                continue
            for n, gd, aligned in self._sites_of(e):
                if not aligned:
                    by_site.setdefault(n, []).append(
                        (("x", i, VIRTUAL),) + ((("g", gd, None),) if gd is not None else ()))
        for n, when in sorted(by_site.items()):
            res = self._exchange_resource(self.ctx.owner_scope[self._owner(n)])
            if res is not None:
                add(f"exchange of {v.name} for {self.ctx.node_name[self.point_node[n]]}",  # type: ignore[operator]
                    res, v.bytes, n, when)



def _memories(ctx: _Ctx) -> list[MemoryOccupant]:
    out: list[MemoryOccupant] = []
    for alloc in ctx.g.graph["allocs"]:
        op: core.AllocOp = alloc["op"]
        default = ctx.alloc_resource.get(id(op.memory))
        if default is None:
            continue
        uses = [n for n, d in ctx.g.nodes(data=True)
                if isinstance(d["op"], (core.MemLoadOp, core.MemStoreOp))
                and d["op"].memory is op.memory]
        if not uses:
            continue
        # allocated per instance of its owner: held wherever the owner runs (the
        # lowering declares it for the whole instance, not around its uses)
        owner = op.owner if op.owner in ctx.parallels else None
        orders = [d["order"] for _, d in ctx.g.nodes(data=True)
                  if owner is None or owner in d["region"]]
        orders = orders or [ctx.g.nodes[n]["order"] for n in uses]
        lo, hi = min(orders), max(orders) + 1
        maxv, stall = _memory_versions(ctx, uses)
        homes = _memory_homes(ctx, op, default)
        storage = version_bytes(op.layout.storage_elements(ctx.env) * op.dtype.itemsize, maxv)
        traffic = [_memory_traffic_ns(ctx, uses, r) for r in homes]
        out.append(MemoryOccupant(len(out), "%" + ctx.names.get(op.memory, "memory"),
                                  tuple(r.name for r in homes),
                                  tuple(_align(storage, r.alignment) for r in homes),
                                  (lo, hi), op.owner if op.owner in ctx.parallels else "kernel",
                                  maxv, stall, tuple(round(t - traffic[0]) for t in traffic)))
    return out


def _memory_homes(ctx: _Ctx, op: core.AllocOp, default: Resource) -> list[Resource]:
    """The homes the planner may choose: legal and accessible to every scope that
    touches the Memory with the operations it applies; the default home first."""
    mb = ctx.binding.memory(op)
    homes = [r for r in mb.homes
             if all(ctx.target.can_access(a.scope, r.name, a.operation) for a in mb.accesses)]
    return [default, *(r for r in homes if r.name != default.name)]


def _memory_traffic_ns(ctx: _Ctx, uses: list[str], res: Resource) -> float:
    """Time of the Memory's loads and stores if it lived in ``res``."""
    total = 0.0
    for n in uses:
        d = ctx.g.nodes[n]
        op = d["op"]
        tile = op.result if isinstance(op, core.MemLoadOp) else op.tile
        nbytes = math.prod(_tile_shape(ctx, tile)) * tile.type.dtype.itemsize
        scope = ctx.owner_scope[owner_of(ctx, d["region"])]
        total += ctx.fig.ns(ctx.fig.traffic_cycles(nbytes, res, scope), _executions(ctx, d))
    return total


def _memory_versions(ctx: _Ctx, uses: list[str]) -> tuple[int, tuple[int, ...]]:
    """Versions an explicit Memory wants (stores and loads in different stages)."""
    nodes = ctx.g.nodes
    stores = [n for n in uses if isinstance(nodes[n]["op"], core.MemStoreOp)]
    loads = [n for n in uses if isinstance(nodes[n]["op"], core.MemLoadOp)]
    dist, window = 0, 1
    for s in stores:
        for ld in loads:
            sd, dd = nodes[s], nodes[ld]
            if (sd.get("pipeline") is not None and sd.get("pipeline") == dd.get("pipeline")
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
            latency += ctx.fig.ns(_latency_cycles(ctx, d, scope), _executions(ctx, d))
    return maxv, tuple(round(latency * (maxv - k) / (maxv - 1)) for k in range(1, maxv + 1))


def _capacities(ctx: _Ctx, values: list[Value], memories: list[MemoryOccupant],
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
    """Holders live at each point where something starts (other points are dominated)."""
    items: list[tuple[int, int, str, tuple[int, int]]] = [
        (s.start, s.end, "v", (v.index, i)) for v in values for i, s in enumerate(v.segments)]
    items += [(m.span[0], m.span[1], "m", (m.index, 0)) for m in memories]
    items += [(t.point, t.point + 1, "t", (t.index, 0)) for t in temps]
    items.sort()
    out: list[LivePoint] = []
    active: list[tuple[int, int, str, tuple[int, int]]] = []
    pos = 0
    for p in sorted({it[0] for it in items}):
        while pos < len(items) and items[pos][0] <= p:
            active.append(items[pos])
            pos += 1
        active = [it for it in active if it[1] > p]
        if p not in points:
            continue
        segs = tuple(sorted(it[3] for it in active if it[2] == "v"))
        mems = tuple(sorted(it[3][0] for it in active if it[2] == "m"))
        tmps = tuple(sorted(it[3][0] for it in active if it[2] == "t"))
        out.append(LivePoint(p, points[p].owner, segs, mems, tmps))
    return out


def _constant(ctx: _Ctx, values: list[Value]) -> Terms:
    parts: list[Terms] = [v.home for v in values if not v.edges]
    for n, d in ctx.g.nodes(data=True):
        if d.get("sink") and d["kind"] in _SINKS:
            parts.append(_node_terms(ctx, n, _executions(ctx, d)))
    return add_terms(*parts)


# --------------------------------------------------------------------------- evaluation


def derived_flags(problem: Problem, choices: tuple[Decision, ...], v: Value
                  ) -> tuple[bool, bool, bool]:
    """(home, materialized, preserved across stages) of value ``v`` under ``choices``."""
    es = [problem.edges[i] for i in v.edges]
    home = any(choices[e.index] in PRESERVING for e in es)
    mat = any(choices[e.index] is MATERIALIZED for e in es)
    cross = any(choices[e.index] in PRESERVING and e.cross_stage for e in es)
    return home, mat, cross


def allowed_choices(problem: Problem, e: Edge,
                    restrictions: Mapping[int, frozenset[Decision]] | None = None
                    ) -> list[Decision]:
    """Legal choices of ``e`` under the policy, or under a baseline's restrictions.

    A baseline is a complete strategy: where it restricts an edge, the policy does not
    apply.  The ``expensive-only`` policy only inlines edges where inlining is legal.
    """
    v = problem.values[e.value]
    out = [c for c in CHOICES if e.legal(c)]
    if restrictions and e.index in restrictions:
        return [c for c in out if c in restrictions[e.index]]
    if v.policy == "preserve":
        out = [c for c in out if c in PRESERVING]
    elif v.policy == "inline":
        out = [c for c in out if c in INLINING] or out
    return out


def evaluate(problem: Problem, a: Assignment,
             restrictions: Mapping[int, frozenset[Decision]] | None = None) -> Evaluation:
    """The reference semantics: constraints checked and every cost term attributed to an edge.

    Value-level costs go to one of the value's edges: the home compute to its first
    preserved edge, the write (and barrier) to its first materialized edge, a stall to
    its first preserved cross-stage edge.
    """
    bad: list[str] = []
    edge_terms: list[Terms] = [() for _ in problem.edges]
    for e in problem.edges:
        c = a.choices[e.index]
        if c not in allowed_choices(problem, e, restrictions):
            bad.append(f"{e.edge_id}: {c.value} is not allowed")
    for v in problem.values:
        bad += _evaluate_value(problem, a, v, edge_terms)
    memory_terms: list[Terms] = []
    for m in problem.memories:
        k = a.memory_versions[m.index] if a.memory_versions else 1
        if not 1 <= k <= m.max_versions:
            bad.append(f"Memory {m.name}: {k} versions outside 1..{m.max_versions}")
            continue
        h = m.home_of(a)
        if not 0 <= h < len(m.homes):
            bad.append(f"Memory {m.name}: home {h} outside its {len(m.homes)} homes")
            continue
        memory_terms.append(terms(**{STALLS: m.stall[k - 1],
                                     TRAFFIC: m.home_cost[h] if m.home_cost else 0}))
    occupancy = occupancies(problem, a)
    for occ in occupancy:
        if occ.capacity is not None and occ.bytes > occ.capacity:
            bad.append(f"{occ.resource} holds {occ.bytes} B > {occ.capacity} B at point "
                       f"{occ.point}")
    return Evaluation(tuple(bad), tuple(edge_terms), add_terms(*memory_terms),
                      problem.constant, tuple(occupancy))


def _evaluate_value(problem: Problem, a: Assignment, v: Value,
                    edge_terms: list[Terms]) -> list[str]:
    bad: list[str] = []
    home, mat, cross = derived_flags(problem, a.choices, v)
    q = a.placement[v.index]
    k = a.versions[v.index]
    es = [problem.edges[i] for i in v.edges]
    if mat != (q is not None):
        bad.append(f"{v.name}: placement {q} does not match its materialized edges")
    if not 1 <= k <= v.max_versions or (k != 1 and not cross):
        bad.append(f"{v.name}: {k} versions (allowed 1..{v.max_versions}, 1 unless preserved "
                   "across stages)")
    for e in es:
        c = a.choices[e.index]
        part: list[Terms] = []
        if c is FUSED:
            part.append(e.fused)
        elif c is RECOMPUTED:
            part.append(e.recompute)
        elif c is MATERIALIZED and q is not None:
            read = e.reads[q] if q < len(e.reads) else None
            if read is None:
                bad.append(f"{e.edge_id}: placement in {v.placements[q].resource} is not "
                           "admissible")
            else:
                part.append(read)
        edge_terms[e.index] = add_terms(edge_terms[e.index], *part)
    first_home = next((e for e in es if a.choices[e.index] in PRESERVING), None)
    if home and first_home is not None:
        edge_terms[first_home.index] = add_terms(edge_terms[first_home.index], v.home)
    first_mat = next((e for e in es if a.choices[e.index] is MATERIALIZED), None)
    if first_mat is not None and q is not None:
        edge_terms[first_mat.index] = add_terms(edge_terms[first_mat.index],
                                                v.placements[q].write)
    first_cross = next((e for e in es if a.choices[e.index] in PRESERVING and e.cross_stage),
                       None)
    if first_cross is not None and 1 <= k <= v.max_versions:
        edge_terms[first_cross.index] = add_terms(edge_terms[first_cross.index],
                                                  terms(**{STALLS: v.stall[k - 1]}))
    return bad


class Truth:
    """What an assignment implies beyond its choices: where each value is evaluated, where
    it is stored, and hence which guards and temporaries hold."""

    def __init__(self, problem: Problem, a: Assignment) -> None:
        self.problem = problem
        self.a = a
        self._sites: dict[int, frozenset[int]] = {}

    def home(self, vi: int) -> bool:
        """Whether value ``vi`` is computed at its own point (into its buffer)."""
        v = self.problem.values[vi]
        return not v.inlinable or any(self.a.choices[i] in PRESERVING for i in v.edges)

    def sites(self, vi: int) -> frozenset[int]:
        """The points where value ``vi``'s expression is evaluated."""
        if vi not in self._sites:
            v = self.problem.values[vi]
            out = {v.def_point} if self.home(vi) else set()
            for i in v.edges:
                e = self.problem.edges[i]
                c = self.a.choices[i]
                if c in INLINING and e.legal(c):  # (an illegal choice is reported anyway)
                    out |= ({e.consumer_point} if e.consumer_value is None
                            else self.sites(e.consumer_value))
            self._sites[vi] = frozenset(out)
        return self._sites[vi]

    def storage(self, vi: int) -> str | None:
        """The resource of the value's one buffer (its placement, else its registers)."""
        v = self.problem.values[vi]
        q = self.a.placement[vi]
        return v.placements[q].resource if q is not None else v.register

    def guard(self, gi: int) -> bool:
        g = self.problem.guards[gi]
        if g.kind == "site":
            return g.b in self.sites(g.a)
        return self.storage(g.a) != self.storage(g.b) or self.mixed(g.b)

    def mixed(self, vi: int) -> bool:
        """Kept in registers for some edges and in a buffer for others (two copies)."""
        return self.a.placement[vi] is not None and any(
            self.a.choices[i] is VIRTUAL for i in self.problem.values[vi].edges)

    def lit(self, lit: Lit) -> bool:
        kind, i, arg = lit
        if kind == "x":
            return self.a.choices[i] is arg
        if kind == "y":
            return self.a.placement[i] == arg
        return self.guard(i)

    def temp(self, t: Temp) -> bool:
        return any(all(self.lit(x) for x in alt) for alt in t.when)


def segment_live(problem: Problem, a: Assignment, v: Value, seg: Segment,
                 truth: Truth | None = None) -> tuple[bool, bool]:
    """(in registers, in its materialized buffer) over ``seg``."""
    cs = [a.choices[i] for i in seg.edges]
    reg, mat = VIRTUAL in cs, MATERIALIZED in cs
    for i, g in seg.guarded:
        c = a.choices[i]
        if c in PRESERVING and not (reg if c is VIRTUAL else mat):
            truth = truth or Truth(problem, a)
            if truth.guard(g):
                reg, mat = reg or c is VIRTUAL, mat or c is MATERIALIZED
    return reg, mat


def occupancies(problem: Problem, a: Assignment) -> list[Occupancy]:
    """Bytes held per resource at every checked point, with the holders."""
    out: list[Occupancy] = []
    truth = Truth(problem, a)
    live: dict[tuple[int, int], tuple[bool, bool]] = {}
    for lp in problem.live_points:
        held: dict[str, list[tuple[str, int]]] = {}
        for vi, si in lp.segments:
            v = problem.values[vi]
            if (vi, si) not in live:
                live[(vi, si)] = segment_live(problem, a, v, v.segments[si], truth)
            reg, mat = live[(vi, si)]
            k = a.versions[vi]
            label = v.name if k == 1 else f"{v.name} ×{k}"
            if reg and v.register is not None:
                held.setdefault(v.register, []).append((label, v.reg_bytes * k))
            q = a.placement[vi]
            if mat and q is not None:
                p = v.placements[q]
                held.setdefault(p.resource, []).append((label, p.bytes * k))
        for mi in lp.memories:
            m = problem.memories[mi]
            k = a.memory_versions[mi] if a.memory_versions else 1
            h = m.home_of(a)
            held.setdefault(m.homes[h], []).append(
                (m.name if k == 1 else f"{m.name} ×{k}", m.home_bytes[h] * k))
        for ti in lp.temps:
            t = problem.temps[ti]
            if truth.temp(t):
                held.setdefault(t.resource, []).append((t.name, t.bytes))
        for res, holders in sorted(held.items()):
            out.append(Occupancy(res, lp.owner, lp.point, sum(b for _, b in holders),
                                 problem.capacity(res, lp.owner), tuple(holders)))
    return out
