"""The z3 proofs behind every access: what a kernel needs from a target (S5, S6, S13–S20).

:func:`prove_kernel` checks a kernel against a :class:`~planner.catalog.Target` and
returns a :class:`ProofReport` with one :class:`ProofResult` per obligation, each
``proved`` (by a catalog lookup, arithmetic on constants, or z3 over the symbol bounds),
``refuted`` (with a counterexample), ``assumed`` (it holds under an assumption the detail
states, e.g. that a view's storage exists; the counterexample shows where it would fail
otherwise) or ``unknown`` (z3 gave up within the time limit, which the detail gives;
never silently treated as proved).  An exception inside a check is a bug: it is raised
as an ``internal`` :class:`~planner.errors.PlannerError` naming the proof, never turned
into a status.

Execution binding.  Scopes, owners and each Memory's legal homes come from
:func:`planner.realize.bind_execution`, the one place that binds parallels to target
scopes; a Memory is checked in the home the plan chose for it (``placements``), or in
its nearest legal home when no plan is given.

The obligations, in the order S14 asks for (addressing before capacity):

``can_access`` (S20, S6)
    Each access (op, executing scope, resource, operation) is in the target's explicit
    relation: view loads/stores ``read``/``write`` the global resource, ``memory.store``
    writes and ``memory.load`` reads the Memory's resource (a load feeding an ``mma`` is
    checked as a ``read``; reading operands in place with ``mma_read`` is a planner
    choice).  Where the plain operation is refused, an access to a Memory of an explicit
    class (and a view load above the default parallel scope feeding only Memory stores)
    is performed by its engine alternative if the target allows it: ``mma_read`` /
    ``mma_write`` in place, or ``copy_async`` (:mod:`planner.prove.engines`); the result
    names the operation used.  A view load/store whose scope may not touch the global
    resource at all is proved when a copy engine stages it through a resource the
    scope's execution units reach (:func:`planner.realize.copies.staged_transfer`): the
    result names the engine, both resources and the wait.  A class the target has no
    resource for is refuted here (S5), naming the operations its accesses would need.
``factorization`` (S20, S17)
    The execution-to-memory equation ``ResourceTopology ∘ ExecBinding = Instance_s ∘ π``.
    Over the target's scope coordinates (one integer per level, bounded by the level's
    extent), z3 searches two events whose owner projections agree but whose resource
    instances differ; none exists iff the instance is a function of the owner
    coordinate.  When the resource lives strictly above the owner, two owner instances
    share one resource instance, which needs a slicing plan ``base(p)``: without
    ``slicing`` in the catalog z3's witness pair is the refutation.  Group-owned private
    and worker-owned shared without slicing fail here; the owner is never changed.
``int64`` (S14)
    Byte addressing fits signed 64 bits under the symbol bounds: for each view access,
    the largest byte offset of an element the window touches inside the view; for each
    Memory, its bytes over all slices.  Empty domains have no address events.
``capacity`` (S17, S6)
    Per resource instance, the explicit Memories that can be live together (an owner
    and its nested owners; sibling parallel regions run one after the other) plus the
    caller's ``extra_occupants``, each layout's storage (padding and swizzle blocks
    included) × itemsize rounded up to the resource alignment × owner instances per
    resource instance, must not exceed the capacity for any symbol values in bounds.
``injectivity`` (S13) and ``bounds`` (S20)
    Each Memory layout is injective on its domain, and every element (every active
    event of its whole-tile loads and stores) lands in ``[0, storage)`` with every
    divisor non-zero; see :mod:`planner.prove.z3_layout` for XOR swizzles.

Unbound symbols range over ``symbol_bounds`` (default ``0 ≤ s ≤ 2**31 - 1``); region
indices range over ``[0, extent)`` of their region; ``bindings`` fix values.  Every
check runs under ``time_limit_ms``; concrete questions are answered by direct
evaluation or enumeration in milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import z3

from planner.catalog import AUTO, Operation, Resource, Target, normalize_class
from planner.errors import UNKNOWN_LOC, Diagnostic, PlannerError, Severity, SourceLoc
from planner.ir import core
from planner.ir.core import AllocOp, Kernel, Op
from planner.ir.expr import Expr, IntLike, as_expr, mul
from planner.ir.types import TileType, ViewType
from planner.ir.verify import value_name
from planner.prove import engines, z3_layout
from planner.prove.z3_exprs import INT64_MAX, SymbolSpace, check
from planner.realize.binding import ExecutionBinding, MemoryAccess, OpContext, bind_execution
from planner.realize.copies import (
    CopyRealization,
    StagedTransfer,
    copy_operations,
    realize_copies,
    staged_transfer,
)

PROOF_NAMES: tuple[str, ...] = ("can_access", "factorization", "int64", "capacity",
                                "injectivity", "bounds")
PROVED, REFUTED, ASSUMED, UNKNOWN = "proved", "refuted", "assumed", "unknown"
STATUSES: tuple[str, ...] = (PROVED, REFUTED, ASSUMED, UNKNOWN)
#: Every assumption a proof may rest on: its name (as the README lists it) and the text
#: an ``assumed`` result's detail starts with.
ASSUMPTIONS: dict[str, str] = {
    "view storage exists": "assuming the view's storage exists",
}


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ProofResult:
    """One obligation: which check, about what, its status and the witness if refuted."""

    name: str  # one of PROOF_NAMES
    subject: str  # the op or allocation, printable
    status: str  # "proved" | "refuted" | "unknown"
    detail: str
    counterexample: dict[str, int] | None = None
    loc: SourceLoc = UNKNOWN_LOC
    rule: str = ""
    notes: tuple[tuple[SourceLoc, str], ...] = ()
    elapsed_ms: float = field(default=0.0, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == PROVED

    def diagnostic(self) -> Diagnostic:
        """The located finding for a refuted (error), assumed or unknown (warning) result."""
        message = f"{self.name} {self.status}: {self.subject}: {self.detail}"
        if self.counterexample:
            cex = ", ".join(f"{k}={v}" for k, v in self.counterexample.items())
            message += f" [counterexample: {cex}]"
        severity = Severity.ERROR if self.status == REFUTED else Severity.WARNING
        return Diagnostic(message, self.loc, self.rule, severity, self.notes)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "subject": self.subject, "status": self.status,
                "detail": self.detail, "counterexample": self.counterexample,
                "rule": self.rule, "elapsed_ms": round(self.elapsed_ms, 3),
                "location": {"file": self.loc.file, "line": self.loc.line,
                             "col": self.loc.col}}


@dataclass(frozen=True)
class ProofReport:
    """Every obligation of one kernel on one target."""

    target: str
    results: tuple[ProofResult, ...]
    elapsed_ms: float = field(default=0.0, compare=False)
    placements: tuple[tuple[str, str | None], ...] = ()  # (memory, resource name or None)

    @property
    def ok(self) -> bool:
        """True when every obligation is proved (none refuted, none unknown)."""
        return all(r.status == PROVED for r in self.results)

    @property
    def refuted(self) -> tuple[ProofResult, ...]:
        return tuple(r for r in self.results if r.status == REFUTED)

    @property
    def unknown(self) -> tuple[ProofResult, ...]:
        return tuple(r for r in self.results if r.status == UNKNOWN)

    @property
    def assumed(self) -> tuple[ProofResult, ...]:
        return tuple(r for r in self.results if r.status == ASSUMED)

    def by_name(self, name: str) -> tuple[ProofResult, ...]:
        return tuple(r for r in self.results if r.name == name)

    def diagnostics(self) -> list[Diagnostic]:
        """One diagnostic per refuted, assumed or unknown result, in check order."""
        return [r.diagnostic() for r in self.results if r.status != PROVED]

    def raise_if_refuted(self) -> None:
        """Raise a PlannerError (kind ``proof``) listing every refuted obligation."""
        diags = [r.diagnostic() for r in self.refuted]
        if diags:
            raise PlannerError(diags, kind="proof")

    def summary(self) -> dict[str, dict[str, int]]:
        """Counts per check and status, e.g. ``{"capacity": {"refuted": 1}}``."""
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            counts = out.setdefault(r.name, {})
            counts[r.status] = counts.get(r.status, 0) + 1
        return out

    def to_json(self) -> dict[str, object]:
        return {"target": self.target, "ok": self.ok, "summary": self.summary(),
                "elapsed_ms": round(self.elapsed_ms, 3),
                "results": [r.to_json() for r in self.results]}


# --------------------------------------------------------------------------- allocations


@dataclass
class _Access:
    op: Op
    scope: str
    operation: Operation
    note: str = ""
    alternatives: tuple[Operation, ...] = ()  # plain first, then the engine's (engines.py)


@dataclass
class _Alloc:
    op: AllocOp
    name: str
    owner_scope: str
    resource: Resource | None  # what target.resolve chose
    candidate: Resource | None  # resolved, or the nearest resource of the class that failed
    accesses: list[_Access] = field(default_factory=list)
    homes: tuple[Resource, ...] = ()  # every legal home (the planner chooses among them)
    slices: int | None = 1  # owner instances per resource instance (None: unbounded)


def _class_name(alloc: AllocOp) -> str:
    return normalize_class(alloc.resource.value)


def _candidate(target: Target, cls: str, owner: str) -> Resource | None:
    """The resource a refusal is explained with: an ancestor's first, then a descendant's."""
    if cls == AUTO:
        pool = [r for r in target.resources
                if {Operation.READ, Operation.WRITE} <= r.operations]
    else:
        pool = list(target.resources_for_class(cls))

    def rank(r: Resource) -> int:
        if target.is_ancestor_or_self(r.instance_scope, owner):
            return 0
        return 1 if target.is_ancestor_or_self(owner, r.instance_scope) else 2
    return min(pool, key=rank) if pool else None


def _uses_text(a: _Alloc) -> str:
    """What the Memory's accesses would need of a home: each op with its operations."""
    uses = dict.fromkeys(f"{acc.op.SPEC.name} at {acc.scope} "
                         f"({' or '.join(str(o) for o in acc.alternatives or (acc.operation,))})"
                         for acc in a.accesses)
    return f"; %{a.name} is accessed by {', '.join(uses)}" if uses else ""


