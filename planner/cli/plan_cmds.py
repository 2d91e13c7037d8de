"""``planner plan`` and ``planner compare``: a thin layer over :mod:`planner.solve`.

``plan`` prints the plan as a table (``--json`` for the JSON form, ``--dot FILE`` to
also write Graphviz, ``--dot -`` to print the Graphviz instead of the table).
``compare`` plans one kernel several ways — two ``--target``s (``NAME@HASH``: a kept
revision of a catalog, :meth:`planner.catalog.CatalogRegistry.revision`), two ``--policy``s, or
the optimal plan against ``--baseline``s — or reads saved plans (``--plans A.json
B.json``), and prints them side by side.  A long solve reports its best objective and
bound on stderr while it runs, when stderr is a terminal.

An infeasible plan is printed (with its explanation) and then ends the command with
status 1; in ``compare`` only an infeasible optimum does (an infeasible baseline is a
result).  The solver and the catalogs are imported when a command runs, not when the
parser is built.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from planner.cli.common import (
    DEFAULT_TARGET,
    add_bind_arg,
    add_catalog_dir_arg,
    add_kernel_arg,
    check_output_path,
    infeasible_error,
    kernel_and_bindings,
    positive_float,
    positive_int,
    print_json,
    symbol_bounds,
    write_output,
)
from planner.errors import Diagnostic, PlannerError, SourceLoc
from planner.plan import (
    Baseline,
    MaterializationPlan,
    Policy,
    Status,
    format_plan_table,
    plan_from_json,
    plan_to_dot,
    plan_to_json,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``planner plan`` and ``planner compare``."""
    p = subparsers.add_parser("plan", help="plan a kernel's materialization on a target",
                              description="Plan every live edge of a kernel with CP-SAT.")
    add_kernel_arg(p)
    p.add_argument("--target", default=DEFAULT_TARGET, help=f"target (default {DEFAULT_TARGET})")
    p.add_argument("--policy", default=Policy.DEFAULT.value,
                   choices=[x.value for x in Policy], help="planning policy (S4)")
    p.add_argument("--baseline", choices=[b.value for b in Baseline],
                   help="plan a fixed strategy instead of the optimum")
    _common(p)
    p.add_argument("--json", action="store_true",
                   help="print the plan as JSON (the form 'lower/run --plan' and "
                   "'compare --plans' read) instead of the table")
    p.add_argument("--dot", type=Path, metavar="FILE",
                   help="also write the plan as Graphviz to FILE ('-': print it on stdout "
                   "instead of the table)")
    p.set_defaults(func=cmd_plan)

    c = subparsers.add_parser("compare", help="compare plans side by side",
                              description="Plan a kernel on two targets, under two policies "
                              "or against baselines, or compare saved plans.")
    c.add_argument("kernel", nargs="?", help="an example .py file or name, text or JSON IR")
    c.add_argument("--target", action="append", default=[],
                   help="repeat to compare targets; NAME@HASH is the revision of catalog NAME "
                   "with that content hash (kept by the server in <dir>/.revisions), so "
                   "two of them compare two revisions of one catalog")
    c.add_argument("--policy", action="append", default=[], choices=[x.value for x in Policy],
                   help="repeat to compare policies")
    c.add_argument("--baseline", action="append", default=[],
                   choices=[b.value for b in Baseline],
                   help="compare the optimal plan with this baseline (repeatable)")
    c.add_argument("--plans", nargs="+", type=Path, metavar="PLAN.json",
                   help="compare plans saved with 'planner plan --json'")
    _common(c)
    c.add_argument("--json", action="store_true",
                   help="print the comparison as JSON instead of the side-by-side table")
    c.set_defaults(func=cmd_compare)


def _common(p: argparse.ArgumentParser) -> None:
    add_bind_arg(p)
    p.add_argument("--time-limit", type=positive_float, default=10.0, metavar="S",
                   help="CP-SAT time limit in seconds, > 0 (default 10)")
    p.add_argument("--workers", type=positive_int, default=2, metavar="N",
                   help="CP-SAT search workers, >= 1 (default 2)")
    add_catalog_dir_arg(p)


#: The phase that follows each one ``plan_kernel`` reports (see ``on_phase``).
_NEXT_PHASE = {"": "build", "build": "proofs", "proofs": "model", "model": "solve",
               "solve": "evaluate"}


