"""What a target is, as frozen data: execution scopes, resources, access and costs.

A target (S6) has two independent structures:

* **Scopes** form a tree of execution levels (CPU ``process → worker → lane``,
  Metal ``grid → threadgroup → simdgroup → thread``).  ``extent`` counts instances
  per parent instance.  The tree answers "is scope *a* an ancestor of *b*", which is
  what ownership (S5, S7) and the execution-to-memory equation (S20) need.  A scope
  may be an *execution unit* (``executes:`` lists op classes): inside a parallel bound
  to an ancestor, ops of those classes run on it (:meth:`Target.executing_scope`), e.g.
  npu-systolic's ``matrix_unit`` (mma) and ``vector_unit`` (elementwise, ...).
* **Resources** are physical storage, each owned by one scope (``instance_scope``:
  one instance of the resource per instance of that scope), with a class
  (``private``, ``shared``, ``cluster``, ``global``, ``tensor``, or a class the
  catalog itself declares), a capacity and cost figures.

The two are tied together by ``can_access(scope, resource, operation)``, which is
*data*, never derived from an order: tensor memory may be written by the block's
MMA engine but not read by its threads, a systolic array may read a scratchpad it
cannot write.  Classes are constraints, not a lattice (seed, "Memory ownership").

:meth:`Target.resolve` answers where a Memory owned at a scope with a resource
constraint would live: a resource of the class owned by the same scope, else by the
nearest ancestor whose resource may be sliced per descendant instance (S17: never
silently change the owner; Metal threadgroup memory cannot be sliced per thread).
For ``auto_``, resources that support plain ``read`` and ``write`` compete, nearest
owner first, then ``shared`` before ``private`` before ``cluster`` before custom
classes before ``global`` (so CPU worker memory lands in local storage, S17).

Every object remembers where it was written (``loc``); locations never take part
in equality.  Lookups by a name the target does not know raise
:class:`~planner.errors.PlannerError` with the known names.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from enum import Enum, StrEnum

from planner.errors import UNKNOWN_LOC, Diagnostic, PlannerError, SourceLoc


class Operation(StrEnum):
    """What an execution scope does to a resource; the fixed vocabulary of ``can_access``."""

    READ = "read"
    WRITE = "write"
    MMA_READ = "mma_read"  # read as a matrix-engine operand
    MMA_WRITE = "mma_write"  # written as a matrix-engine result / accumulator
    ATOMIC = "atomic"
    COPY_ASYNC = "copy_async"  # source or destination of an asynchronous copy engine


class MmaOperand(StrEnum):
    """An operand of ``tile.mma`` (``c + a @ b``), in the op's operand order; an access
    entry's ``mma_operands`` says which of them the mma may read in place (``mma_read``)."""

    A = "a"
    B = "b"
    C = "c"  # the accumulator (tile.mma's ``acc``; D in the vendors' manuals)


class Coherence(StrEnum):
    """When a write by one accessor becomes visible to the others (S21)."""

    COHERENT = "coherent"  # hardware keeps all accessors coherent (CPU caches)
    BARRIER = "barrier"  # visible to the members of a scope after one of its sync rules
    FENCE = "fence"  # needs a memory fence / release-acquire between instances
    ASYNC = "async"  # written by asynchronous engines: visible after an explicit wait
    NONE = "none"  # never shared: only the owning instance touches it


class CopyMode(StrEnum):
    """How a copy engine moves data (asynchronous copies, S9)."""

    ASYNC = "async"  # a hardware engine copies while the issuer computes; done at the wait
    PREFETCH = "prefetch"  # the issuer copies itself, its source prefetched ahead of use


class OpClass(StrEnum):
    """Kinds of tile op a scope may execute (a scope's ``executes:`` list in the catalog)."""

    ELEMENTWISE = "elementwise"  # unary/binary arithmetic, select, cast, full, iota, broadcast,
    # transpose, slice
    TRANSCENDENTAL = "transcendental"  # exp, log, tanh, sqrt, ... (the expensive unary ops)
    REDUCTION = "reduction"  # tile.reduce.*
    MMA = "mma"  # tile.mma
    MEMORY = "memory"  # memory.load / memory.store: a Memory snapshot and its store


class Backend(StrEnum):
    """Code generators that can run a plan for a target."""

    LLVM_CPU = "llvm-cpu"
    METAL = "metal"


