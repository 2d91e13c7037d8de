"""What an asynchronous copy means physically (S9, issue 12): engine, versions, overlap.

``memory.copy_async`` copies a window of a view (or another Memory's state) into a
Memory; ``memory.wait`` makes that state readable.  This module is the one place that
decides, for each copy, how the target performs it.  The cost model, the proofs, the
plan and both backends read :func:`realize_copies`; none re-derives it.

- **Engine.** The catalog's ``copy_engines`` that members of the issuing scope may use to
  move the source resource into the destination's home; among several, the cheapest for
  this copy (issue cycles + bytes / bandwidth, file order on ties).  None: the copy is
  **synchronous** (a load of the window, then a store: the issuer copies and the wait
  is a no-op, or on a GPU-like target a barrier).
- **Mode.** ``async`` engines copy while the issuer computes; a ``prefetch`` engine
  (CPUs) copies on the issuer, the next copy's window prefetched ahead of use.
- **Overlap and versions.** An async copy overlaps compute only when its state is waited
  for in a later iteration (its token is carried by the loop) or in a later stage of a
  pipeline that runs overlapped; it then wants ``min(in_flight, window - 1) + 1`` versions
  of its destination (one being filled while the previous is read).  Every other copy
  wants one version, and its transfer is exposed (priced in full).
- **Accesses.** An async copy reaches its source and destination with ``copy_async``; a
  synchronous or prefetching copy with plain ``read`` and ``write``.

Approximation (documented): an overlapped transfer is assumed hidden behind the compute
of the iteration it overlaps (its cost is the issue cycles only).

**Staged view transfers.**  A ``tile.load`` / ``tile.store`` of a view whose issuing
scope may not ``read`` / ``write`` the global resource directly (npu-systolic: weight DRAM
is reached by DMA only) is a copy too (:class:`StagedTransfer`, :func:`staged_transfer`):
an engine of the issuing scope moves the tile between the global resource and a
*staging* resource that the scope's execution units may access (a load lands where its
readers ``read`` or ``mma_read`` it, a store leaves from where a unit may ``write`` it),
chosen by the same rule as a copy's engine (issue + bytes / bandwidth, file order on
ties; :func:`engine_cycles`).  A load's staging buffer is the loaded value's own
placement (the plan's choice, by default the first landing a unit can ``read`` plainly);
a store's is the stored value's placement when an engine moves it out from there, else
the default staging resource, which an execution unit fills from the value's placement.
A staged transfer is never overlapped: it is priced in full.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.catalog import CopyEngine, CopyMode, Operation, Resource, Target
from planner.ir import core
from planner.ir.core import Kernel, LoopKind, LoopOp
from planner.realize.binding import ExecutionBinding, memory_name

__all__ = ["CopyRealization", "StagedTransfer", "copy_operations", "engine_cycles",
           "realize_copies", "realize_transfers", "source_resource", "staged_transfer",
           "view_resource"]

SYNCHRONOUS = "synchronous"


@dataclass(frozen=True, slots=True)
class CopyRealization:
    """How one ``memory.copy_async`` runs on the target."""

    op: core.CopyAsyncOp
    memory: str  # destination Memory's name
    source: str  # "view A" or "memory %As"
    scope: str  # the issuing scope
    source_resource: str
    destination: str  # the destination Memory's home
    engine: CopyEngine | None
    nbytes: int | None  # one copy (None: symbolic)
    overlapped: bool  # waited in a later iteration / stage: the transfer hides
    versions: int  # destination versions the copy wants

    @property
    def mode(self) -> str:
        """``async``, ``prefetch`` or ``synchronous``."""
        return self.engine.mode.value if self.engine is not None else SYNCHRONOUS

    @property
    def wait(self) -> str:
        """What completes it: the engine's wait, else program order."""
        return self.engine.wait if self.engine is not None else "program order (synchronous)"

    def cycles(self) -> tuple[float, float]:
        """(issue, exposed transfer) cycles of one copy on its issuer.  A synchronous
        copy's transfer is priced by the caller as a load and a store (None here)."""
        if self.engine is None or self.nbytes is None:
            return 0.0, 0.0
        issue, transfer = engine_cycles(self.engine, self.nbytes)
        hidden = self.overlapped and self.engine.mode is CopyMode.ASYNC
        return issue, 0.0 if hidden else transfer

    def describe(self, versions: int | None = None) -> str:
        """One line for plans and explanations (``versions``: what the plan keeps, by
        default what the copy wants)."""
        versions = self.versions if versions is None else versions
        where = f"{self.source} ({self.source_resource}) → %{self.memory} ({self.destination})"
        if self.engine is None:
            return (f"{where}: synchronous load + store at {self.scope} (no copy engine of "
                    f"the target moves {self.source_resource} → {self.destination} there)")
        overlapped = self.overlapped and versions >= self.versions
        how = "overlapped with compute" if overlapped else "waited at once (exposed)"
        if self.engine.mode is CopyMode.PREFETCH:
            how = "copied by the issuer, the next window prefetched ahead of use"
        return (f"{where}: {self.engine.name} ({self.mode}) at {self.scope}, {how}, "
                f"{versions} version{'s' if versions != 1 else ''}, wait {self.wait}")


