"""Which software-pipeline cuts are safe (S18), from the kernel alone.

A pipeline loop overlaps its stages only when its stage cut is safe; otherwise it runs
in order and the answer says why.  A cut is unsafe when a stage uses a value of a later
stage, a view is stored before the last stage, a carried value is used in several stages
(a recurrence across the cut), explicit Memory is read in a state from an earlier
iteration or from outside the loop, or is stored in several stages (a recurrence through
outer Memory stays ordered unless a legal cut is proved), or is written in windows (by
the instances of a child parallel, S16) and read in a later stage: a partially written
Memory keeps one version, and the parallel's join is the state its loads read.  This
depends only on the kernel, so the cost model (how many versions a Memory or value may
want) and the loop program (the schedule it builds) ask :func:`pipeline_schedule` the
same question.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.ir import core
from planner.ir.core import Block, Kernel, LoopKind, LoopOp, Op, Value
from planner.ir.types import StateType

__all__ = ["KernelIndex", "PipeInfo", "PipelineCuts", "pipeline_schedule"]

#: Ops whose result is a Memory's next state: its writers, and a child parallel joining
#: the windows its instances wrote (S16, range-aware MemorySSA).
_STATE_PRODUCERS: tuple[type[Op], ...] = (*core.MEMORY_WRITE_OPS, core.ParallelOp)


@dataclass
class PipeInfo:
    """A legal software-pipeline schedule: each body op's stage and each stage's lag."""

    stage_of: dict[Op, int]
    lags: tuple[int, ...]


class KernelIndex:
    """A kernel's uses and parents, and the names values are reported by."""

    def __init__(self, kernel: Kernel, name: Callable[[Value], str]) -> None:
        self.name = name
        self.uses: dict[Value, list[tuple[Op, int]]] = {}
        self.parent_op: dict[Op, Op | None] = {}
        self._index(kernel.body, None)

    def _index(self, block: Block, parent: Op | None) -> None:
        for op in block.ops:
            self.parent_op[op] = parent
            for i, v in enumerate(op.operands()):
                self.uses.setdefault(v, []).append((op, i))
            for b in op.region_blocks():
                self._index(b, op)

    def producer(self, v: Value) -> Op | None:
        return v.owner if isinstance(v.owner, Op) else None


def pipeline_schedule(op: LoopOp, index: KernelIndex) -> PipeInfo | str:
    """The full-overlap schedule of ``op`` when its stage cut is safe, else why it runs
    in order (empty for a loop that is no pipeline).  ``index`` may be any object with
    the attributes of :class:`KernelIndex` (the loop program's planned uses are one)."""
    return PipelineCuts(index).analyze(op)


