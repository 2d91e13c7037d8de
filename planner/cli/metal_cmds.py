"""The Metal side of ``planner lower`` and ``planner run`` (``--target apple-m2``).

Two functions for the commands in :mod:`planner.cli.lower_cmds` to call when the
target's catalog says ``backend: metal``:

* :func:`lower_msl_command` — the text ``planner lower KERNEL --target apple-m2 --emit
  msl`` prints: the emitted kernel source;
* :func:`run_msl_check` — what ``planner run KERNEL --target apple-m2 --check`` does:
  emit, compile and run the kernel in the Metal emulator in each requested thread
  order on random inputs, compare with the reference interpreter (and with the
  example's independent numpy reference when there is one), and return the report;
  a mismatch raises :class:`PlannerError` (kind ``mismatch``) carrying the report.

Both are thin layers over :func:`planner.lower.metal.emitter.emit_msl` and
:func:`planner.lower.metal.runtime.run_msl_kernel`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from planner.catalog import Target
from planner.cli.common import compare_output
from planner.errors import Diagnostic, PlannerError
from planner.ir.core import Kernel
from planner.ir.interpreter import interpret, random_inputs
from planner.ir.load import LoadedKernel
from planner.lower.metal.emitter import emit_msl
from planner.lower.metal.emulator import Order
from planner.lower.metal.runtime import run_msl_kernel
from planner.plan.decisions import MaterializationPlan

__all__ = ["DEFAULT_ORDERS", "lower_msl_command", "run_msl_check"]

#: Thread orders a check runs in unless told otherwise.
DEFAULT_ORDERS: tuple[Order, ...] = ("forward", "reverse")


def lower_msl_command(kernel: Kernel, plan: MaterializationPlan | None, target: Target) -> str:
    """The Metal Shading Language source of ``kernel`` under ``plan`` (one kernel void)."""
    return emit_msl(kernel, plan, target).source


def run_msl_check(loaded_kernel: LoadedKernel | Kernel, plan: MaterializationPlan | None,
                  target: Target, bindings: Mapping[str, int],
                  orders: Sequence[Order] = DEFAULT_ORDERS, *, seed: int = 0,
                  rtol: float = 1e-4, atol: float = 1e-4) -> str:
    """Run the emitted kernel in the emulator in each of ``orders``; the report.

    Raises :class:`PlannerError` (kind ``mismatch``) with the report when an output
    disagrees with the reference beyond ``rtol``/``atol`` in any order, and the
    emulator's :class:`~planner.lower.metal.emulator.KernelFault` when a run faults or
    diverges at a barrier.
    """
    loaded = loaded_kernel if isinstance(loaded_kernel, LoadedKernel) else None
    kernel = loaded.kernel if loaded is not None else loaded_kernel
    assert isinstance(kernel, Kernel)
    start = time.perf_counter()
    msl = emit_msl(kernel, plan, target)
    emit_s = time.perf_counter() - start
    inputs = random_inputs(kernel, bindings, seed)
    references = {"reference interpreter": interpret(kernel, inputs, bindings)}
    independent = loaded.expected(inputs) if loaded is not None else None
    if independent:
        references["example's numpy reference"] = independent
    groups = msl.grid(bindings)[0]
    shown = ", ".join(f"{k}={v}" for k, v in sorted(bindings.items()))
    how = (plan.baseline.value if plan is not None and plan.baseline else "optimal") \
        if plan is not None else "all-virtual"
    lines = [f"{kernel.name} on {target.name} ({how} plan, {shown}): Metal kernel "
             f"`{msl.kernel_name}`, {groups} threadgroups x {msl.threads_per_group} threads, "
             f"threadgroup memory {msl.threadgroup_bytes:,} B, emitted in {emit_s:.2f} s"]
    bad: list[str] = []
    worst = 0.0
    for order in orders:
        run = run_msl_kernel(kernel, msl, inputs, bindings, order=order, seed=seed)
        rep = run.report
        facts = (f"{rep.barriers_passed} barriers passed, {rep.elapsed_s:.3f} s"
                 if rep is not None else "no threadgroups to run")
        for ref_name, expected in references.items():
            for name, want in expected.items():
                got = run.outputs[name]
                ok, err = compare_output(got, want, rtol, atol)
                worst = max(worst, err)
                lines.append(f"  {order}: {name} vs the {ref_name}: max abs error {err:.3g} "
                             f"{'ok' if ok else 'MISMATCH'} ({facts})")
                if not ok:
                    bad.append(f"{name} ({order} order, vs the {ref_name})")
    if bad:
        lines.append(f"check FAILED: {', '.join(bad)} (rtol {rtol}, atol {atol})")
        raise PlannerError(Diagnostic("\n".join(lines), rule="msl-check"), kind="mismatch")
    lines.append(f"check ok: the emulated Metal kernel matches in {len(orders)} thread "
                 f"order{'s' if len(orders) != 1 else ''} (max abs error {worst:.3g})")
    return "\n".join(lines)