def _completion(target: Target, res: Resource, scope: str) -> str:
    """The sync rule of ``res`` that completes an asynchronous copy issued at ``scope``:
    the rule at that scope, else the nearest ancestor's, else the resource's first."""
    rules = list(res.sync)
    for rule in rules:
        if rule.scope == scope:
            return rule.name
    above = [r for r in rules if target.is_ancestor_or_self(r.scope, scope)]
    if above:
        return max(above, key=lambda r: target.scope_depth(r.scope)).name
    return rules[0].name if rules else "program order"


# --------------------------------------------------------------------------- entry point


def prove_kernel(kernel: Kernel, target: Target, bindings: Mapping[str, int] | None = None,
                 symbol_bounds: Mapping[str, tuple[int, int]] | None = None,
                 time_limit_ms: int = 2000,
                 extra_occupants: Iterable[tuple[str, str, IntLike]] = (),
                 placements: Mapping[str, str] | None = None,
                 binding: ExecutionBinding | None = None) -> ProofReport:
    """Prove or refute every target-dependent obligation of ``kernel`` on ``target``.

    ``bindings`` fixes symbol values; other symbols range over ``symbol_bounds``
    (inclusive ``(lo, hi)``, default ``(0, 2**31 - 1)``).  ``extra_occupants`` are the
    planner's temporaries, ``(name, resource name, bytes)``, charged to every instance
    of that resource.  ``placements`` maps a Memory's name to the home the plan chose
    (default: its nearest legal home).  Each z3 query gets ``time_limit_ms``.
    """
    start = time.perf_counter()
    for name, (lo, hi) in (symbol_bounds or {}).items():
        if lo > hi:
            raise PlannerError(Diagnostic(f"symbol_bounds[{name!r}] = ({lo}, {hi}) is empty: "
                                          "every proof would hold vacuously", kernel.loc),
                               kind="invalid")
    prover = _Prover(kernel, target, dict(bindings or {}), dict(symbol_bounds or {}),
                     time_limit_ms, tuple(extra_occupants), binding, placements)
    results = prover.run()
    placements = tuple((a.name, a.resource.name if a.resource else None)
                       for a in prover.allocs)
    return ProofReport(target.name, tuple(results), (time.perf_counter() - start) * 1e3,
                       placements)


