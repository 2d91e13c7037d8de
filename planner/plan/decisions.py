"""The MaterializationPlan: what the planner decided, why, and what it costs (S3).

A plan assigns every live Tile edge of the dataflow graph (``planner.ir.graph``)
exactly one :class:`Decision`.  A materialized edge also names its resource (a
catalog resource name), layout, version count, lifetime and synchronization.
Costs are integer units of estimated time (nanoseconds by default, from the
catalog's figures), broken down per edge and per term so that two plans can be
diffed and a decision explained.  Plans are frozen values: the same kernel,
catalog, bindings and policy give the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Decision(StrEnum):
    VIRTUAL = "virtual"  # stays in SSA/registers between producer and consumer
    FUSED = "fused"  # producer computed inline in the consumer's loop, no storage
    RECOMPUTED = "recomputed"  # consumer re-executes the producer (and what it needs)
    MATERIALIZED = "materialized"  # stored in a resource buffer, read back by the consumer


class Policy(StrEnum):
    DEFAULT = "default"  # preserve every pure multi-consumer Tile definition (S4)
    EXPENSIVE_ONLY = "expensive-only"  # preserve exp/log/sqrt/tanh; recompute cheap ones


class Baseline(StrEnum):
    ALL_MATERIALIZE = "all-materialize"
    GREEDY_FUSION = "greedy-fusion"
    ALL_VIRTUAL = "all-virtual"


class Status(StrEnum):
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"  # a solution with a gap (time limit)
    INFEASIBLE = "infeasible"


@dataclass(frozen=True, slots=True)
class LayoutChoice:
    """A storage layout for a materialized edge: dense, padded rows or XOR-swizzled."""

    kind: str  # "dense" | "padded" | "swizzled"
    pad: int = 0  # extra elements per row for "padded"
    swizzle: tuple[int, int, int] | None = None  # (bits, base, shift) for "swizzled"

    def __str__(self) -> str:
        if self.kind == "padded":
            return f"padded +{self.pad}"
        if self.kind == "swizzled" and self.swizzle:
            return "swizzled xor({}, {}, {})".format(*self.swizzle)
        return self.kind


@dataclass(frozen=True, slots=True)
class EdgePlan:
    """The decision for one def→use edge, its parameters and its cost terms."""

    edge_id: str  # stable: "<producer name> -> <consumer name>#<operand>"
    producer: str
    consumer: str
    value: str  # printed name of the Tile value
    bytes: int
    decision: Decision
    resource: str | None = None
    layout: LayoutChoice | None = None
    versions: int = 1
    sync: str | None = None  # the catalog sync rule that orders write -> read
    lifetime: tuple[int, int] = (0, 0)  # program points [def, last use]
    stage_distance: int = 0
    cost: dict[str, int] = field(default_factory=dict)  # term -> units
    reason: str = ""  # one line: why this choice (binding constraint or cheapest)
    producer_kind: str = ""  # e.g. "tile.unary.exp"
    consumer_kind: str = ""  # e.g. "tile.reduce.sum", "tile.store"
    lines: tuple[int, int] = (0, 0)  # the producer's and the consumer's source lines (0: none)

    @property
    def total_cost(self) -> int:
        return sum(self.cost.values())


@dataclass(frozen=True, slots=True)
class ResourcePeak:
    resource: str
    capacity: int | None  # bytes per instance; None when unbounded
    peak_bytes: int
    at_point: int  # program point of the peak
    holders: tuple[tuple[str, int], ...]  # (what, bytes) held at the peak


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """An explicit Memory allocation: a fixed occupant whose version count is planned."""

    name: str
    resource: str
    bytes: int  # one version, padding and alignment included
    versions: int = 1
    max_versions: int = 1
    lifetime: tuple[int, int] = (0, 0)  # program points [first, end)


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """How one ``memory.copy_async`` runs (:mod:`planner.realize.copies`): the engine
    that moves it (None: a synchronous load and store by the issuer), the versions of its
    destination the plan keeps and whether the transfer overlaps compute.

    ``kind`` ``staged load`` / ``staged store``: a view ``tile.load`` / ``tile.store``
    the scope cannot make directly, moved by ``engine`` between the global resource and
    the ``staging`` resource (``memory`` is then the value's name; ``source`` the view).
    ``cycles``: issue + exposed transfer of one copy on its engine (None: synchronous)."""

    memory: str  # "%As"
    line: int
    source: str  # "view A" / "memory %As"
    source_resource: str
    destination: str  # the destination Memory's home
    scope: str  # the issuing scope
    engine: str | None
    mode: str  # async | prefetch | synchronous
    bytes: int | None
    versions: int  # the destination's versions in this plan
    wanted_versions: int  # what overlapping the copy wants
    overlapped: bool
    wait: str
    detail: str = ""
    kind: str = "copy_async"  # copy_async | staged load | staged store
    staging: str | None = None  # a staged transfer's scratchpad resource
    cycles: float | None = None


def register_copy_name(value: str) -> str:
    """The planned buffer of a value's register copy (kept beside its materialized one)."""
    return f"{value} (registers)"


def staging_name(value: str, consumer: str) -> str:
    """The planned buffer staging ``value`` as an mma operand of ``consumer``."""
    return f"staging of {value} for {consumer}"


def exchange_name(value: str, consumer: str) -> str:
    """The planned area through which ``consumer``'s threads read ``value``'s registers."""
    return f"exchange of {value} for {consumer}"


@dataclass(frozen=True, slots=True)
class PlannedBuffer:
    """One buffer the plan holds, as the lowering allocates it: every materialized value,
    register copy, loop carry, explicit Memory and compiler temporary (mma operand
    staging, register exchange area).  ``live``: the ``(owner, first, last)`` program
    point ranges where it is held; ``bytes`` counts every version with alignment;
    ``sync``: how its writes are ordered before its reads (None: by program order)."""

    name: str  # "%5", "%5 (registers)", "%m_i_1", "staging of %3 for %8", ...
    role: str  # value | register copy | carry | memory | staging | exchange
    resource: str
    bytes: int
    versions: int
    live: tuple[tuple[str, int, int], ...]
    sync: str | None = None  # the catalog sync rule that orders its writes before reads


@dataclass(frozen=True, slots=True)
class ProofSummary:
    name: str  # e.g. "can_access", "factorization", "capacity", "injectivity", "int64"
    status: str  # "proved" | "refuted" | "assumed" | "unknown" | "skipped"
    detail: str = ""


@dataclass(frozen=True, slots=True)
class MaterializationPlan:
    kernel: str
    target: str
    policy: Policy
    baseline: Baseline | None
    bindings: tuple[tuple[str, int], ...]
    edges: tuple[EdgePlan, ...]
    peaks: tuple[ResourcePeak, ...]
    objective: int
    breakdown: dict[str, int]  # "compute", "traffic", "barriers", "bank_conflicts", ...
    status: Status
    gap: float = 0.0
    solve_time_s: float = 0.0  # CP-SAT search (and, when infeasible, the explanation)
    proofs: tuple[ProofSummary, ...] = ()
    explanation: tuple[str, ...] = ()  # for infeasible plans: the violated groups, numbers
    content_hash: str = ""  # of kernel text, catalog, bindings, policy, baseline
    memories: tuple[MemoryPlan, ...] = ()  # explicit Memory: fixed occupants, versions
    bound: int = 0  # the solver's lower bound on the objective (== objective if optimal)
    buffers: tuple[PlannedBuffer, ...] = ()  # every buffer held, where and how long
    catalog_file: str = ""  # the catalog file the target was read from
    catalog_hash: str = ""  # sha256 of that file's text (an override is visible here)
    #: wall seconds per planning phase (build, proofs, model, solve, evaluate/explain)
    phases: tuple[tuple[str, float], ...] = ()
    #: every memory.copy_async, then every staged view load/store, in program order
    copies: tuple[CopyPlan, ...] = ()

    def edge(self, edge_id: str) -> EdgePlan:
        for e in self.edges:
            if e.edge_id == edge_id:
                return e
        raise KeyError(edge_id)

    def decision_counts(self) -> dict[Decision, int]:
        """How many edges got each decision (every Decision present, zeros included)."""
        counts = dict.fromkeys(Decision, 0)
        for e in self.edges:
            counts[e.decision] += 1
        return counts

    def __repr__(self) -> str:
        """One line: kernel, target, status, estimated time, V/F/R/M counts, peaks."""
        from planner.plan.plan_io import fmt_ns, fmt_size

        c = self.decision_counts()
        vfrm = (f"V{c[Decision.VIRTUAL]} F{c[Decision.FUSED]} R{c[Decision.RECOMPUTED]} "
                f"M{c[Decision.MATERIALIZED]}")
        base = f" {self.baseline.value}" if self.baseline is not None else ""
        head = f"<MaterializationPlan {self.kernel} on {self.target}{base}: {self.status.value}"
        if self.status is Status.INFEASIBLE:
            return f"{head}, {len(self.explanation)} reason(s)>"[:299]
        peaks = [f"{p.resource} {fmt_size(p.peak_bytes)}"
                 + (f"/{fmt_size(p.capacity)}" if p.capacity is not None else "")
                 for p in self.peaks]
        text = f"{head}, est. {fmt_ns(self.objective)}, {vfrm}"
        if peaks:
            text += ", peak " + ", ".join(peaks)
        if len(text) > 297:
            text = text[:293] + "..."
        return text + ">"

    def _repr_html_(self) -> str:
        """An HTML summary (Jupyter): the one-line header, the edges and the buffers."""
        from html import escape

        from planner.plan.plan_io import decision_text, fmt_ns, fmt_size

        def table(headers: list[str], rows: list[list[str]]) -> str:
            head = "".join(f"<th>{escape(h)}</th>" for h in headers)
            body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r)
                           + "</tr>" for r in rows)
            return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

        parts = [f"<p><code>{escape(repr(self))}</code></p>"]
        if self.explanation:
            parts.append("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in self.explanation)
                         + "</ul>")
        parts.append(table(
            ["edge", "decision", "versions", "bytes", "cost", "reason"],
            [[e.edge_id, decision_text(e), str(e.versions), fmt_size(e.bytes),
              fmt_ns(e.total_cost), e.reason] for e in self.edges]))
        if self.buffers:
            parts.append(table(
                ["buffer", "role", "resource", "bytes", "versions", "sync"],
                [[b.name, b.role, b.resource, fmt_size(b.bytes), str(b.versions),
                  b.sync or ""] for b in self.buffers]))
        return "<div class=\"planner-plan\">" + "".join(parts) + "</div>"
