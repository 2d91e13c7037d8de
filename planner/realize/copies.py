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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.catalog import CopyEngine, CopyMode, Operation, Resource, Target
from planner.ir import core
from planner.ir.core import Kernel, LoopKind, LoopOp
from planner.realize.binding import ExecutionBinding, memory_name

__all__ = ["CopyRealization", "copy_operations", "realize_copies", "source_resource"]

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
        transfer = self.nbytes / self.engine.bandwidth
        hidden = self.overlapped and self.engine.mode is CopyMode.ASYNC
        return self.engine.issue, 0.0 if hidden else transfer

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


def source_resource(target: Target, binding: ExecutionBinding, op: core.CopyAsyncOp,
                    homes: Mapping[str, str]) -> Resource | None:
    """The resource a copy reads: a view's global resource or the source Memory's home."""
    if len(op.source) == 1:
        res = target.resolve("global", binding.root)
        if res is None:
            found = target.resources_for_class("global")
            res = found[0] if found else None
        return res
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
    return min(engines, key=lambda e: e.issue + size / e.bandwidth)
