"""Lowering: from a kernel and its MaterializationPlan to runnable code.

:mod:`.loop_program` builds the target-neutral loop program (loops, buffers in
resources with their layouts and versions, element expressions, barriers);
:mod:`.cpu_codegen` turns it into LLVM IR and :mod:`.cpu_runtime` JIT-compiles it for
the host and calls it on numpy arrays with a worker pool.
"""

from planner.lower.cpu_runtime import CompiledKernel, compile_kernel
from planner.lower.loop_program import LoopProgram, build_loop_program

__all__ = ["CompiledKernel", "LoopProgram", "build_loop_program", "compile_kernel"]
