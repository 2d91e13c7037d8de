"""Execution binding: where every parallel region runs and who owns every Memory (S5, S7, S17, S20).

This is the one place that answers "which hardware scope does this parallel bind to",
"at which scope does this Memory's owner live" and "which catalog resources may hold it".
The proofs, the cost model, the loop program and both backends read the answer from
:func:`bind_execution`; none of them re-derives it.

The rule for a parallel region:

- an explicit scope must be a scope of the target and, when nested, strictly below the
  enclosing parallel's scope (a nested parallel refines its parent's instances);
- ``AUTOMATIC`` at the top level binds to the catalog's ``default_parallel_scope``;
- a nested ``AUTOMATIC`` binds to the first child scope of its parent's scope.  When the
  parent's scope has no child the binding is a problem (S20), never a silent re-use of the
  parent's scope.

An op's *executing scope* is its parallel's scope, unless the catalog delegates its op
class (:func:`op_class`) to an execution unit below it (a scope's ``executes:`` list,
:meth:`~planner.catalog.Target.executing_scope`): on ``npu-systolic`` a parallel bound to
``core`` runs its mma on the ``matrix_unit`` and its elementwise, transcendental,
reduction and Memory ops on the ``vector_unit``, while view loads and stores, copies and
waits stay on ``core`` (the issuer of its copy engines).  A target without ``executes``
runs every op on its parallel's scope.  ``OpContext.scope`` is that executing scope.

A Memory is owned by its nearest enclosing parallel (the kernel root as fallback, S5/S7).
Its *homes* are the catalog resources where an instance may live: of the requested class
(any read/write resource for ``auto_``), whose instance scope is the owner's scope or an
ancestor of it (an ancestor only with ``slicing``: S17, S20).  An ``auto_`` Memory's homes
are further restricted to resources that every scope touching it may access with the
operations it applies (the access relation is general, not a hierarchy).  For an explicit
class the access check is a proof obligation instead, so a refused access is reported
rather than silently moved.  Homes are ordered nearest first, then in catalog order.
The planner chooses among them; without a plan a Memory lives in the first home with room
for it alone (at the given symbol bindings), never by a fixed ranking of classes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from planner.catalog import AUTO, OpClass, Operation, Resource, Target, normalize_class
from planner.errors import PlannerError, SourceLoc
from planner.ir import core
from planner.ir.core import AllocOp, Axis, Kernel, LoopOp, Op, ParallelOp

ROOT_OWNER = "kernel"


@dataclass(frozen=True, slots=True)
class OpContext:
    """Where an op runs: its executing scope, enclosing parallels and region axes."""

    scope: str
    parallels: tuple[str, ...]  # labels, outermost first
    axes: tuple[Axis, ...]  # every enclosing region's axes, outermost first


@dataclass(frozen=True, slots=True)
class BindingProblem:
    """A parallel region that cannot be bound to the target (S20)."""

    subject: str
    detail: str
    loc: SourceLoc
    rule: str = "S20"


@dataclass(frozen=True, slots=True)
class MemoryAccess:
    """One explicit access of a Memory: which op, from which scope, with which operation."""

    op: Op
    scope: str
    operation: Operation
    feeds_mma: bool = False  # a snapshot read whose value is an mma operand


@dataclass(frozen=True, slots=True)
class MemoryBinding:
    """A Memory's owner, the scopes that touch it and the resources that may hold it."""

    alloc: AllocOp
    name: str
    owner: str  # parallel label or "kernel"
    owner_scope: str
    resource_class: str  # catalog spelling: "shared", "private", "auto_", or a custom class
    accesses: tuple[MemoryAccess, ...]
    homes: tuple[Resource, ...]  # legal placements, nearest first
    nbytes: int | None = None  # one version at the binding's symbol values (None: symbolic)
    # the homes every access may reach with its operation (for auto_: all homes): what the
    # planner chooses among; an unreachable explicit home is left to the proofs to refute
    reachable: tuple[Resource, ...] = ()

    @property
    def home(self) -> Resource | None:
        """The placement when no plan decides: the first legal home with room for it."""
        for res in self.homes:
            if res.capacity is None or self.nbytes is None or self.nbytes <= res.capacity:
                return res
        return self.homes[0] if self.homes else None

    def home_named(self, name: str | None) -> Resource | None:
        """The home called ``name`` (a plan's choice), or the default home for ``None``."""
        if name is None:
            return self.home
        return next((r for r in self.homes if r.name == name), None)

    @property
    def scopes(self) -> tuple[str, ...]:
        """The owner's scope, then every scope that accesses the Memory, without repeats."""
        return tuple(dict.fromkeys([self.owner_scope, *(a.scope for a in self.accesses)]))


