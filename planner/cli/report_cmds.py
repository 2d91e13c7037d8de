"""``planner report``: a kernel's plan as one self-contained HTML page.

The page (:func:`planner.plan.report.plan_report_html`) holds the plan table, the
dataflow graph with its decisions, a memory-over-time chart per resource and the
proofs; it loads nothing from the network.  An infeasible plan is written too (with
its explanation) and then ends the command with status 1.  The solver is imported when
the command runs, not when the parser is built.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from planner.cli.common import (
    DEFAULT_TARGET,
    add_bind_arg,
    add_catalog_dir_arg,
    add_json_arg,
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
from planner.errors import Diagnostic, PlannerError
from planner.plan import Policy


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``planner report``."""
    p = subparsers.add_parser("report", help="write a kernel's plan as one HTML page",
                              description="Plan a kernel and write the plan table, the "
                              "dataflow graph, memory over time and the proofs as one "
                              "self-contained HTML page.")
    add_kernel_arg(p)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE",
                   help="the HTML file to write ('-': stdout)")
    p.add_argument("--target", default=DEFAULT_TARGET, help=f"target (default {DEFAULT_TARGET})")
    p.add_argument("--policy", default=Policy.DEFAULT.value, choices=[x.value for x in Policy],
                   help="planning policy (S4)")
    add_bind_arg(p)
    p.add_argument("--time-limit", type=positive_float, default=10.0, metavar="S",
                   help="CP-SAT time limit in seconds, > 0 (default 10)")
    p.add_argument("--workers", type=positive_int, default=2, metavar="N",
                   help="CP-SAT search workers, >= 1 (default 2)")
    add_catalog_dir_arg(p)
    add_json_arg(p, "what was written (file, status, edges, resources, proofs)")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from planner.catalog import CatalogRegistry
    from planner.ir.printer import print_kernel
    from planner.plan import Status
    from planner.plan.report import plan_report_html
    from planner.solve import plan_kernel

    to_stdout = str(args.output) == "-"
    if to_stdout and args.json:
        raise PlannerError(Diagnostic("-o - and --json both print on stdout: give -o a file "
                                      "name"), kind="usage")
    check_output_path(args.output, "--output")  # before the solve, not after it
    loaded, bindings = kernel_and_bindings(args)
    registry = CatalogRegistry.from_environment(args.catalog_dir)
    plan = plan_kernel(loaded.kernel, registry.get(args.target), bindings, policy=args.policy,
                       time_limit_s=args.time_limit, workers=args.workers,
                       bounds=symbol_bounds(args))
    write_output(args.output, plan_report_html(plan, print_kernel(loaded.kernel)), "--output")
    resources = len({b.resource for b in plan.buffers})
    if args.json:
        print_json({"file": str(args.output), "kernel": plan.kernel, "target": plan.target,
                    "status": plan.status.value, "edges": len(plan.edges),
                    "resources": resources, "proofs": len(plan.proofs)})
    elif not to_stdout:
        print(f"wrote {args.output}: {plan.kernel} on {plan.target}, {plan.status.value}, "
              f"{len(plan.edges)} edges, {resources} resources, {len(plan.proofs)} proofs")
    if plan.status is Status.INFEASIBLE:
        raise infeasible_error(plan)
    return 0
