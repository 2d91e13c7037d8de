"""Benchmark the CP-SAT materialization planner.

Usage::

    python bench/solve.py [--target x86-avx2] [--sizes 100 1000 10000] [--time-limit 10]
                          [--workers 2] [--skip-examples] [--skip-synthetic]

Part 1, per example (its default bindings): the time to plan it optimally and the cost
ratio of each baseline (all-materialize, greedy-fusion, all-virtual) to the optimal plan
(``inf``: the baseline is infeasible on the target).

Part 2, synthetic kernels of about 100, 1,000 and 10,000 edges: a random DAG of
elementwise ops, exps (shared by several consumers) and row reductions with their
broadcasts over 4×16 f32 tiles, inside one parallel region, so register capacity
binds.  Reported: the time to a proven optimum, or the gap when the time limit stops the
search, on ``--workers`` search workers: ``plan s`` is the whole ``plan_kernel`` call
(graph, pricing, proofs, model building, search), ``cp-sat s`` the search alone.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.catalog import CatalogRegistry  # noqa: E402
from planner.ir.core import Kernel  # noqa: E402
from planner.ir.examples import list_examples, load_example  # noqa: E402
from planner.ir.frontend import (  # noqa: E402
    TensorView,
    Tile,
    axis,
    broadcast,
    ceil_div,
    const,
    coord,
    dims,
    exp,
    f32,
    maximum,
    parallel,
    reduce_sum,
    shape,
    tile_kernel,
)
from planner.plan.plan_io import table  # noqa: E402
from planner.solve import Baseline, Status, plan_kernel  # noqa: E402


def _synthetic_dag(edges: int, seed: int) -> list[tuple[str, tuple[int, ...]]]:
    """(op, operand indices) in program order; operands are among the 8 latest values."""
    rng = random.Random(seed)
    ops: list[tuple[str, tuple[int, ...]]] = [("load", ())]
    count = 0
    unread = {0}  # values nobody reads yet: each will get a store edge
    while count + len(unread) < edges:
        pick = rng.random()
        recent = max(0, len(ops) - 8)
        a, b = rng.randrange(recent, len(ops)), rng.randrange(recent, len(ops))
        if pick < 0.15 or len(ops) < 2:
            ops.append(("load", ()))
        elif pick < 0.3:
            ops.append(("exp", (a,)))
        elif pick < 0.4:
            ops.append(("rowsum", (a,)))  # reduce + broadcast: two edges
            count += 1
        elif pick < 0.55:
            ops.append(("max", (a, b)))
        else:
            ops.append(("fma", (a, b)))  # a * b + a: four edges
            count += 2
        count += len(ops[-1][1])
        unread -= set(ops[-1][1])
        unread.add(len(ops) - 1)
    return ops


def synthetic_kernel(edges: int, seed: int = 0) -> Kernel:
    """A random tile DAG with about ``edges`` live def→use edges.

    A value nobody reads is stored to ``Y`` right after it is defined, so live ranges
    stay short, as in real kernels.
    """
    ops = _synthetic_dag(edges, seed)
    last_use = {i: i for i in range(len(ops))}
    for i, (_, args) in enumerate(ops):
        for a in args:
            last_use[a] = i

    @tile_kernel(f"synthetic_{edges}")
    def synthetic(X: TensorView[const(f32), dims("M", "N")],
                  Y: TensorView[f32, dims("M", "N")]) -> None:
        gm = axis("block_m", ceil_div(X.extent(0), 4))
        m, n = axis("m", 4), axis("n", 16)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            vals: list[Tile] = []
            for i, (op, args) in enumerate(ops):
                x = [vals[a] for a in args]
                if op == "load":
                    vals.append(X[coord(r0, (i % 4) * 16), shape(m, n)])
                elif op == "exp":
                    vals.append(exp(x[0]))
                elif op == "rowsum":
                    vals.append(broadcast(reduce_sum(x[0], axis=1), shape(m, n), dims=(0,)))
                elif op == "max":
                    vals.append(maximum(x[0], x[1]))
                else:
                    vals.append(x[0] * x[1] + x[0])
                if last_use[i] == i:
                    Y(coord(r0, 0), shape(m, n)).store(vals[-1])

    return synthetic


def bench_examples(target: str, time_limit: float, workers: int) -> str:
    reg = CatalogRegistry()
    rows = []
    for path in list_examples():
        ex = load_example(path)
        t0 = time.perf_counter()
        best = plan_kernel(ex.kernel, reg.get(target), ex.bindings, time_limit_s=time_limit,
                           workers=workers)
        elapsed = time.perf_counter() - t0
        ratios = []
        for b in Baseline:
            p = plan_kernel(ex.kernel, reg.get(target), ex.bindings, baseline=b,
                            time_limit_s=time_limit, workers=workers)
            ratios.append("inf" if p.status is Status.INFEASIBLE or not best.objective
                          else f"{p.objective / best.objective:.2f}")
        rows.append((ex.name, str(len(best.edges)), best.status.value, f"{elapsed:.2f}",
                     f"{best.objective:,}", *ratios))
    head = ("example", "edges", "status", "plan s", "optimal ns",
            *(f"{b.value} ×" for b in Baseline))
    return table(head, rows, right=(1, 3, 4, 5, 6, 7))


def bench_synthetic(target: str, sizes: list[int], time_limit: float, workers: int) -> str:
    reg = CatalogRegistry()
    rows = []
    for size in sizes:
        kernel = synthetic_kernel(size)
        t0 = time.perf_counter()
        plan = plan_kernel(kernel, reg.get(target), {"M": 64, "N": 64},
                           time_limit_s=time_limit, workers=workers)
        elapsed = time.perf_counter() - t0
        rows.append((str(size), str(len(plan.edges)), plan.status.value, f"{elapsed:.2f}",
                     f"{plan.solve_time_s:.2f}", f"{plan.gap:.3%}", f"{plan.objective:,}"))
    head = ("target edges", "edges", "status", "plan s", "cp-sat s", "gap", "objective ns")
    return table(head, rows, right=(0, 1, 3, 4, 5, 6))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="x86-avx2")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-examples", action="store_true")
    ap.add_argument("--skip-synthetic", action="store_true")
    args = ap.parse_args(argv)
    print(f"target {args.target}, {args.workers} workers, time limit {args.time_limit:g} s\n")
    if not args.skip_examples:
        print(bench_examples(args.target, args.time_limit, args.workers), "\n", flush=True)
    if not args.skip_synthetic:
        print(bench_synthetic(args.target, args.sizes, args.time_limit, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