@dataclass
class ExecutionBinding:
    """The scope every parallel binds to, every op's context and every Memory's owner."""

    target: Target
    root: str
    parallel_scope: dict[str, str] = field(default_factory=dict)
    parallel_parent: dict[str, str] = field(default_factory=dict)  # label -> label|"kernel"
    contexts: dict[int, OpContext] = field(default_factory=dict)
    problems: list[BindingProblem] = field(default_factory=list)
    memories: dict[int, MemoryBinding] = field(default_factory=dict)  # id(memory value)

    def context(self, op: Op) -> OpContext:
        return self.contexts[id(op)]

    def scope_of(self, owner: str) -> str:
        """The scope of a parallel label (or of the kernel root)."""
        return self.parallel_scope.get(owner, self.root)

    def owner_scope(self, alloc: AllocOp) -> str:
        return self.scope_of(alloc.owner)

    def memory(self, alloc_or_memory: AllocOp | core.Value) -> MemoryBinding:
        key = alloc_or_memory.memory if isinstance(alloc_or_memory, AllocOp) \
            else alloc_or_memory
        return self.memories[id(key)]

    def memory_bindings(self) -> Iterator[MemoryBinding]:
        return iter(self.memories.values())


def bind_execution(kernel: Kernel, target: Target,
                   bindings: Mapping[str, int] | None = None) -> ExecutionBinding:
    """Bind every parallel region to a target scope, record each op's context and
    each Memory's owner, accesses and legal homes (sized at ``bindings``)."""
    binding = ExecutionBinding(target, target.root_scope.name)
    _bind_block(kernel.body, OpContext(binding.root, (), ()), target, binding)
    _bind_memories(kernel, target, binding, dict(bindings or {}))
    return binding


def memory_name(alloc: AllocOp) -> str:
    """The name a Memory is reported by: its variable name, else its line."""
    return alloc.memory.name_hint or f"memory@{alloc.loc.line}"


# --------------------------------------------------------------------------- parallels


_ELEMENTWISE_OPS = (core.BinaryOp, core.SelectOp, core.CastOp, core.FullOp, core.IotaOp,
                    core.BroadcastOp, core.TransposeOp, core.SliceOp)


def op_class(op: Op) -> OpClass | None:
    """The class of ``op`` a catalog's ``executes:`` may delegate; None for what the
    parallel's scope itself issues (view loads/stores, copies, waits, regions)."""
    if isinstance(op, core.UnaryOp):
        return OpClass.TRANSCENDENTAL if op.fn.expensive else OpClass.ELEMENTWISE
    if isinstance(op, _ELEMENTWISE_OPS):
        return OpClass.ELEMENTWISE
    if isinstance(op, core.ReduceOp):
        return OpClass.REDUCTION
    if isinstance(op, core.MmaOp):
        return OpClass.MMA
    if isinstance(op, (core.MemLoadOp, core.MemStoreOp)):
        return OpClass.MEMORY
    return None


def _bind_block(block: core.Block, ctx: OpContext, target: Target,
                binding: ExecutionBinding) -> None:
    for op in block.ops:
        cls = op_class(op)
        binding.contexts[id(op)] = ctx if cls is None else OpContext(
            target.executing_scope(ctx.scope, cls), ctx.parallels, ctx.axes)
        if isinstance(op, ParallelOp):
            scope = _bind_parallel(op, ctx, target, binding)
            binding.parallel_scope[op.label] = scope
            binding.parallel_parent[op.label] = ctx.parallels[-1] if ctx.parallels \
                else ROOT_OWNER
            inner = OpContext(scope, (*ctx.parallels, op.label), (*ctx.axes, *op.axes))
            _bind_block(op.body, inner, target, binding)
        elif isinstance(op, LoopOp):
            _bind_block(op.body, OpContext(ctx.scope, ctx.parallels, (*ctx.axes, *op.axes)),
                        target, binding)