#: Resource classes every catalog may use; a catalog adds others under ``classes:``.
BUILTIN_CLASSES: tuple[str, ...] = ("private", "shared", "cluster", "global", "tensor")
#: The resource constraint that leaves the class open (``mem::auto_``).
AUTO = "auto_"


def normalize_class(name: str | Enum | object) -> str:
    """The catalog spelling of a constraint: ``private_`` → ``private``, ``auto`` → ``auto_``.

    An enum member (such as the IR's ``ResourceClass.SHARED``) or any other object with a
    string ``value`` (the IR's ``ResourceConstraint``) stands for its value.  Only built-in
    spellings lose a trailing ``_``: a catalog's own class keeps its name.
    """
    if not isinstance(name, str):
        name = str(name.value)  # type: ignore[attr-defined]
    if name in (AUTO, "auto"):
        return AUTO
    bare = name.removesuffix("_")
    return bare if bare in BUILTIN_CLASSES else name


@dataclass(frozen=True, slots=True)
class Scope:
    """An execution level; ``extent`` instances per parent instance (None: dynamic)."""

    name: str
    parent: str | None
    extent: int | None
    max_extent: int | None = None
    description: str = ""
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)
    #: op classes whose ops, inside a parallel bound to an ancestor (or to this scope),
    #: run on this scope's instances (an execution unit); empty: none are delegated here
    executes: tuple[OpClass, ...] = ()


@dataclass(frozen=True, slots=True)
class BankGeometry:
    """``count`` banks of ``width`` bytes each (bank of byte address a: (a // width) % count)."""

    count: int
    width: int
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)


@dataclass(frozen=True, slots=True)
class SyncRule:
    """A barrier or wait (its spelling) that orders the members of ``scope``."""

    name: str
    scope: str
    cost: float
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)


@dataclass(frozen=True, slots=True)
class Resource:
    """A physical resource: one instance per instance of ``instance_scope``."""

    name: str
    resource_class: str
    instance_scope: str
    capacity: int | None  # bytes per instance; None: unbounded
    alignment: int
    coherence: Coherence
    operations: frozenset[Operation]
    slicing: bool  # may one instance be carved into per-descendant-instance slices?
    bandwidth: float  # bytes per cycle per instance
    latency: float  # cycles
    banks: BankGeometry | None = None
    sync: tuple[SyncRule, ...] = ()
    description: str = ""
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)

    def supports(self, op: Operation | str) -> bool:
        return Operation(op) in self.operations


@dataclass(frozen=True, slots=True)
class AccessRule:
    """Members of ``scope`` may apply ``operations`` to ``resource``; with ``mma_read``,
    the mma reads in place only the operands in ``mma_operands`` (default: every one)."""

    scope: str
    resource: str
    operations: frozenset[Operation]
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)
    mma_operands: frozenset[MmaOperand] = frozenset(MmaOperand)


@dataclass(frozen=True, slots=True)
class CopyEngine:
    """An engine members of ``scope`` use for ``memory.copy_async`` from a resource in
    ``sources`` into one in ``destinations``: ``bandwidth`` bytes per cycle per issuing
    instance, ``issue`` cycles of the issuer per copy, at most ``in_flight`` copies
    outstanding per issuer, completed by the wait spelled ``wait``."""

    name: str
    mode: CopyMode
    scope: str
    sources: tuple[str, ...]
    destinations: tuple[str, ...]
    bandwidth: float
    issue: float
    in_flight: int
    wait: str
    description: str = ""
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)

    def moves(self, scope: str, source: str, destination: str) -> bool:
        """Whether members of ``scope`` may copy ``source`` → ``destination`` with it."""
        return scope == self.scope and source in self.sources \
            and destination in self.destinations


@dataclass(frozen=True, slots=True)
class CostModel:
    """Throughput per instance of the default parallel scope, in ops (flops) per cycle."""

    clock_ghz: float
    concurrent_instances: int  # instances of the default parallel scope running at once
    cheap: float  # add/mul/max/... elements per cycle
    transcendental: float  # exp/log/tanh/sqrt elements per cycle
    mma: float  # flops per cycle
    barrier: float  # cycles per barrier of the default parallel scope
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)


