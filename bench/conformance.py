"""Conformance report: do the lowered programs allocate exactly the plan's buffers?

The matrix of ``tests/solve/test_plan_matches_lowering.py::
test_lowered_buffers_are_exactly_the_plans`` (every built-in example x target x {optimal,
each baseline} x capacity pressure: the target's shared-class resource as shipped and
shrunk to 50 % and 25 % of the unpressured plan's own peak in it), printed as a table:
cells planned, infeasible, compared, and those where the plan's buffers (name, resource,
bytes, versions), the loop program's buffers, their peaks per resource and, on apple-m2,
the Metal emitter's threadgroup arena differ.  The test asserts that none differ; this
prints the figures for a closing note.  Run from the repository root:
``python bench/conformance.py [-j N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, f"{REPO}/tests/solve", f"{REPO}/tests"]


def _cell(args: tuple[str, str]) -> list[tuple[str, str, str, int | None, str, list[str]]]:
    """Every plan x pressure of one example on one target: (…, outcome, problems)."""
    import test_plan_matches_lowering as conf
    from planning_support import target

    from planner.solve import Status
    name, tn = args
    shared = target(tn).resources_for_class("shared")[0].name
    out = []
    for baseline in conf.PLANS:
        plan = conf.planned(name, tn, baseline)
        peak = next((p.peak_bytes for p in plan.peaks if p.resource == shared), 0)
        for pct in conf.PRESSURES:
            if pct is not None and (plan.status is Status.INFEASIBLE or not peak):
                continue
            cap = None if pct is None else peak * pct // 100
            status = conf.planned(name, tn, baseline, cap).status
            problems = conf.conformance(name, tn, baseline, cap)
            out.append((name, tn, baseline or "optimal", cap,
                        "infeasible" if status is Status.INFEASIBLE else "compared", problems))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-j", "--jobs", type=int, default=2)
    args = ap.parse_args()
    import test_plan_matches_lowering as conf
    cells = [(n, t) for n in conf.EXAMPLES for t in conf.CONFORMANCE_TARGETS]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as ex:
        rows = [r for batch in ex.map(_cell, cells) for r in batch]
    seconds = time.perf_counter() - t0
    print(f"matrix: {len(conf.EXAMPLES)} examples x {len(conf.CONFORMANCE_TARGETS)} targets "
          f"({', '.join(conf.CONFORMANCE_TARGETS)}) x {len(conf.PLANS)} plans x "
          f"{len(conf.PRESSURES)} capacities (pressure only where the unpressured plan is "
          "feasible and holds shared bytes)")
    print(f"{'target':<12} {'planned':>8} {'infeasible':>11} {'compared':>9} {'differ':>7}")
    for tn in conf.CONFORMANCE_TARGETS:
        mine = [r for r in rows if r[1] == tn]
        compared = [r for r in mine if r[4] == "compared"]
        print(f"{tn:<12} {len(mine):>8} {len(mine) - len(compared):>11} {len(compared):>9} "
              f"{sum(1 for r in compared if r[5]):>7}")
    differ = [r for r in rows if r[5]]
    print(f"total: {len(rows)} planned, {sum(r[4] == 'compared' for r in rows)} compared, "
          f"{len(differ)} differ ({seconds:.1f} s)")
    for r in differ:
        print("  " + "\n  ".join(r[5]))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
