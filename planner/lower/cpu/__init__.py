"""The CPU backend: loop program → LLVM IR (llvmlite) → JIT-compiled native code."""

from planner.lower.cpu.runtime import CompiledKernel, compile_kernel

__all__ = ["CompiledKernel", "compile_kernel"]
