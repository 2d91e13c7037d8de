"""Software-pipeline schedule analysis (S18).

Whether a pipeline loop's stage cut is safe (else why it stays ordered), each stage's lag
(``min(s, window - 1)``, lowered until the versions the plan keeps suffice), and the
stages in which a value's buffer is read or its expression evaluated, from which the
builder gives buffers their iteration-local versions.
"""

from __future__ import annotations

from planner.ir import core
from planner.ir.core import LoopOp, Op, Value
from planner.ir.types import TileType
from planner.lower.loops.uses import INLINABLE, STORING, PlannedUses
from planner.realize.pipeline import PipeInfo, pipeline_schedule

__all__ = ["PipeInfo", "PipelineAnalysis"]


class PipelineAnalysis:
    """The schedule questions about the pipeline loops of one kernel under its plan."""

    def __init__(self, planned: PlannedUses) -> None:
        self.planned = planned
        self._stages: dict[tuple[str, LoopOp, Value], set[int]] = {}

    def analyze(self, op: LoopOp) -> PipeInfo | str:
        """The schedule of ``op`` when its stage cut is safe, else why it runs in order
        (the kernel-level rule of :func:`planner.realize.pipeline.pipeline_schedule`)."""
        return pipeline_schedule(op, self.planned)

    def fit_to_plan(self, op: LoopOp, info: PipeInfo) -> PipeInfo | str:
        """Lower stage lags until the versions the plan keeps of every buffer suffice.

        The plan may keep fewer versions than the full overlap wants (it prices the
        exposed latency as stalls and counts only those versions against capacity); the
        stages then overlap less, and not at all when every lag drops to zero (the loop
        runs in order)."""
        if self.planned.plan is None:
            return info
        needs: list[tuple[int, set[int], int, str]] = []  # writer, readers, versions, what
        for o in (o for o in op.body.ops if not isinstance(o, core.YieldOp)):
            w = info.stage_of[o]
            for v in o.results:
                if not isinstance(v.type, TileType) or not self.planned.buffered(v):
                    continue
                planned = [e.versions for c, i in self.planned.uses.get(v, [])
                           if (e := self.planned.edge(v, c, i)) is not None
                           and e.decision in STORING]
                if planned:
                    needs.append((w, self.buffer_read_stages(v, op, info), max(planned),
                                  "%" + self.planned.name(v)))
            for x in [o, *(y for b in o.region_blocks() for y in b.walk())]:
                if not isinstance(x, core.MEMORY_WRITE_OPS):
                    continue
                alloc = self.planned.producer(x.memory)
                mp = self.planned.memory_plan(alloc) if isinstance(alloc, core.AllocOp) else None
                if mp is None:
                    continue
                reads: set[int] = set()
                for r, _ in self.planned.uses.get(x.results[0], []):
                    if isinstance(r, core.MemLoadOp):
                        reads |= self.eval_stages(r.result, op, info)
                needs.append((w, reads, mp.versions, mp.name))
        lags = list(info.lags)
        short: list[str] = []
        changed = True
        while changed:
            changed = False
            for w, reads, k, what in needs:
                for r in sorted(reads):
                    if lags[r] - lags[w] > k - 1:
                        lags[r] = lags[w] + k - 1
                        for earlier in range(r):  # lags never decrease along the stages
                            lags[earlier] = min(lags[earlier], lags[r])
                        short.append(what)
                        changed = True
        if tuple(lags) == info.lags:
            return info
        if not any(lags):
            return (f"the plan keeps fewer versions of {', '.join(dict.fromkeys(short))} "
                    "than overlapping its stages needs")
        return PipeInfo(info.stage_of, tuple(lags))

    def _top_or_none(self, op: Op, loop: LoopOp) -> Op | None:
        """The op of ``loop``'s body that is or contains ``op``."""
        cur: Op | None = op
        while cur is not None and self.planned.parent_op.get(cur) is not loop:
            cur = self.planned.parent_op.get(cur)
        return cur

    def _stage_of_use(self, v: Value, c: Op, loop: LoopOp, info: PipeInfo) -> int | None:
        """The stage evaluating consumer ``c`` of ``v`` (None outside the loop)."""
        top = self._top_or_none(c, loop)
        if top is None:
            return None
        if isinstance(c, core.YieldOp):  # the carry copy runs in its producer's stage
            p = self.planned.producer(v)
            return info.stage_of.get(p, len(info.lags) - 1) if p is not None \
                else len(info.lags) - 1
        return info.stage_of[top]

    # Where expressions are evaluated, per stage.  Each use of ``w`` by consumer ``c``
    # runs where ``c``'s statements run, in ``c``'s mode: *decided* (``c`` computed at home
    # or inlined into a fused consumer) or *re-derived* (``c`` is in a recomputed chain).
    # A decided ``c`` reads ``w``'s buffer, inlines it (fused) or re-derives it (a
    # recomputed edge); a re-derived ``c`` re-derives ``w`` too when ``w`` is rederivable,
    # else reads it as its edge decided.

    def buffer_read_stages(self, v: Value, loop: LoopOp, info: PipeInfo) -> set[int]:
        """Stages in which ``v``'s buffer is read (through inlined consumers)."""
        return self._stages_of("buffer", v, loop, info)

    def eval_stages(self, w: Value, loop: LoopOp, info: PipeInfo) -> set[int]:
        """Stages where ``w``'s defining expression is evaluated (decided or re-derived)."""
        return (self._stages_of("decided", w, loop, info)
                | self._stages_of("rederived", w, loop, info))

    def _stages_of(self, what: str, w: Value, loop: LoopOp, info: PipeInfo) -> set[int]:
        key = (what, loop, w)
        if key not in self._stages:
            self._stages[key] = set()  # (the dataflow is acyclic within an iteration)
            self._stages[key] = self._compute_stages(what, w, loop, info)
        return self._stages[key]

    def _compute_stages(self, what: str, w: Value, loop: LoopOp, info: PipeInfo
                        ) -> set[int]:
        out: set[int] = set()
        p = self.planned.producer(w)
        if what == "decided" and p is not None and self.planned.buffered(w):
            top = self._top_or_none(p, loop)
            if top is not None:
                out.add(info.stage_of[top])
        for c, i in self.planned.uses.get(w, []):
            buffer = self.planned.reads_buffer(w, c, i)
            recomputed = self.planned.recomputes(w, c, i)
            inline = not buffer and not recomputed
            if {"buffer": buffer, "decided": inline, "rederived": recomputed}[what]:
                out |= self._consumer_stages("decided", w, c, loop, info)
            follows = self.planned.rederivable(w, self.planned.owner(c))  # re-derived with c
            if {"buffer": buffer and not follows, "decided": not buffer and not follows,
                    "rederived": follows}[what]:
                out |= self._consumer_stages("rederived", w, c, loop, info)
        return out

    def _consumer_stages(self, mode: str, w: Value, c: Op, loop: LoopOp, info: PipeInfo
                         ) -> set[int]:
        """Stages of the statements evaluating ``c`` in ``mode`` (decided, rederived)."""
        if isinstance(c, INLINABLE):
            return self._stages_of(mode, c.result, loop, info)
        if mode == "rederived":
            return set()
        s = self._stage_of_use(w, c, loop, info)
        return set() if s is None else {s}