class PipelineCuts:
    """The cut analysis over one kernel index."""

    def __init__(self, index: KernelIndex) -> None:
        self.index = index

    def analyze(self, op: LoopOp) -> PipeInfo | str:
        """The schedule of ``op`` when its stage cut is safe, else why it runs in order
        (empty for a loop that is no pipeline)."""
        if op.kind is not LoopKind.PIPELINE:
            return ""
        if len(op.stages) < 2:
            return "no stages to overlap"
        if op.window < 2:
            return "window 1"
        body = [o for o in op.body.ops if not isinstance(o, core.YieldOp)]
        stage_of: dict[Op, int] = {}
        cur = 0
        for o in body:
            if o.stage in op.stages:
                cur = op.stages.index(o.stage)
            stage_of[o] = cur
            for inner in (x for b in o.region_blocks() for x in b.walk()):
                stage_of[inner] = cur
        defined = {r: o for o in body for r in o.results}
        for o in body:
            for used in self._used_values(o):
                d = defined.get(used)
                if d is not None and stage_of[d] > stage_of[o]:
                    return (f"{o.SPEC.name} in stage {op.stages[stage_of[o]]} uses a value "
                            f"of the later stage {op.stages[stage_of[d]]}")
        last = len(op.stages) - 1
        for o in body:
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if isinstance(x, core.StoreOp) and stage_of[o] != last:
                    return f"a view is stored in stage {op.stages[stage_of[o]]} (not the last)"
        term = op.body.ops[-1] if op.body.ops else None
        yields = term.values if isinstance(term, core.YieldOp) else ()
        for i, arg in enumerate(op.body.args):
            users = {stage_of[self._top(u, op)] for u, _ in self.index.uses.get(arg, [])
                     if not isinstance(u, core.YieldOp)}
            if isinstance(arg.type, StateType):
                reason = self._state_carry_problem(op, i, arg, stage_of)
                if reason:
                    return reason
                continue
            y = yields[i] if i < len(yields) else None
            p = defined.get(y) if y is not None else None
            if p is not None:
                users.add(stage_of[p])
            if len(users) > 1:
                return (f"carried value {self.index.name(arg)} is used in stages "
                        f"{', '.join(op.stages[s] for s in sorted(users))} (a recurrence "
                        "across the cut)")
        for o in body:
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if isinstance(x, core.MemLoadOp):
                    src = self.index.producer(x.state)
                    if src is None or not isinstance(src, _STATE_PRODUCERS) \
                            or self._top_or_none(src, op) is None:
                        return (f"Memory {self.index.name(x.memory)} is read in a state from an "
                                "earlier iteration or from outside the loop (a recurrence "
                                "through outer Memory)")
        stores: dict[Value, set[int]] = {}
        for o in body:
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if isinstance(x, core.MEMORY_WRITE_OPS):
                    stores.setdefault(x.memory, set()).add(stage_of[o])
        for memv, st in stores.items():
            if len(st) > 1:
                return f"Memory {self.index.name(memv)} is stored in several stages"
        reason = self._window_problem(body, stage_of, op)
        if reason:
            return reason
        lags = tuple(min(s, op.window - 1) for s in range(len(op.stages)))
        return PipeInfo(stage_of, lags)

    def _window_problem(self, body: list[Op], stage_of: dict[Op, int], op: LoopOp) -> str:
        """A Memory written in windows (S16) refines one buffer: its versions cannot
        rotate (a fresh version would hold only this iteration's windows), so it may not
        be read in a later stage than the one that writes it."""
        written: dict[Value, int] = {}
        read: dict[Value, set[int]] = {}
        for o in body:
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if isinstance(x, core.MemStoreOp) and x.windowed:
                    written[x.memory] = stage_of[o]
                elif isinstance(x, core.MemLoadOp):
                    read.setdefault(x.memory, set()).add(stage_of[o])
        for memv, st in written.items():
            later = sorted(s for s in read.get(memv, ()) if s != st)
            if later:
                return (f"Memory {self.index.name(memv)} is written in windows in stage "
                        f"{op.stages[st]} and read in stage {op.stages[later[0]]}: a "
                        "partially written Memory keeps one version (S16), so the stages "
                        "cannot overlap")
        return ""

    def _state_carry_problem(self, op: LoopOp, i: int, arg: Value,
                             stage_of: dict[Op, int]) -> str:
        for u, _ in self.index.uses.get(arg, []):
            if isinstance(u, core.MemLoadOp):
                return (f"Memory {self.index.name(u.memory)} is read in the state carried "
                        "from the previous iteration (a recurrence through outer Memory)")
        if self.index.uses.get(op.results[i]):
            return (f"the final state of Memory carried as {self.index.name(arg)} is used "
                    "after the loop")
        return ""

    def _top(self, op: Op, loop: LoopOp) -> Op:
        top = self._top_or_none(op, loop)
        assert top is not None
        return top

    def _top_or_none(self, op: Op, loop: LoopOp) -> Op | None:
        """The op of ``loop``'s body that is or contains ``op``."""
        cur: Op | None = op
        while cur is not None and self.index.parent_op.get(cur) is not loop:
            cur = self.index.parent_op.get(cur)
        return cur

    def _used_values(self, op: Op) -> list[Value]:
        vals = list(op.operands())
        for b in op.region_blocks():
            for x in b.walk():
                vals.extend(x.operands())
        return vals

