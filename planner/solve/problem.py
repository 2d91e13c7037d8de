"""The priced planning problem as frozen data.

The vocabulary of decisions and cost terms, and the types that
:func:`~planner.solve.build.build_problem` produces and that the CP-SAT model
(:mod:`planner.solve.model`) and the reference evaluator (:mod:`planner.solve.evaluator`)
read: program points, values and their edges with the price of each choice, the
placements a value may take, its live segments and the guards and temporaries they depend
on, explicit Memory occupants and the checked points; then one complete assignment of
decisions and its evaluation.  What the numbers mean is explained in
:mod:`planner.solve.costs`.
"""

from __future__ import annotations

import dataclasses
import gc
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from planner.plan.decisions import Decision, LayoutChoice, Policy

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


class OutOfTime(Exception):
    """The caller's deadline passed while the problem or its model was being built;
    ``plan_kernel`` then answers with its heuristic plan (or a timeout when no problem
    exists yet)."""


class _Slotted:
    __slots__ = ("x",)


_MEMBER = type(_Slotted.__dict__["x"])  # the descriptor type of a slot

D = TypeVar("D")
_FIELDS: dict[type, tuple[Callable[[Any], tuple[Any, ...]], dict[str, int],
                          list[Any] | None]] = {}


def replaced(obj: D, **changes: Any) -> D:
    """``dataclasses.replace(obj, **changes)`` for a dataclass whose fields are all
    ``__init__`` parameters, about four times faster (the builder replaces tens of
    thousands of values and edges).

    A slotted class without ``__post_init__`` is filled slot by slot, as its frozen
    ``__init__`` would, but through the slots' own setters (a third faster)."""
    cls = type(obj)
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = _fields_of(cls)
    getter, index, slots = found
    args = list(getter(obj))
    for name, value in changes.items():
        args[index[name]] = value
    if slots is None:
        return cls(*args)
    new = object.__new__(cls)
    for put, value in zip(slots, args, strict=True):
        put(new, value)
    return new


