"""Lowering: from a kernel, its MaterializationPlan and its realization to runnable code.

:mod:`.loops` builds the target-neutral loop program (loops, buffers in resources with
their layouts and versions, element expressions, barriers); :mod:`.cpu` turns it into
LLVM IR and JIT-compiles it for the host; :mod:`.metal` prints MSL and runs it in the
emulator.  :mod:`.backends` is the one registry the CLI, the survey and the server use.
"""

from planner.lower.cpu import CompiledKernel, compile_kernel
from planner.lower.loops import LoopProgram, build_loop_program

__all__ = ["CompiledKernel", "LoopProgram", "build_loop_program", "compile_kernel"]