class LiveStatus:
    """One status line on a terminal's stderr, rewritten in place: the phases done with
    their seconds, the one running, and the search's best and bound while it solves."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.done: list[str] = []
        self.running = _NEXT_PHASE[""]
        self.search = ""
        self.width = 0
        self.show()

    def show(self) -> None:
        text = "  " + " · ".join([*self.done, f"{self.running}…" + self.search])
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = max(self.width, len(text))

    def phase(self, name: str, seconds: float) -> None:
        self.done.append(f"{name} {seconds:.2f} s")
        self.running, self.search = _NEXT_PHASE.get(name, "finishing"), ""
        self.show()

    def progress(self, best: int, bound: int, seconds: float) -> None:
        self.search = f" best {best:,} ns, bound {bound:,} ns ({seconds:.1f} s)"
        self.show()

    def clear(self) -> None:
        self.stream.write("\r" + " " * self.width + "\r")
        self.stream.flush()


def _live_status() -> LiveStatus | None:
    return LiveStatus(sys.stderr) if sys.stderr.isatty() else None


def _plan(args: argparse.Namespace, target: str, policy: str, baseline: str | None
          ) -> MaterializationPlan:
    from planner.catalog import CatalogRegistry
    from planner.solve import plan_kernel

    loaded, bindings = kernel_and_bindings(args)
    registry = CatalogRegistry.from_environment(args.catalog_dir)
    tgt = registry.get(target)
    live = _live_status()
    try:
        return plan_kernel(loaded.kernel, tgt, bindings, policy=policy,
                           baseline=baseline, time_limit_s=args.time_limit,
                           workers=args.workers, progress=live.progress if live else None,
                           bounds=symbol_bounds(args),
                           on_phase=live.phase if live else None)
    finally:
        if live is not None:
            live.clear()


def cmd_plan(args: argparse.Namespace) -> int:
    dot_to_stdout = args.dot is not None and str(args.dot) == "-"
    if dot_to_stdout and args.json:
        raise PlannerError(Diagnostic("--dot - and --json both print on stdout: give --dot "
                                      "a file name"), kind="usage")
    if args.dot is not None:
        check_output_path(args.dot, "--dot")  # before the solve, not after it
    plan = _plan(args, args.target, args.policy, args.baseline)
    if args.dot is not None:
        write_output(args.dot, plan_to_dot(plan), "--dot")
    if args.json:
        print_json(plan_to_json(plan))
    elif not dot_to_stdout:
        print(format_plan_table(plan))
    if plan.status is Status.INFEASIBLE:
        raise infeasible_error(plan, shown=not args.json and not dot_to_stdout)
    return 0


def _load_plan(path: Path) -> MaterializationPlan:
    try:
        return plan_from_json(json.loads(path.read_text()))
    except OSError as exc:
        raise PlannerError(Diagnostic(f"cannot read plan: {exc.strerror}",
                                      SourceLoc(str(path), 0)), kind="not-found") from None
    except json.JSONDecodeError as exc:
        raise PlannerError(Diagnostic(f"invalid JSON: {exc.msg}",
                                      SourceLoc(str(path), exc.lineno, exc.colno)),
                           kind="parse") from None


def _variants(args: argparse.Namespace) -> list[tuple[str, str, str, str | None]]:
    """(label, target, policy, baseline) for every column to plan."""
    targets = args.target or [DEFAULT_TARGET]
    policies = args.policy or [Policy.DEFAULT.value]
    if len(targets) > 1 and len(policies) > 1:
        raise PlannerError(Diagnostic("compare varies one thing at a time: give several "
                                      "--target or several --policy, not both"), kind="usage")
    if len(targets) > 1:
        out = [(t, t, policies[0], None) for t in targets]
    elif len(policies) > 1:
        out = [(p, targets[0], p, None) for p in policies]
    else:
        out = [("optimal", targets[0], policies[0], None)]
    for b in args.baseline:
        out.append((b, targets[0], policies[0], b))
    if len(out) < 2:
        raise PlannerError(Diagnostic("nothing to compare: give two --target, two --policy, "
                                      "a --baseline, or --plans A.json B.json"), kind="usage")
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    if args.plans:
        if args.kernel:
            raise PlannerError(Diagnostic("give either a kernel or --plans, not both"),
                               kind="usage")
        plans = [(p.stem, _load_plan(p)) for p in args.plans]
    elif not args.kernel:
        raise PlannerError(Diagnostic("compare needs a kernel or --plans"), kind="usage")
    else:
        plans = [(label, _plan(args, t, pol, b)) for label, t, pol, b in _variants(args)]
    from planner.solve import compare_plans, comparison_to_json, format_comparison

    comparison = compare_plans(plans)
    if args.json:
        print_json(comparison_to_json(comparison))
    else:
        print(format_comparison(comparison))
    infeasible = [(label, plan) for label, plan in plans
                  if plan.baseline is None and plan.status is Status.INFEASIBLE]
    if infeasible:  # an optimum that does not exist; an infeasible baseline is a result
        raise PlannerError([d for label, plan in infeasible
                            for d in infeasible_error(plan, prefix=f"{label}: ").diagnostics],
                           kind="infeasible")
    return 0