@dataclass(frozen=True, slots=True)
class StagedTransfer:
    """A view ``tile.load`` / ``tile.store`` staged through a scratchpad by a copy engine
    (module doc): ``engine`` moves ``nbytes`` from ``source_resource`` to ``destination``
    at ``scope``; ``staging`` is the scratchpad end (the destination of a load, the
    source of a store), ``filled_from`` the value's placement an execution unit copies
    into the staging buffer first (a store whose value lives elsewhere; else None)."""

    op: core.LoadOp | core.StoreOp
    view: str  # "A"
    scope: str  # the issuing scope
    source_resource: str
    destination: str
    engine: CopyEngine
    nbytes: int | None  # one tile (None: symbolic)
    filled_from: str | None = None
    landings: tuple[str, ...] = ()  # every staging resource an engine could use instead

    @property
    def direction(self) -> str:
        """``load`` or ``store``."""
        return "load" if isinstance(self.op, core.LoadOp) else "store"

    @property
    def staging(self) -> str:
        return self.destination if self.direction == "load" else self.source_resource

    @property
    def wait(self) -> str:
        return self.engine.wait

    def cycles(self) -> float:
        """Cycles of one transfer on its issuer: issue + bytes / bandwidth (exposed)."""
        issue, transfer = engine_cycles(self.engine, self.nbytes or 0)
        return issue + transfer

    def describe(self) -> str:
        """One line for plans and explanations."""
        fill = (f" (filled from {self.filled_from} first)" if self.filled_from else "")
        return (f"{self.op.SPEC.name} view {self.view}: {self.engine.name} "
                f"({self.engine.mode.value}) at {self.scope} moves {self.source_resource} → "
                f"{self.destination}, staged in {self.staging}{fill}, wait {self.wait}")


def engine_cycles(engine: CopyEngine, nbytes: int) -> tuple[float, float]:
    """(issue, transfer) cycles of one copy of ``nbytes`` by ``engine``: the one rule by
    which copies and staged transfers are priced and engines are ranked."""
    return engine.issue, nbytes / engine.bandwidth


def view_resource(target: Target, binding: ExecutionBinding) -> Resource | None:
    """The resource views live in: the global resource of the root scope (else the
    first global-class resource)."""
    res = target.resolve("global", binding.root)
    if res is None:
        found = target.resources_for_class("global")
        res = found[0] if found else None
    return res


def staged_transfer(target: Target, binding: ExecutionBinding, op: core.LoadOp | core.StoreOp,
                    env: Mapping[str, int], placement: str | None = None
                    ) -> StagedTransfer | None:
    """How a view load/store its scope cannot perform directly is staged (module doc);
    None when the scope may access the view's resource plainly, or no engine stages it
    (the access proof then refutes it).  ``placement``: the value's resource in a plan."""
    glob = view_resource(target, binding)
    scope = binding.context(op).scope
    load = isinstance(op, core.LoadOp)
    if glob is None or target.can_access(scope, glob.name,
                                         Operation.READ if load else Operation.WRITE):
        return None
    units = target.execution_members(scope)

    def usable(res: str, ops: tuple[Operation, ...]) -> bool:
        return any(target.can_access(u, res, o) for u in units for o in ops)

    tile = op.results[0] if load else op.tile
    nbytes = _tile_bytes(tile, env)
    ends = [r.name for r in target.resources if r.name != glob.name]
    if load:
        pairs = [(r, target.copy_engines_for(scope, glob.name, r)) for r in ends
                 if usable(r, (Operation.READ, Operation.MMA_READ))]
        plain = [p for p in pairs if p[1] and usable(p[0], (Operation.READ,))]
    else:
        pairs = [(r, target.copy_engines_for(scope, r, glob.name)) for r in ends
                 if usable(r, (Operation.WRITE,))]
        plain = [p for p in pairs if p[1]]
    pairs = [p for p in pairs if p[1]]
    chosen = next((p for p in pairs if p[0] == placement), None) or \
        (plain[0] if plain else None)
    if chosen is None:
        return None
    staging, engines = chosen
    engine = _cheapest(engines, nbytes)
    assert engine is not None
    filled = placement if not load and placement not in (None, staging) else None
    view = op.view.name_hint or "view"
    src, dst = (glob.name, staging) if load else (staging, glob.name)
    return StagedTransfer(op, view, scope, src, dst, engine, nbytes, filled,
                          tuple(p[0] for p in pairs))