class _Prover:
    def __init__(self, kernel: Kernel, target: Target, bindings: dict[str, int],
                 symbol_bounds: dict[str, tuple[int, int]], time_limit_ms: int,
                 extra: tuple[tuple[str, str, IntLike], ...],
                 binding: ExecutionBinding | None = None,
                 placements: Mapping[str, str] | None = None) -> None:
        self.kernel, self.target = kernel, target
        self.bindings, self.bounds = bindings, symbol_bounds
        self.limit = time_limit_ms
        self.extra = extra
        self.binding = binding or bind_execution(kernel, target, bindings)
        self.placements = dict(placements or {})
        self.copies: dict[int, CopyRealization] = {}  # filled by collect_allocs
        self.ctx = z3.Context()  # one private z3 context per run: proofs run from any thread
        self.allocs: list[_Alloc] = []
        self.results: list[ProofResult] = []
        #: :meth:`view_addressing`'s answers: a large kernel accesses few distinct windows
        self.addressing: dict[tuple[object, ...], tuple[str, str, dict[str, int] | None]] = {}

    def space(self, ctx: OpContext | None = None) -> SymbolSpace:
        sp = SymbolSpace(self.bindings, self.bounds, ctx=self.ctx)
        for ax in (ctx.axes if ctx else ()):
            sp.declare_index(ax.index.name, ax.extent)
        return sp

    def add(self, name: str, subject: str, status: str, detail: str,
            cex: dict[str, int] | None, loc: SourceLoc, rule: str, started: float,
            notes: Sequence[tuple[SourceLoc, str]] = ()) -> None:
        self.results.append(ProofResult(name, subject, status, detail, cex, loc, rule,
                                        tuple(notes), (time.perf_counter() - started) * 1e3))

    def run(self) -> list[ProofResult]:
        self.results.extend(ProofResult("factorization", p.subject, REFUTED, p.detail, None,
                                        p.loc, p.rule) for p in self.binding.problems)
        self.guarded("can_access", "the kernel's Memory", self.collect_allocs)
        self.guarded("can_access", "every access", self.check_can_access)
        for a in self.allocs:
            self.guarded("factorization", f"memory %{a.name}", self.check_factorization, a)
        self.guarded("int64", "the view accesses", self.check_int64_views)
        for a in self.allocs:
            self.guarded("int64", f"memory %{a.name}", self.check_int64_memory, a)
        self.guarded("capacity", "every resource", self.check_capacity)
        for a in self.allocs:
            self.guarded("injectivity", f"memory %{a.name}", self.check_layout, a)
        return self.results

    def guarded(self, proof: str, subject: str, check_fn: object, *args: object) -> None:
        """Run one check; an exception in it is a prover bug, reported as one (never a
        status): an ``internal`` error naming the proof and its subject."""
        try:
            check_fn(*args)  # type: ignore[operator]
        except PlannerError:
            raise
        except Exception as exc:
            raise PlannerError(Diagnostic(
                f"internal error: the {proof} proof of {subject} failed with "
                f"{type(exc).__name__}: {exc} (a prover bug; please report it with the "
                "kernel)", self.kernel.loc), kind="internal") from exc

    # ------------------------------------------------------------------ gathering

    def collect_allocs(self) -> None:
        uses = engines.kernel_uses(self.kernel)
        self.copies = {id(c.op): c for c in realize_copies(
            self.kernel, self.target, self.binding, self.bindings, self.placements)}
        for mb in self.binding.memory_bindings():
            res = mb.home_named(self.placements.get(mb.name))
            info = _Alloc(mb.alloc, mb.name, mb.owner_scope, res,
                          res or _candidate(self.target, mb.resource_class, mb.owner_scope),
                          homes=mb.homes)
            for acc in mb.accesses:
                if isinstance(acc.op, core.CopyAsyncOp):
                    info.accesses.append(self.copy_access(acc, mb.alloc))
                    continue
                note = ("; the snapshot feeds tile.mma: checked as a read (reading the "
                        "operand in place with mma_read is a planner choice)"
                        if acc.feeds_mma else "")
                alts = (acc.operation,) if mb.resource_class == AUTO \
                    else engines.alternatives(acc, uses)
                info.accesses.append(_Access(acc.op, acc.scope, acc.operation, note, alts))
            self.allocs.append(info)

    def copy_access(self, acc: MemoryAccess, alloc: AllocOp) -> _Access:
        """A copy's access of a Memory, with the operation its realization applies
        (``copy_async`` on an async engine, else a plain read or write)."""
        real = self.copies.get(id(acc.op))
        src_op, dst_op = copy_operations(real)
        dest = acc.op.memory is alloc.memory  # type: ignore[attr-defined]
        operation = dst_op if dest else src_op
        how = f"; {real.mode} copy" + (f" by {real.engine.name}" if real and real.engine
                                        else "") if real is not None else ""
        return _Access(acc.op, acc.scope, operation, how, (operation,))

    # ------------------------------------------------------------------ 1. can_access

    def global_resource(self) -> Resource | None:
        res = self.target.resolve("global", self.binding.root)
        if res is None:
            found = self.target.resources_for_class("global")
            res = found[0] if found else None
        return res

    def check_can_access(self) -> None:
        glob = self.global_resource()
        self.uses = engines.kernel_uses(self.kernel)
        for op in self.kernel.walk():
            if isinstance(op, (core.LoadOp, core.StoreOp)):
                started = time.perf_counter()
                operation = Operation.READ if isinstance(op, core.LoadOp) else Operation.WRITE
                scope = self.binding.context(op).scope
                subject = f"{op.SPEC.name} {value_name(op.view)}"
                if glob is None:
                    self.add("can_access", subject, REFUTED, f"target {self.target.name} has "
                             "no global-class resource to hold the view", None, op.loc, "S5",
                             started)
                    continue
                staged = staged_transfer(self.target, self.binding, op, self.bindings)
                if staged is not None:
                    self.staged_result(subject, staged, glob, operation, started)
                    continue
                alts = engines.view_load_alternatives(op, self.uses, self.target, scope) \
                    if isinstance(op, core.LoadOp) else (operation,)
                self.memory_access_result(subject, _Access(op, scope, operation, "", alts),
                                          glob, "", started)
            elif isinstance(op, core.CopyAsyncOp) and len(op.source) == 1 and glob is not None:
                started = time.perf_counter()
                operation = copy_operations(self.copies.get(id(op)))[0]
                subject = f"{op.SPEC.name} from {value_name(op.source[0])}"
                self.memory_access_result(subject, _Access(op, self.binding.context(op).scope,
                                                           operation, "", (operation,)),
                                          glob, "", started)
        for a in self.allocs:
            started = time.perf_counter()
            if a.candidate is None:
                cls = _class_name(a.op)
                have = sorted({r.resource_class for r in self.target.resources})
                if cls != AUTO and cls not in self.target.class_names:  # S6: not this catalog's
                    own = [c.name for c in self.target.classes]
                    builtin = list(dict.fromkeys(r.resource_class for r in self.target.resources
                                                 if r.resource_class not in own))
                    self.add("can_access", f"memory %{a.name}", REFUTED,
                             f"Memory %{a.name} (line {a.op.loc.line}) names resource class "
                             f"{cls!r}, which target {self.target.name}'s catalog does not "
                             f"define (its classes: built-in {', '.join(builtin) or 'none'}; "
                             f"catalog-defined {', '.join(own) or 'none'})", None, a.op.loc,
                             "S6", started)
                    continue
                self.add("can_access", f"memory %{a.name}", REFUTED,
                         f"target {self.target.name} has no resource of class {cls!r} "
                         f"for a Memory owned at {a.owner_scope!r} (classes with resources: "
                         f"{', '.join(have)}){_uses_text(a)}", None, a.op.loc, "S5", started)
                continue
            if a.resource is None:
                continue  # no home: the factorization result explains why (S17)
            for acc in a.accesses:
                started = time.perf_counter()
                subject = f"{acc.op.SPEC.name} %{a.name}"
                note = acc.note
                if note and not isinstance(acc.op, core.CopyAsyncOp):
                    in_place = self.target.can_access(acc.scope, a.resource.name,
                                                      Operation.MMA_READ) and not \
                        engines.refused_operands(acc.op, acc.scope, self.uses, self.target,
                                                 a.resource.name)
                    note += f"; mma_read is {'' if in_place else 'not '}allowed here"
                self.memory_access_result(subject, acc, a.resource, note, started,
                                          f"%{a.name}")

    def staged_result(self, subject: str, staged: StagedTransfer, glob: Resource,
                      operation: Operation, started: float) -> None:
        """A view access the scope cannot make, performed by a copy engine through a
        staging resource: both ends' ``copy_async`` access, then the units' own access."""
        t, scope, eng = self.target, staged.scope, staged.engine
        units = t.execution_members(scope)
        want = (Operation.READ, Operation.MMA_READ) if staged.direction == "load" \
            else (Operation.WRITE,)
        users = [f"{u} ({o})" for u in units for o in want
                 if t.can_access(u, staged.staging, o)]
        ends_ok = all(t.can_access(scope, r, Operation.COPY_ASYNC)
                      for r in (staged.source_resource, staged.destination))
        where = f"{subject} at {scope} → {glob.name} ({operation})"
        if not ends_ok:  # the loader refuses such an engine; kept as a refutation
            self.add("can_access", where, REFUTED,
                     f"copy engine {eng.name!r} stages {staged.source_resource} → "
                     f"{staged.destination} but {scope} may not copy_async both",
                     None, staged.op.loc, "S20", started)
            return
        self.add("can_access", f"{where} staged by {eng.name} via {staged.staging}", PROVED,
                 f"{scope} may not {operation} {glob.name}; staged: {eng.name} "
                 f"({eng.mode.value}) moves {staged.source_resource} → {staged.destination} "
                 f"(copy_async by {scope} on both), completed by {eng.wait}; "
                 f"{staged.staging} is accessed there by {', '.join(users)}",
                 None, staged.op.loc, "S20", started)

    def memory_access_result(self, subject: str, acc: _Access, res: Resource, note: str,
                             started: float, memory: str = "") -> None:
        """A Memory access, performed by the first alternative the target allows: the
        plain operation, else the engine's (an in-place mma or an asynchronous copy; an
        in-place mma_read only of the operands the catalog lets the mma read there)."""
        alts = acc.alternatives or (acc.operation,)
        chosen = next((o for o in alts if self.target.can_access(acc.scope, res.name, o)),
                      None)
        refused = engines.refused_operands(acc.op, acc.scope, self.uses, self.target,
                                           res.name) if chosen == Operation.MMA_READ else ()
        if refused:
            allowed = self.target.mma_operands(acc.scope, res.name)
            many = len(refused) > 1
            self.add("can_access", f"{subject} at {acc.scope} → {res.name} ({chosen})",
                     REFUTED, f"tile.mma operand{'s' if many else ''} {', '.join(refused)} "
                     f"read{'' if many else 's'} {memory or subject} in {res.name} in "
                     f"place: target {self.target.name} lets mma read only "
                     f"operand{'s' if len(allowed) > 1 else ''} {', '.join(allowed)} there "
                     f"(and {acc.scope} may not {acc.operation} it)",
                     None, acc.op.loc, "S20", started)
            return
        if chosen is None or chosen == acc.operation:
            tried = "" if len(alts) < 2 else (
                f"; no alternative either: {', '.join(str(o) for o in alts[1:])} "
                f"is not allowed for {acc.scope} on {res.name}")
            self.access_result(subject, acc.op, acc.scope, res, acc.operation,
                               note + ("" if chosen else tried), started)
            return
        how = {Operation.MMA_READ: "the mma reads it in place",
               Operation.MMA_WRITE: "the mma accumulates into it in place",
               Operation.COPY_ASYNC: "an asynchronous copy, completed by "
                                     f"{_completion(self.target, res, acc.scope)}"}[chosen]
        self.add("can_access", f"{subject} at {acc.scope} → {res.name} ({chosen})", PROVED,
                 f"{acc.scope} may not {acc.operation} {res.name} but may {chosen} it: "
                 f"{how}", None, acc.op.loc, "S20", started)

    def access_result(self, subject: str, op: Op, scope: str, res: Resource,
                      operation: Operation, note: str, started: float) -> None:
        subject = f"{subject} at {scope} → {res.name} ({operation})"
        if self.target.can_access(scope, res.name, operation):
            self.add("can_access", subject, PROVED, f"{scope} may {operation} {res.name}"
                     + note, None, op.loc, "S20", started)
            return
        allowed = sorted(str(o) for o in Operation
                         if self.target.can_access(scope, res.name, o))
        self.add("can_access", subject, REFUTED,
                 f"target {self.target.name} does not let {scope} {operation} {res.name} "
                 f"(allowed: {', '.join(allowed) or 'nothing'}){note}", None, op.loc, "S20",
                 started)

    # ------------------------------------------------------------------ 2. factorization

    def check_factorization(self, a: _Alloc) -> None:
        if a.candidate is None:
            return
        started = time.perf_counter()
        res, t = a.candidate, self.target
        subject = (f"memory %{a.name} (owner {a.op.owner} at {a.owner_scope}, "
                   f"{a.op.resource.value} → {res.name} per {res.instance_scope})")
        execs = list(dict.fromkeys([a.owner_scope, *(acc.scope for acc in a.accesses)]))
        witness = _instance_witness(t, a.owner_scope, res.instance_scope, execs, self.limit,
                                    self.ctx)
        rule = "S20" if a.resource is not None else "S17"
        if witness.status != PROVED:
            extra = "" if a.resource is not None else (
                f"; a Memory owned at {a.owner_scope!r} cannot have class "
                f"{a.op.resource.value!r} on {t.name}: it is rejected, never re-owned")
            self.add("factorization", subject, witness.status, witness.detail + extra,
                     witness.counterexample, a.op.loc, rule, started)
            return
        slicing = _slicing_witness(t, a.owner_scope, res, self.limit, self.ctx)
        a.slices = slicing.slices
        if slicing.status != PROVED or a.resource is None:
            detail = slicing.detail
            status = slicing.status
            if slicing.status == PROVED:  # resolve() declined although the equation holds
                status = REFUTED
                detail = (f"target.resolve offers no {a.op.resource.value!r} resource for "
                          f"owner scope {a.owner_scope!r} ({res.name} lives at "
                          f"{res.instance_scope!r}); {witness.detail}")
            self.add("factorization", subject, status, detail, slicing.counterexample,
                     a.op.loc, "S17", started)
            return
        self.add("factorization", subject, PROVED, f"{witness.detail}; {slicing.detail}",
                 None, a.op.loc, rule, started)

    # ------------------------------------------------------------------ 5. int64

    def check_int64_views(self) -> None:
        for op in self.kernel.walk():
            if isinstance(op, (core.LoadOp, core.StoreOp)):
                started = time.perf_counter()
                status, detail, cex = self.view_addressing(op)
                self.add("int64", f"{op.SPEC.name} {value_name(op.view)}", status, detail,
                         cex, op.loc, "S14", started)

    def view_addressing(self, op: core.LoadOp | core.StoreOp
                        ) -> tuple[str, str, dict[str, int] | None]:
        """Whether every byte offset ``op`` addresses fits int64 (S14), cached per view,
        window, offsets and region axes (all the answer depends on)."""
        window = tuple(op.shape) if isinstance(op, core.LoadOp) else op.tile.type
        ctx = self.binding.context(op)
        key = (op.view, window, tuple(op.offsets),
               tuple((ax.index.name, ax.extent) for ax in ctx.axes))
        found = self.addressing.get(key)
        if found is None:
            found = self.addressing[key] = self._view_addressing(op)
        status, detail, cex = found
        return status, detail, dict(cex) if cex is not None else None

    def _view_addressing(self, op: core.LoadOp | core.StoreOp
                         ) -> tuple[str, str, dict[str, int] | None]:
        vt = op.view.type
        assert isinstance(vt, ViewType)
        if isinstance(op, core.LoadOp):
            window = op.shape
        else:
            tt = op.tile.type
            assert isinstance(tt, TileType)
            window = tt.shape
        ctx = self.binding.context(op)
        item = vt.dtype.itemsize
        sp = self.space(ctx)
        if any(sp.is_concrete([e]) and sp.evaluate(e) <= 0 for e in window):
            return PROVED, "empty window: no address events (S14)", None
        if not sp.is_concrete(list(vt.shape)):
            # Unbound extents: z3 decides over the symbol bounds.  Where the bounds allow a
            # view too large to address, the access is still safe *if* the caller's storage
            # exists (every touched element lies inside the view: loads clip, stores drop),
            # which is an assumption, reported as one with the witness.
            status, detail, cex = self.window_addressing(op, vt, window, item, ctx)
            if status != REFUTED:
                return status, detail, cex
            return ASSUMED, (ASSUMPTIONS["view storage exists"] + " (every touched element lies "
                             "inside the view); not provable from the symbol bounds: "
                             + detail.replace(" (bind the extents or tighten symbol_bounds)",
                                              "")
                             + " (declare bounds, e.g. --bound, to prove it)"), cex
        quick = _extreme_witness(sp, vt.shape, op.offsets, window, item)
        if quick is not None:  # the obvious overflow, found without z3
            vals, elem, byte = quick
            cex = {**vals, **{f"x{i}": v for i, v in enumerate(elem)}, "byte_offset": byte}
            return REFUTED, _overflow_text(op, vt, elem, byte, vals), cex
        # Whole view next: every touched element lies in it (loads clip, stores drop).
        whole = mul(item, _minus_one(_product(vt.shape)))
        status, detail, _ = self.fits_int64(whole, [*vt.shape], "the view's last byte",
                                            self.space(ctx))
        if status == PROVED:
            return status, detail, None
        return self.window_addressing(op, vt, window, item, ctx)

    def window_addressing(self, op: core.LoadOp | core.StoreOp, vt: ViewType,
                          window: tuple[Expr, ...], item: int, ctx: OpContext
                          ) -> tuple[str, str, dict[str, int] | None]:
        sp = self.space(ctx)
        exts = [sp.to_z3(e) for e in vt.shape]
        offs = [sp.to_z3(e) for e in op.offsets]
        wins = [sp.to_z3(e) for e in window]
        us = [sp.int_var(f"w{i}") for i in range(len(exts))]
        xs = [o + u for o, u in zip(offs, us, strict=True)]
        addr = sp.int_val(0)
        for x, e in zip(xs, exts, strict=True):
            addr = addr * e + x
        s = sp.solver()
        s.add(*sp.constraints())
        for u, w, x, e in zip(us, wins, xs, exts, strict=True):
            s.add(u >= 0, u < w, x >= 0, x < e)
        s.add(addr * item > INT64_MAX)
        res = check(s, self.limit)
        if res == z3.unsat:
            return PROVED, ("z3: every element the window touches has a byte offset "
                            "≤ 2**63 - 1 for all symbol values within bounds"), None
        if res == z3.unknown:
            return UNKNOWN, f"z3 gave up ({s.reason_unknown()}) within {self.limit} ms", None
        m = s.model()
        vals = sp.model_values(m)
        elem = [m.eval(x, model_completion=True).as_long() for x in xs]
        byte = m.eval(addr * item, model_completion=True).as_long()
        cex = {**vals, **{f"x{i}": v for i, v in enumerate(elem)}, "byte_offset": byte}
        return REFUTED, _overflow_text(op, vt, elem, byte, vals), cex

    def fits_int64(self, nbytes: Expr, domain: list[Expr], what: str, sp: SymbolSpace
                   ) -> tuple[str, str, dict[str, int] | None]:
        """Whether ``nbytes`` (0 for an empty domain) is ≤ 2**63 - 1 for all symbol values."""
        if sp.is_concrete([nbytes, *domain]):
            if any(sp.evaluate(e) <= 0 for e in domain):
                return PROVED, "empty domain: no address events (S14)", None
            value = sp.evaluate(nbytes)
            if value <= INT64_MAX:
                return PROVED, f"{what} is at {value:,} ≤ 2**63 - 1", None
            return REFUTED, f"{what} is at {value:,} > 2**63 - 1", {"bytes": value}
        s = sp.solver()
        term = sp.to_z3(nbytes)
        s.add(*[sp.to_z3(e) > 0 for e in domain])
        s.add(*sp.constraints(), term > INT64_MAX)
        res = check(s, self.limit)
        if res == z3.unsat:
            return PROVED, (f"z3: {what} ≤ 2**63 - 1 for all symbol values within bounds"), None
        if res == z3.unknown:
            return UNKNOWN, f"z3 gave up ({s.reason_unknown()}) within {self.limit} ms", None
        m = s.model()
        vals = sp.model_values(m)
        value = m.eval(term, model_completion=True).as_long()
        return REFUTED, f"{what} is at {value:,} > 2**63 - 1{_when(vals)}", \
            {**vals, "bytes": value}

    def check_int64_memory(self, a: _Alloc) -> None:
        started = time.perf_counter()
        sp = self.space(self.binding.context(a.op))
        lay = a.op.layout
        err = z3_layout.undefined_error(lay, sp, f"memory %{a.name}", a.op.loc)
        if err is not None:  # S14: no proof about an undefined address map means anything
            raise err
        slices = a.slices if a.slices is not None else 1
        nbytes = self.storage_bytes_term(a, sp) * slices
        s = sp.solver()
        exts = [sp.to_z3(e) for e in lay.shape]
        s.add(*sp.constraints(), *[e > 0 for e in exts], nbytes > INT64_MAX)
        subject = f"memory %{a.name} {lay}"
        if sp.is_concrete(z3_layout.layout_exprs(lay)):
            value = z3.simplify(nbytes).as_long()
            status = PROVED if value <= INT64_MAX else REFUTED
            rel = "≤" if status == PROVED else ">"
            self.add("int64", subject, status, f"{_slices_text(slices)}{value:,} B of storage "
                     f"{rel} 2**63 - 1", None if status == PROVED else {"bytes": value},
                     a.op.loc, "S14", started)
            return
        res = check(s, self.limit)
        if res == z3.unsat:
            self.add("int64", subject, PROVED, "z3: its bytes fit signed 64-bit addressing "
                     "for all symbol values within bounds", None, a.op.loc, "S14", started)
        elif res == z3.unknown:
            self.add("int64", subject, UNKNOWN, f"z3 gave up ({s.reason_unknown()}) within "
                     f"{self.limit} ms", None, a.op.loc, "S14", started)
        else:
            m = s.model()
            vals = sp.model_values(m)
            value = m.eval(nbytes, model_completion=True).as_long()
            self.add("int64", subject, REFUTED, f"{_slices_text(slices)}{value:,} B of storage "
                     f"> 2**63 - 1{_when(vals)}", {**vals, "bytes": value}, a.op.loc, "S14",
                     started)

    def storage_bytes_term(self, a: _Alloc, sp: SymbolSpace) -> z3.ArithRef:
        """Layout storage × itemsize, rounded up to the resource's alignment."""
        raw = z3_layout.storage_term(a.op.layout, sp) * a.op.dtype.itemsize
        align = a.resource.alignment if a.resource is not None else 1
        return raw if align <= 1 else ((raw + (align - 1)) / align) * align

    # ------------------------------------------------------------------ 3. capacity

    def check_capacity(self) -> None:
        by_res: dict[str, list[_Alloc]] = {}
        for a in self.allocs:
            if a.resource is not None:
                by_res.setdefault(a.resource.name, []).append(a)
        extra: dict[str, list[tuple[str, Expr]]] = {}
        for name, res_name, nbytes in self.extra:
            self.target.resource(res_name)  # unknown names raise with the known ones
            extra.setdefault(res_name, []).append((name, as_expr(nbytes)))
        for res_name in dict.fromkeys([*by_res, *extra]):
            self.capacity_of(self.target.resource(res_name), by_res.get(res_name, []),
                             extra.get(res_name, []))

    def capacity_of(self, res: Resource, allocs: list[_Alloc],
                    extra: list[tuple[str, Expr]]) -> None:
        started = time.perf_counter()
        subject = f"{res.name} (per {res.instance_scope})"
        loc = allocs[0].op.loc if allocs else UNKNOWN_LOC
        notes = [(a.op.loc, f"memory %{a.name} is declared here") for a in allocs]
        if res.capacity is None:
            self.add("capacity", subject, PROVED, f"{res.name} has no capacity limit", None,
                     loc, "S17", started)
            return
        unsliced = [a for a in allocs if a.slices is None]
        if unsliced:
            self.add("capacity", subject, UNKNOWN, f"memory %{unsliced[0].name} is sliced "
                     f"over a scope with a dynamic extent and no max_extent: the number of "
                     f"slices per {res.instance_scope} is unbounded", None, loc, "S17", started)
            return
        sp = self.space()
        for a in allocs:
            for ax in self.binding.context(a.op).axes:
                sp.declare_index(ax.index.name, ax.extent)
        terms = {id(a): self.storage_bytes_term(a, sp) * a.slices for a in allocs}  # type: ignore[operator]
        extra_terms = [(n, sp.to_z3(e)) for n, e in extra]
        peak = self.peak_term(allocs, terms, sp)
        total = peak + z3.Sum([t for _, t in extra_terms] or [sp.int_val(0)])
        concrete = sp.is_concrete([e for _, e in extra] + [
            x for a in allocs for x in z3_layout.layout_exprs(a.op.layout)])
        if concrete:
            vals = {k: z3.simplify(v).as_long() for k, v in terms.items()}
            extra_vals = [(n, z3.simplify(t).as_long()) for n, t in extra_terms]
            self.capacity_message(res, subject, allocs, vals, extra_vals, None, loc, notes,
                                  started)
            return
        s = sp.solver()
        s.add(*sp.constraints(), total > res.capacity)
        result = check(s, self.limit)
        if result == z3.unknown:
            self.add("capacity", subject, UNKNOWN, f"z3 gave up ({s.reason_unknown()}) within "
                     f"{self.limit} ms", None, loc, "S17", started, notes)
            return
        if result == z3.unsat:
            self.add("capacity", subject, PROVED, f"z3: explicit Memory and temporaries fit "
                     f"{res.capacity:,} B per {res.instance_scope} for all symbol values within "
                     "bounds", None, loc, "S17", started, notes)
            return
        m = s.model()
        vals = {k: m.eval(v, model_completion=True).as_long() for k, v in terms.items()}
        extra_vals = [(n, m.eval(t, model_completion=True).as_long()) for n, t in extra_terms]
        self.capacity_message(res, subject, allocs, vals, extra_vals, sp.model_values(m), loc,
                              notes, started)

    def peak_term(self, allocs: list[_Alloc], terms: dict[int, z3.ArithRef],
                  sp: SymbolSpace) -> z3.ArithRef:
        """Σ own + max over child parallels, from the kernel root (siblings run in turn)."""
        own: dict[str, list[z3.ArithRef]] = {}
        for a in allocs:
            own.setdefault(a.op.owner, []).append(terms[id(a)])

        def peak(label: str) -> z3.ArithRef:
            total: z3.ArithRef = z3.Sum(own.get(label, []) or [sp.int_val(0)])
            kids = [peak(c) for c in self.children(label)]
            if kids:
                best = kids[0]
                for k in kids[1:]:
                    best = z3.If(k > best, k, best)
                total = total + best
            return total
        return peak("kernel")

    def children(self, label: str) -> list[str]:
        return [c for c, p in self.binding.parallel_parent.items() if p == label]

    def peak_chain(self, allocs: list[_Alloc], vals: dict[int, int]) -> list[_Alloc]:
        """The allocations on the heaviest root-to-leaf chain of owners."""
        own: dict[str, list[_Alloc]] = {}
        for a in allocs:
            own.setdefault(a.op.owner, []).append(a)

        def best(label: str) -> tuple[int, list[_Alloc]]:
            mine = own.get(label, [])
            total = sum(vals[id(a)] for a in mine)
            kids = [best(c) for c in self.children(label)]
            top = max(kids, key=lambda k: k[0], default=(0, []))
            return total + top[0], mine + top[1]
        return best("kernel")[1]

    def capacity_message(self, res: Resource, subject: str, allocs: list[_Alloc],
                         vals: dict[int, int], extra: list[tuple[str, int]],
                         symbols: dict[str, int] | None, loc: SourceLoc,
                         notes: list[tuple[SourceLoc, str]], started: float) -> None:
        chain = self.peak_chain(allocs, vals)
        parts = [(a.name, vals[id(a)], a.slices) for a in chain]
        parts += [(n, v, 1) for n, v in extra]
        total = sum(v for _, v, _ in parts)
        terms = " + ".join(f"{n} {s} × {_bytes(v // s)}" if s and s > 1 else f"{n} {_bytes(v)}"
                           for n, v, s in parts) or "nothing"
        fits = total <= (res.capacity or 0)
        rel = "≤" if fits else ">"
        eq = f"{terms} = {_bytes(total)}" if len(parts) > 1 else terms
        detail = (f"{eq} {rel} {res.name} capacity {_bytes(res.capacity or 0)} per "
                  f"{res.instance_scope}{_when(symbols or {})}")
        if len(allocs) > len(chain):
            detail += " (sibling parallel regions run one after the other: peak chain shown)"
        cex = None
        if not fits:
            cex = {**(symbols or {}), **{f"{n}_bytes": v for n, v, _ in parts},
                   "total_bytes": total, "capacity": res.capacity or 0}
        self.add("capacity", subject, PROVED if fits else REFUTED, detail, cex, loc, "S17",
                 started, notes)

    # ------------------------------------------------------------------ 4. layouts

    def check_layout(self, a: _Alloc) -> None:
        lay = a.op.layout
        ctx = self.binding.context(a.op)
        subject = f"memory %{a.name} {lay}"
        uses = len(a.accesses)
        for name, fn, rule in (("injectivity", z3_layout.prove_injective, "S13"),
                               ("bounds", z3_layout.prove_in_bounds, "S20")):
            started = time.perf_counter()
            verdict = fn(lay, self.space(ctx), self.limit)
            detail = verdict.detail
            if name == "bounds" and verdict.status == PROVED and uses:
                detail += f"; covers the {uses} whole-tile load/store access(es)"
            self.add(name, subject, verdict.status, detail, verdict.counterexample,
                     a.op.loc, rule, started)


