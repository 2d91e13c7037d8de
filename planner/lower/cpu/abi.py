"""What the runtime and the emitted segment functions agree on besides the signature:
where each buffer lives (:func:`placements`) and how to call the functions
(:class:`ModuleInfo`). The ABI itself is described in :mod:`planner.lower.cpu.codegen`."""

from __future__ import annotations

from dataclasses import dataclass

from planner.ir.dtypes import DType
from planner.lower.cpu.config import CodegenConfig
from planner.lower.loops import program as lp

__all__ = ["ModuleInfo", "placements"]


@dataclass(frozen=True, slots=True)
class ModuleInfo:
    """What the runtime needs to call the emitted functions."""

    functions: tuple[str, ...]  # one per segment
    placement: tuple[str, ...]  # per buffer: stack | worker | global | kernel
    view_rank_offsets: tuple[int, ...]  # index of each view's first stride
    #: per segment: how many contiguous pieces per thread a split call cuts it into
    #: (1 where its mmas keep packed blocks across the instances of one call: one piece
    #: per thread packs each block once per thread), as
    #: :func:`~planner.lower.cpu.workpool.piece_count` applies it
    pieces: tuple[int, ...] = ()


def placements(program: lp.LoopProgram, config: CodegenConfig) -> dict[str, str]:
    """Where each buffer lives on the CPU (see :mod:`planner.lower.cpu.codegen`)."""
    owner: dict[str, lp.Segment] = {}
    for seg in program.segments:
        for name in seg.buffers:
            owner[name] = seg
    out: dict[str, str] = {}
    for buf in program.buffers:
        seg = owner.get(buf.name)
        if seg is None or not seg.parallel:
            out[buf.name] = "kernel"
        elif buf.resource_class == "global":
            out[buf.name] = "global"
        else:
            n = buf.static_elements()
            small = n is not None and n * _mem_size(buf.dtype) <= config.stack_limit
            out[buf.name] = "stack" if buf.resource_class == "private" and small else "worker"
    return out


def _mem_size(dt: DType) -> int:
    return 1 if dt is DType.BOOL else dt.itemsize
