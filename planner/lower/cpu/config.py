"""The code generator's figures: vector width, register and stack budgets, the mma kernel
choice (:class:`CodegenConfig`), taken from the target catalog, never from the host."""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog import Target
from planner.errors import error
from planner.lower.cpu.gemm import POOL_ALLOCS_SYMBOL as _POOL_ALLOCS
from planner.lower.cpu.gemm import GemmConfig

__all__ = ["MMA_CALLS_SYMBOL", "MMA_PACKED_SYMBOL", "MMA_WORK_SYMBOL", "POOL_ALLOCS_SYMBOL",
           "CodegenConfig"]

MMA_WORK_SYMBOL = "planner.mma_work"
MMA_CALLS_SYMBOL = "planner.mma_calls"
MMA_PACKED_SYMBOL = "planner.mma_packed"
#: aligned_alloc calls of the module's buffer pool (``planner.lower.cpu.gemm.buffer_pool``;
#: only with ``count_work``)
POOL_ALLOCS_SYMBOL = _POOL_ALLOCS

_KIND = "lowering"


@dataclass(frozen=True, slots=True)
class CodegenConfig:
    """Vector width (lanes of f32), register budget, stack budget and the mma kernel.

    :meth:`for_target` takes them from the target catalog (the plan's figures), never
    from the host: an x86-avx2 plan gets 8-lane vectors on an AVX-512 machine too.
    """

    vector_width: int = 8  # lanes of f32: the catalog's cpu.vector_width (for_target)
    registers: int = 16  # vector registers: private capacity / (vector_width * 4 B)
    stack_limit: int = 16 * 1024  # bytes per private buffer kept on the stack
    small_mma: int = 64 * 64 * 64  # m*n*k up to which mma uses the small kernel
    reduce_unroll: int = 4  # independent accumulators of a vectorized reduction
    gemm: GemmConfig | None = None  # None: GemmConfig.for_figures(vector_width, registers)
    #: count the multiply-adds every mma runs in a module global (``MMA_WORK_SYMBOL``,
    #: read by ``CompiledKernel.mma_work``): what tests use to bound edge-tile work; and
    #: the mma executions (``MMA_CALLS_SYMBOL``, ``CompiledKernel.mma_calls``) and the
    #: bytes of source elements the packed GEMM packs (``MMA_PACKED_SYMBOL``,
    #: ``CompiledKernel.mma_packed``: pack-cache hits pack nothing)
    count_work: bool = False
    #: lower a k loop that only accumulates one tile product to one mma over the whole
    #: reduction (``planner.lower.cpu.mma_sources.k_merge``)
    merge_k: bool = True
    #: skip the rows of a parallel instance's tiles that no store can write
    #: (``planner.lower.cpu.rows``: row-independent chains up to an edge-masked store)
    clamp_rows: bool = True

    @classmethod
    def for_target(cls, target: Target) -> CodegenConfig:
        """The figures of ``target``: ``cpu.vector_width`` lanes, and as many vector
        registers as its private resource at the default parallel scope holds."""
        if target.cpu is None:
            raise error(f"target {target.name!r} has no 'cpu' section (vector_width, "
                        "llvm_cpu, llvm_features) to compile for", kind=_KIND)
        width = target.cpu.vector_width
        registers = 16
        private = target.resolve("private", target.default_parallel_scope)
        if private is not None and private.capacity is not None:
            registers = max(1, private.capacity // (width * 4))
        return cls(vector_width=width, registers=registers,
                   gemm=GemmConfig.for_figures(width, registers))