# --------------------------------------------------------------------------- factorization


@dataclass(frozen=True)
class _Witness:
    status: str
    detail: str
    counterexample: dict[str, int] | None = None
    slices: int | None = 1


def _scope_order(target: Target) -> dict[str, int]:
    return {s.name: i for i, s in enumerate(target.scopes)}


def _coords(target: Target, tag: str, scopes: Iterable[str], ctx: z3.Context
            ) -> tuple[dict[str, z3.ArithRef], list[z3.BoolRef]]:
    """One integer coordinate per scope level, within the level's extent."""
    out: dict[str, z3.ArithRef] = {}
    facts: list[z3.BoolRef] = []
    for name in scopes:
        v = out[name] = z3.Int(f"{tag}.{name}", ctx)
        sc = target.scope(name)
        facts.append(v >= 0)
        bound = sc.extent if sc.extent is not None else sc.max_extent
        if bound is not None:
            facts.append(v < bound)
    return out, facts


def _fmt(values: Mapping[str, int], scopes: Sequence[str]) -> str:
    return "(" + ", ".join(f"{s} {values[s]}" for s in scopes) + ")"


def _instance_witness(target: Target, owner: str, inst_scope: str, execs: Sequence[str],
                      limit_ms: int, ctx: z3.Context) -> _Witness:
    """Search two events with equal owner projection but different resource instances."""
    order = _scope_order(target)
    owner_path = target.scope_path(owner)
    inst_path = target.scope_path(inst_scope)
    for i, e1 in enumerate(execs):
        for e2 in execs[i:]:
            names1 = sorted({*target.scope_path(e1), *inst_path, *owner_path},
                            key=lambda s: (target.scope_depth(s), order[s]))
            names2 = sorted({*target.scope_path(e2), *inst_path, *owner_path},
                            key=lambda s: (target.scope_depth(s), order[s]))
            c1, f1 = _coords(target, "e1", names1, ctx)
            c2, f2 = _coords(target, "e2", names2, ctx)
            s = z3.Solver(ctx=ctx)
            s.add(*f1, *f2)
            s.add(*[c1[p] == c2[p] for p in owner_path])
            s.add(z3.Or([c1[p] != c2[p] for p in inst_path]))
            res = check(s, limit_ms)
            if res == z3.unsat:
                continue
            if res == z3.unknown:
                return _Witness(UNKNOWN, f"z3 gave up ({s.reason_unknown()}) within "
                                f"{limit_ms} ms")
            m = s.model()
            v1 = {n: m.eval(c1[n], model_completion=True).as_long() for n in names1}
            v2 = {n: m.eval(c2[n], model_completion=True).as_long() for n in names2}
            cex = {**{f"e1.{n}": v for n, v in v1.items()},
                   **{f"e2.{n}": v for n, v in v2.items()}}
            detail = (f"events e1 = {_fmt(v1, names1)} executing at {e1} and "
                      f"e2 = {_fmt(v2, names2)} executing at {e2} have the same owner "
                      f"coordinate {_fmt(v1, owner_path)} but select different "
                      f"{inst_scope} instances {_fmt(v1, inst_path)} and "
                      f"{_fmt(v2, inst_path)}: descendants change the instance, so "
                      "ResourceTopology ∘ ExecBinding ≠ Instance_s ∘ π")
            return _Witness(REFUTED, detail, cex)
    return _Witness(PROVED, f"the resource instance (one per {inst_scope}) is a function of "
                    f"the owner coordinate at {owner} for events at {', '.join(execs)} (z3: "
                    "no two events with one owner projection select different instances)")


