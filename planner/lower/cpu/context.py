"""The state the segment-function emitters share: the module being emitted
(:class:`_ModuleContext`: program, figures, buffer placement, stride symbols, the GEMM
kernels emitted on first use), the state of one function (:class:`_FnState`) and the
lanes of one vectorized point of a nest (:class:`_Lanes`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.ir as ir

from planner.ir.expr import Expr
from planner.lower.cpu.abi import placements
from planner.lower.cpu.builder import _IR
from planner.lower.cpu.config import MMA_PACKED_SYMBOL, CodegenConfig
from planner.lower.cpu.gemm import GemmConfig, emit_gemm_f32_strided
from planner.lower.cpu.small_gemm import _emit_small_gemm
from planner.lower.loops import program as lp


class _ModuleContext:
    """The module being emitted, as its segment functions see it."""

    def __init__(self, program: lp.LoopProgram, config: CodegenConfig) -> None:
        self.program = program
        self.config = config
        self.module = ir.Module(name=f"planner.{program.kernel}")
        self.placement = placements(program, config)
        ranks = [0]
        for p in program.params:
            ranks.append(ranks[-1] + len(p.shape))
        self.info_rank = ranks[:-1]
        self._sgemm: ir.Function | None = None
        self._small: ir.Function | None = None
        self._gemm_config: GemmConfig | None = None

    def stride_sym(self, view: str, d: int) -> str:
        i = next(i for i, p in enumerate(self.program.params) if p.name == view)
        return f"v.{i}.s.{d}"

    @property
    def gemm_config(self) -> GemmConfig:
        if self._gemm_config is None:
            self._gemm_config = self.config.gemm or GemmConfig.for_figures(
                self.config.vector_width, self.config.registers)
        return self._gemm_config

    def sgemm(self) -> ir.Function:
        """The strided packed GEMM with caller-provided scratch (emitted on first use)."""
        if self._sgemm is None:
            self._sgemm = emit_gemm_f32_strided(self.module, f"{self.program.kernel}.sgemm",
                                                config=self.gemm_config,
                                                pack_counter=MMA_PACKED_SYMBOL
                                                if self.config.count_work else None)
        return self._sgemm

    def small_gemm(self) -> ir.Function:
        if self._small is None:
            self._small = _emit_small_gemm(self.module, f"{self.program.kernel}.small_gemm",
                                           self.config.vector_width)
        return self._small


class _FnState(_IR):
    """One segment function being emitted: its builder, bound symbols, buffer bases and
    view pointers, the entry block, and the mma state of the statement list at hand."""

    def __init__(self, cg: _ModuleContext, seg: lp.Segment, fn: ir.Function) -> None:
        super().__init__(ir.IRBuilder(fn.append_basic_block("entry")))
        self.cg = cg
        self.seg = seg
        self.fn = fn
        self.env: dict[str, ir.Value] = {}
        self.bases: dict[str, ir.Value] = {}
        self.views: dict[str, ir.Value] = {}
        self.entry = self.b.block
        self.scratch: tuple[ir.Value, ir.Value] | None = None  # mma packing scratch
        self.mma_forward: dict[str, lp.MmaBuf] = {}  # staging copies skipped (body)
        #: (mma id, buffer, version) -> rows, columns past which the operand is 0
        self.zeros: dict[tuple[int, str, Expr], tuple[Expr, Expr]] = {}

    def alloca(self, t: ir.Type) -> ir.Value:
        with self.b.goto_block(self.entry):
            if self.entry.instructions:
                self.b.position_before(self.entry.instructions[0])
            return self.b.alloca(t)


@dataclass
class _Lanes:
    """The lanes of one vectorized point of a nest."""

    w: int
    var: str | None  # the vectorized nest variable (its scalar value is env[var])
    tail: ir.Value | None  # <w x i1> active lanes, None when all are active
    edge: bool  # the masked edge-tile version of the nest
    cache: dict[lp.Elem, ir.Value] = field(default_factory=dict)
