"""``planner run`` and ``planner lower``: compile a planned kernel for its target.

Targets whose catalog backend is ``llvm-cpu`` compile through llvmlite for the host;
``metal`` targets print Metal Shading Language and run it in the Linux emulator
(``planner.lower.metal.emulator``); planning-only targets (no backend) are refused.

``run`` compiles the kernel under a plan (``--plan FILE`` saved by ``planner plan
--json``, or planned here with ``--policy``/``--baseline``), runs it on random inputs
and prints the time; with ``--check`` it also runs the reference interpreter on the
same inputs and exits 1 with the largest error when they disagree.  ``lower`` prints
the loop program (``--emit loops``), the optimized LLVM IR (``llvm``) or assembly
(``asm``).  Both are thin layers over :func:`planner.lower.compile_kernel`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from planner.catalog import DEFAULT_TARGET, Backend, CatalogRegistry, Target
from planner.cli.common import (
    add_bind_arg,
    add_catalog_dir_arg,
    add_kernel_arg,
    compare_output,
    kernel_and_bindings,
)
from planner.errors import PlannerError, error
from planner.ir.load import LoadedKernel
from planner.solve import Baseline, MaterializationPlan, Policy, plan_from_json, plan_kernel


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``planner run`` and ``planner lower``."""
    r = subparsers.add_parser("run", help="compile a kernel for the host CPU and run it",
                              description="Compile under a plan, run on random inputs; "
                              "--check compares with the reference interpreter.")
    _common(r)
    r.add_argument("--threads", type=int, help="worker threads (default: the target's "
                   "concurrent instances)")
    r.add_argument("--seed", type=int, default=0, help="random input seed")
    r.add_argument("--repeat", type=int, default=3, help="timed runs (median is printed)")
    r.add_argument("--check", action="store_true",
                   help="compare with the reference interpreter; exit 1 on mismatch")
    r.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of --check")
    r.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of --check")
    r.set_defaults(func=cmd_run)

    lo = subparsers.add_parser("lower", help="print the lowered code of a planned kernel",
                               description="Print the loop program, LLVM IR or assembly.")
    _common(lo)
    lo.add_argument("--emit", choices=("loops", "llvm", "asm", "msl"), default=None,
                    help="what to print (default: msl on Metal targets, else the loop program)")
    lo.set_defaults(func=cmd_lower)


def _common(p: argparse.ArgumentParser) -> None:
    add_kernel_arg(p)
    p.add_argument("--target", default=DEFAULT_TARGET, help=f"target (default {DEFAULT_TARGET})")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--plan", type=Path, metavar="FILE",
                     help="a plan saved with 'planner plan --json'")
    how.add_argument("--baseline", choices=[b.value for b in Baseline],
                     help="plan a fixed strategy instead of the optimum")
    p.add_argument("--policy", default=Policy.DEFAULT.value, choices=[x.value for x in Policy],
                   help="planning policy (S4)")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="S",
                   help="CP-SAT time limit in seconds (default 10)")
    add_bind_arg(p)
    add_catalog_dir_arg(p)


def _planned(args: argparse.Namespace) -> tuple[LoadedKernel, dict[str, int], Target,
                                                 MaterializationPlan]:
    loaded, bindings = kernel_and_bindings(args)
    target = CatalogRegistry.from_environment(args.catalog_dir).get(args.target)
    if args.plan is not None:
        try:
            plan = plan_from_json(json.loads(args.plan.read_text()))
        except OSError as exc:
            raise error(f"cannot read plan {args.plan}: {exc.strerror}", kind="usage") from None
        except json.JSONDecodeError as exc:
            raise error(f"plan {args.plan} is not JSON: {exc.msg}", kind="parse") from None
    else:
        plan = plan_kernel(loaded.kernel, target, bindings, policy=args.policy,
                           baseline=args.baseline, time_limit_s=args.time_limit)
    return loaded, bindings, target, plan


def _backend(target: Target) -> Backend:
    if target.backend is None:
        raise error(f"target {target.name} is planning-only (its catalog names no backend): "
                    "use 'planner plan' for it, or lower on x86-avx2 / apple-m2",
                    kind="unsupported")
    return target.backend


def cmd_lower(args: argparse.Namespace) -> int:
    from planner.lower import compile_kernel

    loaded, _, target, plan = _planned(args)
    kernel = loaded.kernel
    emit = args.emit or ("msl" if target.backend is Backend.METAL else "loops")
    if emit == "msl":
        if target.backend is not Backend.METAL:
            raise error(f"--emit msl needs a Metal target; {target.name} lowers to "
                        f"{target.backend.value if target.backend else 'nothing'}",
                        kind="unsupported")
        from planner.cli.metal_cmds import lower_msl_command

        print(lower_msl_command(kernel, plan, target), end="")
        return 0
    if emit == "loops":
        from planner.lower import build_loop_program

        print(build_loop_program(kernel, plan, target), end="")
        return 0
    if _backend(target) is not Backend.LLVM_CPU:
        raise error(f"--emit {emit} needs an llvm-cpu target; {target.name} lowers to Metal "
                    "(use --emit msl or --emit loops)", kind="unsupported")
    compiled = compile_kernel(kernel, plan, target)
    print(compiled.llvm_ir if emit == "llvm" else compiled.asm)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from planner.ir.interpreter import interpret, random_inputs
    from planner.lower import compile_kernel

    loaded, bindings, target, plan = _planned(args)
    kernel = loaded.kernel
    if _backend(target) is Backend.METAL:
        from planner.cli.metal_cmds import run_msl_check

        if not args.check:
            raise error("on a Metal target 'planner run' executes in the emulator only to "
                        "check it: add --check", kind="usage")
        print(run_msl_check(loaded, plan, target, bindings, seed=args.seed,
                            rtol=args.rtol, atol=args.atol))
        return 0
    start = time.perf_counter()
    compiled = compile_kernel(kernel, plan, target, threads=args.threads)
    compile_s = time.perf_counter() - start
    inputs = random_inputs(kernel, bindings, args.seed)
    times = []
    outputs: dict[str, np.ndarray] = {}
    for _ in range(max(1, args.repeat)):
        fresh = {k: v.copy() for k, v in inputs.items()}
        start = time.perf_counter()
        outputs = compiled(fresh, bindings=bindings)
        times.append(time.perf_counter() - start)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(bindings.items()))
    print(f"{kernel.name} on {target.name} ({plan.baseline.value if plan.baseline else 'optimal'}"
          f" plan, {compiled.threads} threads, {shown}): compile {compile_s:.2f} s, "
          f"run {np.median(times) * 1e3:.3f} ms (median of {len(times)})")
    if not args.check:
        return 0
    expected = interpret(kernel, inputs, bindings)
    worst = 0.0
    bad: list[str] = []
    for name, want in expected.items():
        ok, err = compare_output(outputs[name], want, args.rtol, args.atol)
        worst = max(worst, err)
        print(f"  {name}: max abs error {err:.3g} {'ok' if ok else 'MISMATCH'}")
        if not ok:
            bad.append(name)
    if bad:
        raise PlannerError(error(f"compiled {kernel.name} disagrees with the reference "
                                 f"interpreter on {', '.join(bad)}: max abs error {worst:.3g} "
                                 f"(rtol {args.rtol}, atol {args.atol})",
                                 kind="mismatch").diagnostics, kind="mismatch")
    print(f"check ok: matches the reference interpreter (max abs error {worst:.3g})")
    return 0