def _slicing_witness(target: Target, owner: str, res: Resource, limit_ms: int,
                     ctx: z3.Context) -> _Witness:
    """Two owner instances sharing one resource instance need ``res.slicing``."""
    inst = res.instance_scope
    if inst == owner or not target.is_ancestor_or_self(inst, owner):
        return _Witness(PROVED, f"one {res.name} instance per owner instance")
    owner_path = target.scope_path(owner)
    inst_path = target.scope_path(inst)
    p1, f1 = _coords(target, "p1", owner_path, ctx)
    p2, f2 = _coords(target, "p2", owner_path, ctx)
    s = z3.Solver(ctx=ctx)
    s.add(*f1, *f2, *[p1[n] == p2[n] for n in inst_path])
    s.add(z3.Or([p1[n] != p2[n] for n in owner_path]))
    result = check(s, limit_ms)
    below = owner_path[len(inst_path):]
    count: int | None = 1
    for name in below:
        sc = target.scope(name)
        bound = sc.extent if sc.extent is not None else sc.max_extent
        count = None if (bound is None or count is None) else count * bound
    if result == z3.unsat:
        return _Witness(PROVED, f"every level between {inst} and {owner} has extent 1: "
                        f"one owner instance per {res.name} instance")
    if result == z3.unknown:
        return _Witness(UNKNOWN, f"z3 gave up ({s.reason_unknown()}) within {limit_ms} ms")
    m = s.model()
    v1 = {n: m.eval(p1[n], model_completion=True).as_long() for n in owner_path}
    v2 = {n: m.eval(p2[n], model_completion=True).as_long() for n in owner_path}
    if res.slicing:
        many = f"{count:,}" if count is not None else "an unbounded number of"
        return _Witness(PROVED, f"{many} owner instances share one {res.name} instance "
                        f"(e.g. {_fmt(v1, owner_path)} and {_fmt(v2, owner_path)}); the "
                        "catalog allows slicing: base(p) = slot(p) × bytes", None, count)
    cex = {**{f"p1.{n}": v for n, v in v1.items()}, **{f"p2.{n}": v for n, v in v2.items()}}
    return _Witness(REFUTED, f"owner instances p1 = {_fmt(v1, owner_path)} and p2 = "
                    f"{_fmt(v2, owner_path)} at {owner} share the {res.name} instance "
                    f"{_fmt(v1, inst_path)} and {res.name} has no slicing plan (slicing: "
                    f"false): a Memory owned at {owner} cannot live in it; it is rejected, "
                    "never re-owned", cex, count)


