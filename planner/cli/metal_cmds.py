"""The Metal check as functions: ``planner lower/run KERNEL --target apple-m2``.

The commands themselves (:mod:`planner.cli.lower_cmds`, :mod:`planner.cli.survey_cmds`)
go through the backend registry (:mod:`planner.lower.backends`); these two functions
are the Metal backend's operations with the signatures callers and tests use:

* :func:`lower_msl_command` — the text ``planner lower KERNEL --target apple-m2 --emit
  msl`` prints: the emitted kernel source;
* :func:`run_msl_check` — what ``planner run KERNEL --target apple-m2 --check`` does:
  emit, compile and run the kernel in the Metal emulator in each requested thread
  order on random inputs, compare with the reference interpreter (and with the
  example's independent numpy reference when there is one), and return the report;
  a mismatch raises :class:`~planner.errors.PlannerError` (kind ``mismatch``) carrying
  the report.

Both are thin layers over the registry's ``metal`` backend
(:func:`planner.lower.backends.check_metal`), which wraps
:func:`planner.lower.metal.emitter.emit_msl` and
:func:`planner.lower.metal.runtime.run_msl_kernel`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from planner.catalog import Target
from planner.ir.core import Kernel
from planner.ir.load import LoadedKernel
from planner.lower.backends import DEFAULT_ORDERS, backend_named, check_metal
from planner.lower.metal.emitter import emit_msl
from planner.lower.metal.emulator import Order
from planner.plan.decisions import MaterializationPlan

__all__ = ["DEFAULT_ORDERS", "lower_msl_command", "run_msl_check"]


def lower_msl_command(kernel: Kernel, plan: MaterializationPlan | None, target: Target) -> str:
    """The Metal Shading Language source of ``kernel`` under ``plan`` (one kernel void)."""
    return backend_named("metal").emit(kernel, plan, target, "msl")


def run_msl_check(loaded_kernel: LoadedKernel | Kernel, plan: MaterializationPlan | None,
                  target: Target, bindings: Mapping[str, int],
                  orders: Sequence[Order] = DEFAULT_ORDERS, *, seed: int = 0,
                  rtol: float = 1e-4, atol: float = 1e-4) -> str:
    """Run the emitted kernel in the emulator in each of ``orders``; the report.

    Raises :class:`~planner.errors.PlannerError` (kind ``mismatch``) with the report
    when an output disagrees with the reference beyond ``rtol``/``atol`` in any order, and the
    emulator's :class:`~planner.lower.metal.emulator.KernelFault` when a run faults or
    diverges at a barrier.
    """
    backend_named("metal").require(target)
    result = check_metal(loaded_kernel, plan, target, bindings, orders, seed=seed,
                         rtol=rtol, atol=atol, emit=emit_msl)
    if not result.ok:
        raise result.mismatch(result.report)
    return result.report
