"""``planner run`` and ``planner lower``: compile a planned kernel for its target.

Which code generator serves the target is the backend registry's answer
(:func:`planner.lower.backends.backend_for`): ``llvm-cpu`` targets compile through
llvmlite, ``metal`` targets print Metal Shading Language and run it in the Linux
emulator; planning-only targets (no backend) are refused with the registry's message.

``run`` compiles the kernel under a plan (``--plan FILE`` saved by ``planner plan
--json``, or planned here with ``--policy``/``--baseline``), runs it on random inputs
and prints the time; with ``--check`` it also runs the reference interpreter on the
same inputs and exits 1 with the largest error when they disagree.  ``lower`` prints
one of the backend's emit forms: the loop program (``--emit loops``), the optimized
LLVM IR (``llvm``) or assembly (``asm``) on CPU targets, MSL (``msl``) on Metal ones.
A plan read with ``--plan`` is lowered only for the target it was made for.
Both are thin layers over :class:`planner.lower.backends.Backend`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from planner.catalog import DEFAULT_TARGET, CatalogRegistry, Target
from planner.cli.common import (
    add_bind_arg,
    add_catalog_dir_arg,
    add_kernel_arg,
    kernel_and_bindings,
    symbol_bounds,
)
from planner.errors import error
from planner.ir.load import LoadedKernel
from planner.lower.backends import Backend, backend_for, emit_forms
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
    lo.add_argument("--emit", choices=emit_forms(), default=None,
                    help="what to print (default: msl on Metal targets, else the loop program)")
    lo.set_defaults(func=cmd_lower)


def _common(p: argparse.ArgumentParser) -> None:
    add_kernel_arg(p)
    p.add_argument("--target", default=None, help="target (default: the plan's with --plan, "
                   f"else {DEFAULT_TARGET})")
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


def _planned(args: argparse.Namespace, form: str | None = None
             ) -> tuple[LoadedKernel, dict[str, int], Target, Backend, str, MaterializationPlan]:
    """The verified kernel, bindings, target, its backend, the form to emit and the plan.

    The target's backend (and ``form`` on it) is checked before anything is planned; a
    plan read with ``--plan`` must have been made for the target (``--target``
    defaults to the plan's).
    """
    loaded, bindings = kernel_and_bindings(args)
    saved = _read_plan(args.plan) if args.plan is not None else None
    name = args.target or (saved.target if saved is not None else DEFAULT_TARGET)
    target = CatalogRegistry.from_environment(args.catalog_dir).get(name)
    backend = backend_for(target)
    form = backend.require(target, form, option="--emit")
    if saved is not None:
        if saved.target != target.name:
            raise error(f"plan {args.plan} was made for target {saved.target}, not "
                        f"{target.name}: lower it with --target {saved.target}, or plan "
                        f"again with 'planner plan --target {target.name} --json'",
                        kind="usage")
        return loaded, bindings, target, backend, form, saved
    plan = plan_kernel(loaded.kernel, target, bindings, policy=args.policy,
                       baseline=args.baseline, time_limit_s=args.time_limit,
                       bounds=symbol_bounds(args))
    return loaded, bindings, target, backend, form, plan


def _read_plan(path: Path) -> MaterializationPlan:
    try:
        return plan_from_json(json.loads(path.read_text()))
    except OSError as exc:
        raise error(f"cannot read plan {path}: {exc.strerror}", kind="usage") from None
    except json.JSONDecodeError as exc:
        raise error(f"plan {path} is not JSON: {exc.msg}", kind="parse") from None


def cmd_lower(args: argparse.Namespace) -> int:
    loaded, _, target, backend, form, plan = _planned(args, args.emit)
    text = backend.emit(loaded.kernel, plan, target, form, option="--emit")
    print(text, end="" if text.endswith("\n") else "\n")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    loaded, bindings, target, backend, _, plan = _planned(args)
    result = backend.run(loaded, plan, target, bindings, check=args.check,
                         threads=args.threads, seed=args.seed, repeat=args.repeat,
                         rtol=args.rtol, atol=args.atol)
    print(result.header)
    for line in result.lines:
        print(line)
    if result.ok is None:
        return 0
    if not result.ok:
        raise result.mismatch()
    print(result.verdict)
    return 0
