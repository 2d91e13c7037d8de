"""``planner survey``: the main job on the built-ins — every example on every target.

For each (example, target) pair it verifies the kernel, plans it (which discharges
the z3 proofs), and on targets the backend registry serves
(:func:`planner.lower.backends.find_backend`) runs the plan and checks the result
against the reference interpreter.  One line per pair; exit status 1 when any pair
fails for a reason other than an honest, explained infeasibility.
"""

from __future__ import annotations

import argparse

from planner.cli.common import add_catalog_dir_arg
from planner.errors import PlannerError
from planner.lower.backends import find_backend


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("survey", help="check, plan (and run, where a backend exists) every "
                       "built-in example on every target")
    p.add_argument("--target", action="append", help="only these targets (repeatable)")
    p.add_argument("--example", action="append", help="only these examples (repeatable)")
    p.add_argument("--time-limit", type=float, default=5.0, help="seconds per plan")
    p.add_argument("--no-run", action="store_true", help="plan only; do not compile and run")
    add_catalog_dir_arg(p)
    p.set_defaults(func=cmd_survey)


def cmd_survey(args: argparse.Namespace) -> int:
    from planner.catalog import CatalogRegistry
    from planner.ir.examples import list_examples, load_example

    registry = CatalogRegistry.from_environment(args.catalog_dir)
    targets = args.target or registry.names()
    examples = [load_example(p) for p in list_examples()
                if not args.example or p.stem in args.example]
    print(f"{'example':12} {'target':13} {'plan':11} {'est. time':>12} "
          f"{'V/F/R/M':>9} {'proofs':>8} {'solve':>7}  run")
    failures = 0
    for ex in examples:
        for name in targets:
            line, ok = _survey_one(ex, registry.get(name), args)
            failures += not ok
            print(line, flush=True)
    print(f"{len(examples) * len(targets) - failures} ok, {failures} failed")
    return 1 if failures else 0


def _survey_one(ex, target, args: argparse.Namespace) -> tuple[str, bool]:
    from planner.ir.verify import verify
    from planner.solve import Decision, plan_kernel

    head = f"{ex.name:12} {target.name:13}"
    try:
        verify(ex.kernel, ex.bindings)
        plan = plan_kernel(ex.kernel, target, ex.bindings, time_limit_s=args.time_limit)
    except PlannerError as exc:
        first = exc.diagnostics[0].message if exc.diagnostics else str(exc)
        return f"{head} error: {first}", False
    counts = [sum(e.decision is d for e in plan.edges) for d in Decision]
    proved = sum(p.status == "proved" for p in plan.proofs)
    status = plan.status.value
    if status == "infeasible":
        why = plan.explanation[0] if plan.explanation else ""
        return f"{head} {'infeasible':11} {'':>12} {'':>9} {proved:>3}/{len(plan.proofs):<4} " \
               f"{plan.solve_time_s:6.2f}s  {why}", True
    row = (f"{head} {status:11} {plan.objective:>9,} ns {'/'.join(map(str, counts)):>9} "
           f"{proved:>3}/{len(plan.proofs):<4} {plan.solve_time_s:6.2f}s")
    backend = find_backend(target)
    if args.no_run or backend is None:
        return f"{row}  -", True
    unavailable = backend.unavailable(target)
    if unavailable:
        return f"{row}  skipped: {unavailable}", True
    try:
        result = backend.run(ex.kernel, plan, target, ex.bindings)
    except PlannerError as exc:
        first = exc.diagnostics[0].message if exc.diagnostics else str(exc)
        return f"{row}  error: {(first.splitlines() or [''])[0]}", False
    return f"{row}  {result.summary}", bool(result.ok)
