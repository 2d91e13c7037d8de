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
A plan read with ``--plan`` is lowered only for the target and the kernel it was
made for: its ``target``, its ``kernel`` name and its ``content_hash``
(:func:`planner.solve.planner.content_hash` of kernel, catalog, bindings, policy,
baseline and bounds) must match, else the command names the mismatch (exit 1).  An
infeasible plan is refused with its explanation (exit 1).  ``--json`` prints ``lower``'s
code with its metadata, or ``run``'s report, as one JSON document.  Both are thin
layers over :class:`planner.lower.backends.Backend`, imported when they run.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from planner.cli.common import (
    DEFAULT_TARGET,
    EMIT_FORMS,
    add_bind_arg,
    add_catalog_dir_arg,
    add_json_arg,
    add_kernel_arg,
    infeasible_error,
    kernel_and_bindings,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    print_json,
    symbol_bounds,
)
from planner.errors import error
from planner.plan import Baseline, MaterializationPlan, Policy, Status, plan_from_json

if TYPE_CHECKING:
    from planner.catalog import Target
    from planner.ir.core import Kernel
    from planner.ir.load import LoadedKernel
    from planner.lower.backends import Backend


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``planner run`` and ``planner lower``."""
    r = subparsers.add_parser("run", help="compile a kernel for the host CPU and run it",
                              description="Compile under a plan, run on random inputs; "
                              "--check compares with the reference interpreter.")
    _common(r)
    r.add_argument("--threads", type=positive_int, metavar="N",
                   help="worker threads, >= 1 (default: the target's concurrent instances)")
    r.add_argument("--seed", type=non_negative_int, default=0,
                   help="random input seed, >= 0 (default 0)")
    r.add_argument("--repeat", type=positive_int, default=3, metavar="N",
                   help="timed runs, >= 1 (the median is printed; default 3)")
    r.add_argument("--check", action="store_true",
                   help="compare with the reference interpreter; exit 1 on mismatch")
    r.add_argument("--rtol", type=non_negative_float, default=1e-4,
                   help="relative tolerance of --check, >= 0 (default 1e-4)")
    r.add_argument("--atol", type=non_negative_float, default=1e-4,
                   help="absolute tolerance of --check, >= 0 (default 1e-4)")
    add_json_arg(r, "the report ({kernel, target, header, lines, checked, ok, worst, "
                 "verdict, summary, plan: {status, policy, baseline, objective, "
                 "content_hash}})")
    r.set_defaults(func=cmd_run)

    lo = subparsers.add_parser("lower", help="print the lowered code of a planned kernel",
                               description="Print the loop program, LLVM IR or assembly.")
    _common(lo)
    lo.add_argument("--emit", choices=EMIT_FORMS, default=None,
                    help="what to print (default: msl on Metal targets, else the loop program)")
    add_json_arg(lo, "the code with its metadata ({kernel, target, emit, code, bindings, "
                 "plan: the plan's JSON}, as /v1/lower answers)")
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
    p.add_argument("--time-limit", type=positive_float, default=10.0, metavar="S",
                   help="CP-SAT time limit in seconds, > 0 (default 10)")
    add_bind_arg(p)
    add_catalog_dir_arg(p)


def _planned(args: argparse.Namespace, form: str | None = None
             ) -> tuple[LoadedKernel, dict[str, int], Target, Backend, str, MaterializationPlan]:
    """The verified kernel, bindings, target, its backend, the form to emit and the plan.

    The target's backend (and ``form`` on it) is checked before anything is planned; a
    plan read with ``--plan`` must have been made for the target (``--target``
    defaults to the plan's) and for this kernel under these bindings and bounds.  An
    infeasible plan is refused with its explanation.
    """
    from planner.catalog import CatalogRegistry
    from planner.lower.backends import backend_for

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
                        kind="plan-mismatch")
        _check_plan_kernel(args, saved, loaded.kernel, target, bindings)
        plan = saved
    else:
        from planner.solve import plan_kernel

        plan = plan_kernel(loaded.kernel, target, bindings, policy=args.policy,
                           baseline=args.baseline, time_limit_s=args.time_limit,
                           bounds=symbol_bounds(args))
    if plan.status is Status.INFEASIBLE:
        raise infeasible_error(plan)
    return loaded, bindings, target, backend, form, plan


def _check_plan_kernel(args: argparse.Namespace, saved: MaterializationPlan, kernel: Kernel,
                       target: Target, bindings: Mapping[str, int]) -> None:
    """Refuse a saved plan made for another kernel: another name, or the same name with
    another content hash (IR, catalog, bindings or declared bounds differ)."""
    again = (f"plan again with 'planner plan {args.kernel} --target {target.name} "
             f"--json'")
    if saved.kernel != kernel.name:
        raise error(f"plan {args.plan} was made for kernel {saved.kernel}, not "
                    f"{kernel.name}: lower {saved.kernel} with it, or {again}",
                    kind="plan-mismatch")
    if not saved.content_hash:  # a hand-written plan: the name is all there is to check
        return
    from planner.solve.planner import content_hash

    bounds = symbol_bounds(args)
    digest = content_hash(kernel, target, bindings, saved.policy, saved.baseline, bounds)
    if digest == saved.content_hash:
        return
    planned_with = dict(saved.bindings)
    if planned_with != dict(bindings):
        why = (f"it was planned with bindings {_shape(planned_with)}, not "
               f"{_shape(bindings)}: pass the same --bind values")
    elif bounds and content_hash(kernel, target, bindings, saved.policy, saved.baseline,
                                 None) == saved.content_hash:
        why = "it was planned without the --bound ranges given here"
    else:
        why = ("the kernel's IR, the target catalog or the declared --bound ranges differ "
               "from the ones it was planned with")
    raise error(f"plan {args.plan} does not match kernel {kernel.name} on {target.name} "
                f"(content hash {saved.content_hash[:12]}, this kernel's "
                f"{digest[:12]}): {why}; or {again}", kind="plan-mismatch")


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _shape(bindings: Mapping[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(bindings.items())) or "(none)"


def _read_plan(path: Path) -> MaterializationPlan:
    try:
        return plan_from_json(json.loads(path.read_text()))
    except OSError as exc:
        raise error(f"cannot read plan {path}: {exc.strerror}", kind="usage") from None
    except json.JSONDecodeError as exc:
        raise error(f"plan {path} is not JSON: {exc.msg}", kind="parse") from None


def cmd_lower(args: argparse.Namespace) -> int:
    loaded, bindings, target, backend, form, plan = _planned(args, args.emit)
    text = backend.emit(loaded.kernel, plan, target, form, option="--emit")
    if args.json:
        from planner.plan import plan_to_json

        print_json({"kernel": loaded.kernel.name, "target": target.name, "emit": form,
                    "code": text, "bindings": dict(sorted(bindings.items())),
                    "plan": plan_to_json(plan)})
        return 0
    print(text, end="" if text.endswith("\n") else "\n")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    loaded, bindings, target, backend, _, plan = _planned(args)
    result = backend.run(loaded, plan, target, bindings, check=args.check,
                         threads=args.threads, seed=args.seed, repeat=args.repeat,
                         rtol=args.rtol, atol=args.atol)
    if args.json:
        print_json({"kernel": loaded.kernel.name, "target": target.name,
                    "bindings": dict(sorted(bindings.items())), "header": result.header,
                    "lines": list(result.lines), "checked": result.ok is not None,
                    "ok": result.ok, "worst": _finite(result.worst),
                    "verdict": result.verdict,
                    "summary": result.summary,
                    "plan": {"status": plan.status.value, "policy": plan.policy.value,
                             "baseline": plan.baseline.value if plan.baseline else None,
                             "objective": plan.objective,
                             "content_hash": plan.content_hash}})
        if result.ok is False:
            raise result.mismatch()
        return 0
    print(result.header)
    for line in result.lines:
        print(line)
    if result.ok is None:
        return 0
    if not result.ok:
        raise result.mismatch()
    print(result.verdict)
    return 0
