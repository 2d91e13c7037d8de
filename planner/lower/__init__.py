"""Lowering: from a kernel, its MaterializationPlan and its realization to runnable code.

:mod:`.loops` builds the target-neutral loop program (loops, buffers in resources with
their layouts and versions, element expressions, barriers); :mod:`.cpu` turns it into
LLVM IR and JIT-compiles it for the host; :mod:`.metal` prints MSL and runs it in the
emulator.  :mod:`.backends` is the one registry the CLI, the survey and the server use.

Names are re-exported lazily: importing :mod:`planner.lower.backends` (every CLI command
does) must not load llvmlite or the Metal emitter before one of them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.lower.backends import Backend, RunResult, backend_for, emit_forms
    from planner.lower.cpu import CompiledKernel, compile_kernel
    from planner.lower.loops import LoopProgram, build_loop_program

_EXPORTS = {
    "Backend": "planner.lower.backends",
    "CompiledKernel": "planner.lower.cpu",
    "LoopProgram": "planner.lower.loops",
    "RunResult": "planner.lower.backends",
    "backend_for": "planner.lower.backends",
    "build_loop_program": "planner.lower.loops",
    "compile_kernel": "planner.lower.cpu",
    "emit_forms": "planner.lower.backends",
}

__all__ = [
    "Backend",
    "CompiledKernel",
    "LoopProgram",
    "RunResult",
    "backend_for",
    "build_loop_program",
    "compile_kernel",
    "emit_forms",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
