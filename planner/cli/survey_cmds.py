"""``planner survey``: the main job on the built-ins — every example on every target.

For each (example, target) pair it verifies the kernel, plans it (which discharges
the z3 proofs), and on targets the backend registry serves
(:func:`planner.lower.backends.find_backend`) runs the plan and checks the result
against the reference interpreter.  One line per pair (``--json``: one document with a
record per pair); exit status 1 when any pair fails for a reason other than an honest,
explained infeasibility.  An unknown ``--example`` is a usage error (exit 2) naming the
built-in examples; an unknown ``--target`` is refused before anything is planned.
"""

from __future__ import annotations

import argparse
from typing import Any

from planner.cli.common import add_catalog_dir_arg, add_json_arg, positive_float, print_json
from planner.errors import PlannerError, error


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("survey", help="check, plan (and run, where a backend exists) every "
                       "built-in example on every target")
    p.add_argument("--target", action="append", help="only these targets (repeatable)")
    p.add_argument("--example", action="append", help="only these examples (repeatable)")
    p.add_argument("--time-limit", type=positive_float, default=5.0, metavar="S",
                   help="CP-SAT seconds per plan, > 0 (default 5)")
    p.add_argument("--no-run", action="store_true", help="plan only; do not compile and run")
    add_catalog_dir_arg(p)
    add_json_arg(p, "the survey ({passed, failed, results: [{example, target, ok, status, "
                 "objective_ns, decisions, proofs_proved, proofs, solve_time_s, run, "
                 "error}]})")
    p.set_defaults(func=cmd_survey)


def cmd_survey(args: argparse.Namespace) -> int:
    from planner.catalog import CatalogRegistry
    from planner.ir.examples import list_examples, load_example

    registry = CatalogRegistry.from_environment(args.catalog_dir)
    targets = [registry.get(name) for name in args.target or registry.names()]
    paths = list_examples()
    known = [p.stem for p in paths]
    unknown = [name for name in args.example or [] if name not in known]
    if unknown:
        raise error(f"unknown example{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(map(repr, unknown))} (--example): the built-in examples "
                    f"are {', '.join(known)}", kind="usage")
    examples = [load_example(p) for p in paths if not args.example or p.stem in args.example]
    if not args.json:
        print(f"{'example':12} {'target':13} {'plan':11} {'est. time':>12} "
              f"{'V/F/R/M':>9} {'proofs':>8} {'solve':>7}  run")
    records: list[dict[str, Any]] = []
    for ex in examples:
        for target in targets:
            line, _, record = _survey_one(ex, target, args)
            records.append(record)
            if not args.json:
                print(line, flush=True)
    counts = {k: sum(r["outcome"] == k for r in records) for k in OUTCOMES}
    failures = counts["failed"]
    if args.json:
        print_json({"passed": len(records) - failures, "failed": failures, "counts": counts,
                    "results": records})
    else:
        print(", ".join(f"{n} {OUTCOMES[k]}" for k, n in counts.items()))
    # nothing planned at all (no example, no catalog) is a failure, not "0 ok"
    return 1 if failures or not counts["ran"] + counts["planned"] else 0


#: How one (example, target) pair ended, as the summary line counts them.
OUTCOMES = {"ran": "ran and matched", "planned": "planned, not run (no backend, or the host "
            "cannot run the target)", "infeasible": "infeasible", "failed": "failed"}


def _survey_one(ex: Any, target: Any, args: argparse.Namespace
                ) -> tuple[str, bool, dict[str, Any]]:
    """The survey's line for one pair, whether it passed, and its ``--json`` record."""
    from planner.ir.verify import verify
    from planner.lower.backends import find_backend
    from planner.solve import Decision, plan_kernel

    head = f"{ex.name:12} {target.name:13}"
    record: dict[str, Any] = {"example": ex.name, "target": target.name, "ok": False,
                              "outcome": "failed", "status": None, "objective_ns": None,
                              "decisions": None,
                              "proofs_proved": None, "proofs": None, "solve_time_s": None,
                              "explanation": [], "run": None, "error": None}
    try:
        verify(ex.kernel, ex.bindings)
        plan = plan_kernel(ex.kernel, target, ex.bindings, time_limit_s=args.time_limit)
    except PlannerError as exc:
        first = exc.diagnostics[0].message if exc.diagnostics else str(exc)
        record["error"] = first
        return f"{head} error: {first}", False, record
    counts = [sum(e.decision is d for e in plan.edges) for d in Decision]
    proved = sum(p.status == "proved" for p in plan.proofs)
    status = plan.status.value
    record.update(status=status, proofs_proved=proved, proofs=len(plan.proofs),
                  solve_time_s=plan.solve_time_s, explanation=list(plan.explanation))
    if status == "infeasible":
        why = plan.explanation[0] if plan.explanation else ""
        record.update(ok=True, outcome="infeasible")
        return f"{head} {'infeasible':11} {'':>12} {'':>9} {proved:>3}/{len(plan.proofs):<4} " \
               f"{plan.solve_time_s:6.2f}s  {why}", True, record
    record.update(objective_ns=plan.objective,
                  decisions={d.value: n for d, n in zip(Decision, counts, strict=True)})
    row = (f"{head} {status:11} {plan.objective:>9,} ns {'/'.join(map(str, counts)):>9} "
           f"{proved:>3}/{len(plan.proofs):<4} {plan.solve_time_s:6.2f}s")
    backend = find_backend(target)
    if args.no_run or backend is None:
        record.update(ok=True, outcome="planned",
                      run="not run" if args.no_run else "no backend")
        return f"{row}  -", True, record
    unavailable = backend.unavailable(target)
    if unavailable:
        record.update(ok=True, outcome="planned", run=f"skipped: {unavailable}")
        return f"{row}  skipped: {unavailable}", True, record
    try:
        result = backend.run(ex.kernel, plan, target, ex.bindings)
    except PlannerError as exc:
        first = exc.diagnostics[0].message if exc.diagnostics else str(exc)
        record.update(run="error", error=first)
        return f"{row}  error: {(first.splitlines() or [''])[0]}", False, record
    record.update(ok=bool(result.ok), outcome="ran" if result.ok else "failed",
                  run=result.summary)
    return f"{row}  {result.summary}", bool(result.ok), record