def _bind_parallel(op: ParallelOp, ctx: OpContext, target: Target,
                   binding: ExecutionBinding) -> str:
    nested = bool(ctx.parallels)
    below = target.children(ctx.scope) if nested else ()
    automatic = (below[0].name if below else ctx.scope) if nested \
        else target.default_parallel_scope
    subject = f"parallel {op.label}"

    def problem(detail: str) -> None:
        binding.problems.append(BindingProblem(subject, detail, op.loc))

    if op.scope == "AUTOMATIC":
        if nested and not below:
            problem(f"nested AUTOMATIC parallel inside a region bound to {ctx.scope!r}: "
                    f"target {target.name} has no scope below {ctx.scope!r}")
        return automatic
    known = [s.name for s in target.scopes]
    if op.scope not in known:
        problem(f"scope {op.scope!r} is not a scope of target {target.name} "
                f"(scopes: {', '.join(known)})")
        return automatic
    if nested and (op.scope == ctx.scope or not target.is_ancestor_or_self(ctx.scope,
                                                                            op.scope)):
        problem(f"bound to {op.scope!r}, which is not below the enclosing parallel's scope "
                f"{ctx.scope!r}: a nested parallel must refine its parent's instances")
    return op.scope


# --------------------------------------------------------------------------- memories


def _bind_memories(kernel: Kernel, target: Target, binding: ExecutionBinding,
                   env: Mapping[str, int]) -> None:
    feeds_mma = {id(v) for op in kernel.walk() if isinstance(op, core.MmaOp)
                 for v in (op.a, op.b)}
    allocs: dict[int, AllocOp] = {}
    accesses: dict[int, list[MemoryAccess]] = {}
    for op in kernel.walk():
        if isinstance(op, AllocOp):
            allocs[id(op.memory)] = op
            accesses[id(op.memory)] = []
        elif isinstance(op, (core.MemStoreOp, core.MemLoadOp)) and id(op.memory) in allocs:
            scope = binding.context(op).scope
            if isinstance(op, core.MemStoreOp):
                accesses[id(op.memory)].append(MemoryAccess(op, scope, Operation.WRITE))
            else:
                accesses[id(op.memory)].append(MemoryAccess(
                    op, scope, Operation.READ, id(op.result) in feeds_mma))
        elif isinstance(op, core.CopyAsyncOp) and id(op.memory) in allocs:
            # plain operations; an async engine's copy_async is the realization's choice
            # (planner.realize.copies), checked by the proofs
            scope = binding.context(op).scope
            accesses[id(op.memory)].append(MemoryAccess(op, scope, Operation.WRITE))
            if len(op.source) == 2 and id(op.source[0]) in allocs:
                accesses[id(op.source[0])].append(MemoryAccess(op, scope, Operation.READ))
    for key, alloc in allocs.items():
        owner_scope = binding.owner_scope(alloc)
        cls = normalize_class(alloc.resource)
        accs = tuple(accesses[key])
        homes = memory_homes(target, cls, owner_scope, accs)
        reachable = tuple(r for r in homes if _reachable(target, r, accs))
        binding.memories[key] = MemoryBinding(alloc, memory_name(alloc), alloc.owner,
                                              owner_scope, cls, accs, homes,
                                              _storage_bytes(alloc, env), reachable)


def memory_homes(target: Target, cls: str, owner_scope: str,
                 accesses: tuple[MemoryAccess, ...] = ()) -> tuple[Resource, ...]:
    """Resources that may hold an instance owned at ``owner_scope`` (see the module doc):
    the catalog's homes (:meth:`~planner.catalog.Target.homes`), for ``auto_`` only those
    every access may reach."""
    homes = target.homes(cls, owner_scope)
    if cls != AUTO:
        return homes
    return tuple(r for r in homes if _reachable(target, r, accesses))


def _reachable(target: Target, res: Resource, accesses: tuple[MemoryAccess, ...]) -> bool:
    return all(target.can_access(a.scope, res.name, a.operation) for a in accesses)


def _storage_bytes(alloc: AllocOp, env: Mapping[str, int]) -> int | None:
    try:
        return alloc.layout.storage_elements(env) * alloc.dtype.itemsize
    except (KeyError, ValueError, ZeroDivisionError, PlannerError):  # unknown (S14 later)
        return None
