"""Benchmark config sweeps.

Usage::

    python bench/sweep.py [--points 200] [--time-limit 5] [--top 10] [--size 256]
                          [--skip-throughput] [--skip-measure]

Part 1, throughput: the first ``--points`` tasks of the manual GEMM's space on apple-m2
(tile sizes × block_k × window × resource), planned without the plan cache on a local
process pool of 1 and of 2 workers and on a 2-worker ``dask.distributed`` LocalCluster
(separate worker processes, TCP on 127.0.0.1).  Reported: points per second over the
whole sweep, pool or cluster start-up excluded; the three runs must agree point by point.

Part 2, prediction quality: the GEMM space on x86-avx2 with M = N = K = ``--size``,
then the ``--top`` best predicted points compiled with llvmlite and timed (single
thread, median of repeated runs); reported: Spearman's ρ between predicted and measured
times, and the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.sweep.execute import DaskExecutor, LocalPool  # noqa: E402
from planner.sweep.measure import measure_top  # noqa: E402
from planner.sweep.render import sweep_table  # noqa: E402
from planner.sweep.run import SweepSpec, run_sweep, sweep_tasks  # noqa: E402


def throughput(points: int, time_limit: float) -> None:
    spec = SweepSpec("manual_gemm", ("apple-m2",), time_limit_s=time_limit)
    prepared = sweep_tasks(spec)
    prepared = dataclasses.replace(prepared, tasks=prepared.tasks[:points])
    n = len(prepared.tasks)
    print(f"throughput: {n} points of manual_gemm on apple-m2 (no plan cache)")
    runs = {}
    for workers in (1, 2):
        pool = LocalPool(workers)
        try:
            pool.submit(abs, -1).result()  # the pool is up
            runs[f"local pool, {workers} worker{'s' if workers > 1 else ''}"] = run_sweep(
                spec, pool, prepared=prepared)
        finally:
            pool.close()
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.submit(abs, -1).result()
        runs["dask LocalCluster, 2 workers"] = run_sweep(spec, DaskExecutor(client),
                                                         prepared=prepared)
    first = None
    for label, result in runs.items():
        c = result.counts()
        figures = [r.figures() for r in result.results]
        same = "" if first is None or figures == first else "  (DIFFERS from the first run)"
        first = first or figures
        print(f"  {label:<30} {n / result.elapsed_s:6.2f} points/s  ({result.elapsed_s:.1f} s; "
              f"{c['feasible']} feasible, {c['infeasible']} infeasible, {c['failed']} failed)"
              f"{same}")


def prediction(size: int, top: int, time_limit: float) -> None:
    bindings = {"M": size, "N": size, "K": size}
    spec = SweepSpec("gemm", ("x86-avx2",), bindings=bindings, time_limit_s=time_limit)
    prepared = sweep_tasks(spec)
    pool = LocalPool(2)
    try:
        result = run_sweep(spec, pool, prepared=prepared)
    finally:
        pool.close()
    result.measured, result.rho, notes = measure_top(
        result.ranked(), prepared.example.instance, prepared.targets,
        dict(prepared.tasks[0].bindings), top, min_s=0.2)
    print(f"\nprediction: gemm on x86-avx2, M = N = K = {size}, top {top} of "
          f"{len(result.results)} points")
    print(sweep_table(result, top))
    for note in notes:
        print("note:", note)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-measure", action="store_true")
    args = ap.parse_args()
    start = time.perf_counter()
    if not args.skip_throughput:
        throughput(args.points, args.time_limit)
    if not args.skip_measure:
        prediction(args.size, args.top, args.time_limit)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