def realize_transfers(kernel: Kernel, target: Target, binding: ExecutionBinding,
                      env: Mapping[str, int], placements: Mapping[int, str] | None = None
                      ) -> tuple[StagedTransfer, ...]:
    """Every staged view load/store of ``kernel`` in program order; ``placements`` maps
    ``id(op)`` to the resource of its value in a plan (default staging where absent)."""
    placements = placements or {}
    out = []
    for op in kernel.walk():
        if isinstance(op, (core.LoadOp, core.StoreOp)):
            staged = staged_transfer(target, binding, op, env, placements.get(id(op)))
            if staged is not None:
                out.append(staged)
    return tuple(out)


def _tile_bytes(tile: core.Value, env: Mapping[str, int]) -> int | None:
    try:
        n = 1
        for e in tile.type.shape:  # type: ignore[attr-defined]
            n *= int(e.evaluate(env))
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    return n * tile.type.dtype.itemsize  # type: ignore[attr-defined]


def source_resource(target: Target, binding: ExecutionBinding, op: core.CopyAsyncOp,
                    homes: Mapping[str, str]) -> Resource | None:
    """The resource a copy reads: a view's global resource or the source Memory's home."""
    if len(op.source) == 1:
        return view_resource(target, binding)
    mb = binding.memory(op.source[0])
    return mb.home_named(homes.get(mb.name))


def copy_operations(realization: CopyRealization | None) -> tuple[Operation, Operation]:
    """(source, destination) operations a copy applies: ``copy_async`` on an async
    engine, else a plain read and write."""
    if realization is not None and realization.mode == CopyMode.ASYNC.value:
        return Operation.COPY_ASYNC, Operation.COPY_ASYNC
    return Operation.READ, Operation.WRITE


def realize_copies(kernel: Kernel, target: Target, binding: ExecutionBinding,
                   env: Mapping[str, int], homes: Mapping[str, str] | None = None
                   ) -> tuple[CopyRealization, ...]:
    """Every copy of ``kernel`` in program order, with the Memory homes ``homes`` (a
    plan's choice by Memory name; the default home where absent)."""
    homes = homes or {}
    out: list[CopyRealization] = []
    for op, loop, yielded in _copies(kernel.body, None, frozenset()):
        mb = binding.memory(op.memory)
        dest = mb.home_named(homes.get(mb.name))
        src = source_resource(target, binding, op, homes)
        scope = binding.context(op).scope
        nbytes = _bytes(op, env)
        engine = None
        if dest is not None and src is not None:
            engine = _cheapest(target.copy_engines_for(scope, src.name, dest.name), nbytes)
        overlapped = engine is not None and engine.mode is CopyMode.ASYNC \
            and _overlaps(op, loop, yielded)
        window = loop.window if loop is not None and loop.kind is LoopKind.PIPELINE else 2
        versions = min(engine.in_flight, max(window, 2) - 1) + 1 \
            if overlapped and engine is not None else 1
        source = (f"view {op.source[0].name_hint or 'view'}" if len(op.source) == 1
                  else f"memory %{memory_name(binding.memory(op.source[0]).alloc)}")
        out.append(CopyRealization(op, mb.name, source, scope,
                                   src.name if src is not None else "?",
                                   dest.name if dest is not None else "?",
                                   engine, nbytes, overlapped, versions))
    return tuple(out)


def _copies(block: core.Block, loop: LoopOp | None, yielded: frozenset[int]):
    """(copy, innermost enclosing loop, ids of the values that loop's body yields)."""
    for op in block.ops:
        if isinstance(op, core.CopyAsyncOp):
            yield op, loop, yielded
        elif isinstance(op, LoopOp):
            term = op.body.ops[-1] if op.body.ops else None
            ids = frozenset(id(v) for v in term.values) \
                if isinstance(term, core.YieldOp) else frozenset()
            yield from _copies(op.body, op, ids)
        else:
            for b in op.region_blocks():
                yield from _copies(b, loop, yielded)


def _overlaps(op: core.CopyAsyncOp, loop: LoopOp | None, yielded: frozenset[int]) -> bool:
    """Waited in a later iteration (the token is carried) or in a later pipeline stage."""
    if loop is None:
        return False
    token = op.results[1]
    if id(token) in yielded:
        return True
    if loop.kind is not LoopKind.PIPELINE or loop.window < 2 or op.stage is None:
        return False
    waits = [o for o in loop.body.ops if isinstance(o, core.WaitOp) and o.token is token]
    return any(w.stage is not None and loop.stages.index(w.stage) > loop.stages.index(op.stage)
               for w in waits if w.stage in loop.stages and op.stage in loop.stages)


def _bytes(op: core.CopyAsyncOp, env: Mapping[str, int]) -> int | None:
    try:
        n = 1
        for e in op.shape:
            n *= int(e.evaluate(env))
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    state = op.results[0].type
    return n * state.dtype.itemsize  # type: ignore[attr-defined]


def _cheapest(engines: tuple[CopyEngine, ...], nbytes: int | None) -> CopyEngine | None:
    if not engines:
        return None
    size = nbytes or 0
    return min(engines, key=lambda e: sum(engine_cycles(e, size)))