def _fields_of(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], dict[str, int],
                                   list[Any] | None]:
    """(all fields' getter, field -> position, the slot descriptors or None) of ``cls``."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    getter = operator.attrgetter(*names) if len(names) > 1 else (
        lambda o: (getattr(o, names[0]),))  # one name alone would not give a tuple
    slots = [cls.__dict__.get(n) for n in names]
    direct = (not hasattr(cls, "__post_init__") and "__slots__" in cls.__dict__
              and all(type(d) is _MEMBER for d in slots))
    return getter, {n: i for i, n in enumerate(names)}, [
        d.__set__ for d in slots] if direct else None


def check_deadline(deadline: float | None) -> None:
    """Raise :class:`OutOfTime` past ``deadline`` (a ``time.perf_counter()`` instant)."""
    if deadline is not None and time.perf_counter() > deadline:
        raise OutOfTime


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside: building the problem and the model allocates
    hundreds of thousands of small objects, none of them garbage, and each collection
    rescans them.  The collection the pause held back runs as it ends (here, inside the
    caller's time, not at the next allocation after it): it scans what the pause left,
    alive or cyclic garbage, so let go of what is done with before the pause ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            gc.collect(0)


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


class Segment(NamedTuple):  # a named tuple: built by the hundred thousand
    """Points ``[start, end)`` where the value is needed by exactly ``edges``.

    ``chained`` holds it too, conditionally: ``(chain, first)`` names the guards
    ``chains[chain].guards[first:]`` of the value's :class:`GuardChain`; each keeps the
    value (in registers when the chain's edge is virtual, in its buffer when
    materialized) when the edge is preserving and the :class:`Guard` holds (the
    consumer is inlined into a consumer evaluated later, or a carry's storage is split
    from its yielded value's).  A suffix, not a list: a value's segment count and its
    guards both grow with the points after it, and listing every guard in every
    segment made the problem cubic in the length of an inlinable chain.
    """

    start: int
    end: int
    edges: tuple[int, ...]
    chained: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class GuardChain:
    """Guarded holds of one edge that start at one point, ordered by where they end.

    Guard ``guards[j]`` holds the value from the chain's start to ``ends[j]``, so the
    guards that cover a segment are a suffix of the chain (see :class:`Segment`).
    """

    edge: int
    start: int
    guards: tuple[int, ...]
    ends: tuple[int, ...]
    #: when every guard is a ``site`` guard of one value at increasing points: that
    #: value and the points (the last guard holding is then a bisection, not a scan)
    site_of: int = -1
    points: tuple[int, ...] = ()


class Guard(NamedTuple):
    """A condition on other edges' choices that a holder depends on.

    ``site``: value ``a`` is evaluated at point ``b`` (computed there into its buffer,
    or inlined, fused or recomputed, into a consumer evaluated there).  ``split``: the
    carry value ``a`` and the value ``b`` yielded to it live in different storage, or
    ``b`` is kept both in registers and in a buffer (the lowering then keeps the
    carry's buffer for the whole loop beside ``b``'s own and copies at the yield).
    ``recompute``: value ``a``'s chain is re-derived at point ``b`` (some edge of ``a``
    is recomputed into a consumer evaluated there): the values that stop the chain are
    read there.  ``pingpong``: the value ``b`` yielded to carry ``a`` is computed into
    the carry's buffer (same storage, not split) while the old value is still read
    (one of the ``any_of`` guards holds): the carry then keeps two versions, the old
    value and ``b``, for the whole loop.  ``versioned``: value ``a`` keeps more than one
    version.

    A named tuple, not a dataclass: a large kernel has hundreds of thousands of guards,
    and the tuple is both the record and its own dedup key (built ~3x faster).
    """

    kind: str  # "site" | "split" | "recompute" | "pingpong" | "versioned"
    a: int
    b: int
    any_of: tuple[int, ...] = ()  # pingpong: guards of the late reads (-1: always)


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
    holds.  ``sync``: the catalog rule ordering its fill before its reads (None: none).
    """

    index: int
    name: str
    resource: str
    bytes: int
    point: int
    owner: str
    when: tuple[tuple[Lit, ...], ...]
    sync: str | None = None


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
    chains: tuple[GuardChain, ...] = ()  # what segments' ``chained`` refer to
    #: (edge, start, end): where an edge holds the value whatever else is decided (the
    #: segments' ``edges``, as merged intervals per edge; chains give the rest)
    covers: tuple[tuple[int, int, int], ...] = ()
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
    #: (start, end, guard): held there too when the guard holds (a value kept in several
    #: versions is one array over its whole pipeline loop)
    extra: tuple[tuple[int, int, int], ...] = ()
    lines: tuple[int, int] = (0, 0)  # source lines of the producer and the consumer (0: none)

    def legal(self, choice: Decision) -> bool:
        for c, _ in self.illegal:  # noqa: SIM110 (no generator: a hot call of the model)
            if c is choice:
                return False
        return True

    def why_illegal(self, choice: Decision) -> str | None:
        return next((why for c, why in self.illegal if c is choice), None)

    @property
    def cross_stage(self) -> bool:
        return self.stage_distance > 0


def illegal_text(e: Edge) -> str:
    """``fused, recomputed: <why>; materialized: <why>``: the edge's forbidden choices."""
    by_reason: dict[str, list[str]] = {}
    for c, why in e.illegal:
        by_reason.setdefault(why, []).append(c.value)
    return "; ".join(f"{', '.join(cs)}: {why}" for why, cs in by_reason.items())


@dataclass(frozen=True, slots=True)
class MemoryOccupant:
    """An explicit Memory allocation: a fixed occupant whose home and versions are decided.

    ``homes`` are the legal placements of the execution binding that every scope touching
    the Memory may access (nearest first); ``home_bytes[h]`` is one version there (padding
    and that resource's alignment included) and ``home_cost[h]`` the traffic of the
    Memory's loads and stores there, relative to ``homes[0]`` (already in the constant).
    ``home_sync[h]`` is the catalog sync rule that orders its stores before its loads
    among the owner's members there (None: program order suffices).
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
    home_sync: tuple[str | None, ...] = ()

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
    #: :func:`~planner.solve.evaluator.held_at_points`' answer, kept for the plan's buffer
    #: listing (owned by this evaluation: nothing global caches it)
    held: tuple[tuple[tuple[str, int], list[object]], ...] = field(default=(), compare=False,
                                                                    repr=False)

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