# --------------------------------------------------------------------------- helpers


def _overflow_text(op: core.LoadOp | core.StoreOp, vt: ViewType, elem: list[int], byte: int,
                   vals: Mapping[str, int]) -> str:
    return (f"element {elem} of {value_name(op.view)} [{', '.join(map(str, vt.shape))}] is at "
            f"byte offset {byte:,} > 2**63 - 1{_when(vals)}: signed 64-bit byte addressing "
            "overflows (bind the extents or tighten symbol_bounds)")


def _extreme_witness(sp: SymbolSpace, shape: Sequence[Expr], offsets: Sequence[Expr],
                     window: Sequence[Expr], item: int
                     ) -> tuple[dict[str, int], list[int], int] | None:
    """Try the obvious overflow first: free extents at their upper bounds, region indices
    at their last or first value, the window's last element inside the view."""
    free = sp.free_symbols([*shape, *offsets, *window])
    indices = [n for n in sp.index_extent if n in free]
    env = dict(sp.bindings)
    for name in free - set(indices):
        env[name] = sp.bounds.get(name, sp.default_bounds)[1]
    for corner in range(1 << min(len(indices), 6)):
        trial = dict(env)
        try:
            for bit, name in enumerate(indices):
                extent = sp.substitute(sp.index_extent[name]).evaluate(trial)
                if extent <= 0:
                    raise ValueError(name)
                trial[name] = 0 if corner >> bit & 1 else extent - 1
            exts = [sp.substitute(e).evaluate(trial) for e in shape]
            offs = [sp.substitute(e).evaluate(trial) for e in offsets]
            wins = [sp.substitute(e).evaluate(trial) for e in window]
        except (ValueError, KeyError, ZeroDivisionError):
            continue
        elem = [min(e, o + w) - 1 for e, o, w in zip(exts, offs, wins, strict=True)]
        if any(x < max(o, 0) for x, o in zip(elem, offs, strict=True)):
            continue
        byte = 0
        for x, e in zip(elem, exts, strict=True):
            byte = byte * e + x
        byte *= item
        if byte > INT64_MAX:
            return {k: v for k, v in trial.items() if k not in sp.bindings}, elem, byte
    return None


def _product(exts: Sequence[Expr]) -> Expr:
    return mul(1, *exts)


def _minus_one(e: Expr) -> Expr:
    return e + (-1)


def _bytes(n: int) -> str:
    return f"{n:,} B"


def _slices_text(slices: int) -> str:
    return f"over {slices} slices, " if slices > 1 else ""


def _when(values: Mapping[str, int]) -> str:
    if not values:
        return ""
    return " when " + ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


__all__ = [
    "PROOF_NAMES",
    "ProofReport",
    "ProofResult",
    "prove_kernel",
]
