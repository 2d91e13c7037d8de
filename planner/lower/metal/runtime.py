"""Run an emitted Metal kernel in the emulator on numpy arrays.

:func:`run_msl` is the Metal counterpart of calling the CPU backend: it emits the
kernel (:func:`planner.lower.metal.emitter.emit_msl`), compiles it with
:func:`planner.lower.metal.emulator.compile_msl` (cached by content hash), binds the
kernel's views to device buffers and its symbols to ``constant long&`` scalars in the
parameter order the emitter chose, dispatches one threadgroup per parallel instance
and returns the writable views.  The caller's arrays are never modified.

What a passing run proves (and what only Apple's compiler can) is written in
``msl_runtime/SUBSET.md`` §8.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from planner.catalog import Target
from planner.errors import error
from planner.ir.core import Kernel
from planner.ir.interpreter import bind_symbols
from planner.lower.metal.emitter import MslKernel, emit_msl
from planner.lower.metal.emulator import Order, RunReport, compile_msl
from planner.plan.decisions import MaterializationPlan

__all__ = ["MslRun", "dispatch", "run_msl", "run_msl_kernel"]


@dataclass(frozen=True, slots=True)
class MslRun:
    """The outputs of one emulated dispatch and the emulator's report (None: no groups)."""

    outputs: dict[str, np.ndarray]
    report: RunReport | None
    kernel: MslKernel


def run_msl_kernel(kernel: Kernel, msl: MslKernel, arrays: Mapping[str, np.ndarray],
                   bindings: Mapping[str, int] | None = None, order: Order = "forward",
                   seed: int = 0, timeout_s: float = 60.0) -> MslRun:
    """Compile ``msl`` (emitted from ``kernel``) and run it on copies of ``arrays``."""
    env = bind_symbols(kernel, arrays, bindings)
    grid = msl.grid(env)
    writable: dict[str, np.ndarray] = {}
    args: list[np.ndarray | int] = []
    for p in msl.params:
        if p.role == "symbol":
            args.append(int(env[p.source]))
            continue
        if p.role == "scratch":
            assert p.dtype is not None
            args.append(_scratch(p.dtype.numpy, msl.scratch_elements(p, env)))
            continue
        assert p.dtype is not None
        if p.source not in arrays:
            raise error(f"no array given for view {p.source!r} of kernel {kernel.name!r}",
                        kind="input")
        a = np.array(arrays[p.source], dtype=p.dtype.numpy, order="C", copy=True)
        if not p.readonly:
            writable[p.source] = a
        args.append(a if a.size else np.zeros(1, dtype=a.dtype))
    if grid[0] == 0:
        return MslRun(writable, None, msl)
    compiled = compile_msl(msl.source, msl.kernel_name)
    report = compiled.run(args, grid, (msl.threads_per_group, 1, 1), order, seed,
                          timeout_s=timeout_s)
    return MslRun(writable, report, msl)


def _scratch(dtype: np.dtype, n: int) -> np.ndarray:
    """Device scratch, poisoned like the interpreter's fresh storage (NaN, -1, True)."""
    fill = np.nan if dtype.kind == "f" else True if dtype.kind == "b" else -1
    return np.full(max(n, 1), fill, dtype=dtype)


def dispatch(kernel: Kernel, plan: MaterializationPlan | None, target: Target,
             arrays: Mapping[str, np.ndarray], bindings: Mapping[str, int] | None = None,
             order: Order = "forward", seed: int = 0) -> MslRun:
    """Emit, compile and run; the outputs with the emulator's report."""
    return run_msl_kernel(kernel, emit_msl(kernel, plan, target), arrays, bindings, order,
                          seed)


def run_msl(kernel: Kernel, plan: MaterializationPlan | None, target: Target,
            arrays: Mapping[str, np.ndarray], bindings: Mapping[str, int] | None = None,
            order: Order = "forward") -> dict[str, np.ndarray]:
    """Run ``kernel`` under ``plan`` as Metal in the emulator: the writable views' contents.

    ``arrays`` holds one array per view (as for the reference interpreter); symbols
    are bound from their shapes and ``bindings``.  Raises :class:`PlannerError` when
    the target cannot honour the plan, and
    :class:`~planner.lower.metal.emulator.KernelFault` when the kernel faults, diverges
    at a barrier or times out.
    """
    return dispatch(kernel, plan, target, arrays, bindings, order).outputs