@dataclass(frozen=True, slots=True)
class CpuIsa:
    """What the llvm-cpu backend compiles for: the plan's figures, never the host's.

    ``vector_width`` fp32 lanes per vector, ``llvm_cpu`` the LLVM CPU name and
    ``llvm_features`` every LLVM feature the code may use (a host lacking one refuses to
    run it).
    """

    vector_width: int
    llvm_cpu: str
    llvm_features: tuple[str, ...]
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)


@dataclass(frozen=True, slots=True)
class ResourceClassDecl:
    """A resource class a catalog defines beyond :data:`BUILTIN_CLASSES`."""

    name: str
    description: str = ""
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)


@dataclass(frozen=True, slots=True)
class Target:
    """A validated target catalog.  Build with :func:`planner.catalog.load_target_file`."""

    name: str
    description: str
    backend: Backend | None
    scopes: tuple[Scope, ...]
    default_parallel_scope: str
    resources: tuple[Resource, ...]
    access: tuple[AccessRule, ...]
    costs: CostModel
    classes: tuple[ResourceClassDecl, ...] = ()
    cpu: CpuIsa | None = None  # what llvm-cpu code is compiled for (its ``cpu:`` section)
    copy_engines: tuple[CopyEngine, ...] = ()  # engines for memory.copy_async, file order
    content_hash: str = ""  # sha256 of the file text
    source: str = field(default="<unknown>", compare=False)
    loc: SourceLoc = field(default=UNKNOWN_LOC, compare=False)
    _scopes: dict[str, Scope] = field(init=False, repr=False, compare=False)
    _resources: dict[str, Resource] = field(init=False, repr=False, compare=False)
    _access: frozenset[tuple[str, str, Operation]] = field(init=False, repr=False,
                                                           compare=False)
    _mma_operands: dict[tuple[str, str], frozenset[MmaOperand]] = field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_scopes", {s.name: s for s in self.scopes})
        object.__setattr__(self, "_resources", {r.name: r for r in self.resources})
        object.__setattr__(self, "_access", frozenset(
            (a.scope, a.resource, op) for a in self.access for op in a.operations))
        object.__setattr__(self, "_mma_operands", {
            (a.scope, a.resource): a.mma_operands for a in self.access})

    # -- lookups -------------------------------------------------------------------
    def scope(self, name: str) -> Scope:
        """The scope called ``name``."""
        found = self._scopes.get(name)
        if found is None:
            raise self._unknown("scope", name, self._scopes)
        return found

    def resource(self, name: str) -> Resource:
        """The resource called ``name``."""
        found = self._resources.get(name)
        if found is None:
            raise self._unknown("resource", name, self._resources)
        return found

    @property
    def class_names(self) -> tuple[str, ...]:
        """Every class a resource constraint may name on this target."""
        return BUILTIN_CLASSES + tuple(c.name for c in self.classes)

    def resources_for_class(self, cls: str | Enum) -> tuple[Resource, ...]:
        """Resources of class ``cls`` (``private_`` is accepted for ``private``), in file order."""
        cls = normalize_class(cls)
        return tuple(r for r in self.resources if r.resource_class == cls)

    # -- relations -----------------------------------------------------------------
    def can_access(self, scope: str, resource: str, op: Operation | str) -> bool:
        """Whether members of ``scope`` may apply ``op`` to ``resource`` (explicit data)."""
        self.scope(scope)
        self.resource(resource)
        return (scope, resource, Operation(op)) in self._access

    def mma_operand_allowed(self, scope: str, resource: str,
                            operand: MmaOperand | str) -> bool:
        """Whether the mma of ``scope`` may read ``operand`` in place from ``resource``:
        ``mma_read`` is allowed there and the entry's ``mma_operands`` list it."""
        if not self.can_access(scope, resource, Operation.MMA_READ):
            return False
        return MmaOperand(operand) in self._mma_operands[(scope, resource)]

    def mma_operands(self, scope: str, resource: str) -> tuple[MmaOperand, ...]:
        """The operands the mma of ``scope`` may read in place from ``resource``, in
        tile.mma's operand order (none without ``mma_read``)."""
        return tuple(o for o in MmaOperand if self.mma_operand_allowed(scope, resource, o))

    def copy_engines_for(self, scope: str, source: str, destination: str
                         ) -> tuple[CopyEngine, ...]:
        """The engines (file order) members of ``scope`` may use to copy ``source`` into
        ``destination``; none: such a copy runs synchronously (load, then store)."""
        return tuple(e for e in self.copy_engines if e.moves(scope, source, destination))

    def executing_scope(self, scope: str, op_class: OpClass | str | None) -> str:
        """The scope that executes an op of ``op_class`` inside a parallel bound to
        ``scope``: ``scope`` itself when its ``executes`` lists the class or when no scope
        of its subtree does (the catalog delegates nothing), else the nearest descendant
        (breadth first, file order) that lists it."""
        if op_class is None or not any(s.executes for s in self.scopes):
            return scope
        cls = OpClass(op_class)
        frontier = [self.scope(scope)]
        while frontier:
            for s in frontier:
                if cls in s.executes:
                    return s.name
            frontier = [c for s in frontier for c in self.children(s.name)]
        return scope

    def execution_members(self, scope: str) -> tuple[str, ...]:
        """``scope`` and the execution units (scopes with ``executes``) that run ops of a
        parallel bound to it: the scopes whose access rights its ops may use."""
        units = tuple(u for c in OpClass
                      if (u := self.executing_scope(scope, c)) != scope)
        return tuple(dict.fromkeys((scope, *units)))

    def is_ancestor_or_self(self, a: str, b: str) -> bool:
        """Whether scope ``a`` is ``b`` or one of its ancestors."""
        return self._distance(a, b) is not None

    def scope_depth(self, name: str) -> int:
        """Levels between ``name`` and the root scope (the root has depth 0)."""
        depth, parent = 0, self.scope(name).parent
        while parent is not None:
            depth, parent = depth + 1, self._scopes[parent].parent
        return depth

    def scope_path(self, name: str) -> tuple[str, ...]:
        """The scopes from the root down to ``name``."""
        path: list[str] = []
        current: str | None = name
        while current is not None:
            path.append(current)
            current = self.scope(current).parent
        return tuple(reversed(path))

    def children(self, name: str | None) -> tuple[Scope, ...]:
        """Scopes whose parent is ``name`` (``None``: the root)."""
        return tuple(s for s in self.scopes if s.parent == name)

    @property
    def root_scope(self) -> Scope:
        return self.children(None)[0]

    def homes(self, cls: str | Enum, owner_scope: str) -> tuple[Resource, ...]:
        """Resources an instance owned at ``owner_scope`` with constraint ``cls`` may live
        in (S17, S20): of that class (any read/write resource for ``auto_``), with an
        instance per owner instance or above it (above only with ``slicing``), nearest
        first, then in file order.  Choosing among an ``auto_`` Memory's homes is the
        planner's decision (``planner.realize`` adds the access relation); nothing here
        ranks classes."""
        cls = normalize_class(cls)
        self.scope(owner_scope)
        ranked: list[tuple[int, int, Resource]] = []
        for index, res in enumerate(self.resources):
            if cls == AUTO:
                if not {Operation.READ, Operation.WRITE} <= res.operations:
                    continue
            elif res.resource_class != cls:
                continue
            distance = self._distance(res.instance_scope, owner_scope)
            if distance is None or (distance > 0 and not res.slicing):
                continue
            ranked.append((distance, index, res))
        return tuple(r for _, _, r in sorted(ranked, key=lambda t: t[:2]))

    def resolve(self, cls: str | Enum, owner_scope: str) -> Resource | None:
        """The nearest home of an explicit class ``cls`` at ``owner_scope`` (see
        :meth:`homes`); None when the target has none (e.g. Metal group-owned private).
        ``auto_`` has no single answer here: the planner chooses among its homes."""
        if normalize_class(cls) == AUTO:
            raise PlannerError(Diagnostic(
                f"target {self.name}: an auto_ placement is chosen by the planner among "
                "Target.homes(auto_, scope), not resolved by the catalog", self.loc),
                kind="usage")
        found = self.homes(cls, owner_scope)
        return found[0] if found else None

    def _distance(self, ancestor: str, scope: str) -> int | None:
        """Levels from ``scope`` up to ``ancestor``; None when it is not an ancestor."""
        self.scope(ancestor)
        distance, current = 0, self.scope(scope).name
        while current != ancestor:
            parent = self._scopes[current].parent
            if parent is None:
                return None
            distance, current = distance + 1, parent
        return distance

    def _unknown(self, what: str, name: str, known: dict[str, object]) -> PlannerError:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        message = (f"target {self.name!r} has no {what} {name!r} "
                   f"({hint}known: {', '.join(known)})")
        return PlannerError(Diagnostic(message, self.loc), kind="catalog")
