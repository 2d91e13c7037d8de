"""Benchmark the CP-SAT materialization planner.

Usage::

    python bench/solve.py [--target x86-avx2] [--sizes 100 1000 10000] [--time-limit 10]
                          [--workers 2] [--chain 100 200 400] [--skip-examples]
                          [--skip-synthetic] [--skip-chain] [--repeat 1]

Part 1, per example (its default bindings): the time to plan it optimally and the cost
ratio of each baseline (all-materialize, greedy-fusion, all-virtual) to the optimal plan
(``inf``: the baseline is infeasible on the target).

Part 2, synthetic kernels of about 100, 1,000 and 10,000 edges: a random DAG of
elementwise ops, exps (shared by several consumers) and row reductions with their
broadcasts over 4×16 f32 tiles, inside one parallel region, so register capacity
binds.  Reported: the time to a proven optimum, or the gap when the time limit stops the
search (against ``bound ns``: the solver's bound, or the capacity-free relaxation where
that is higher, or from 5,000 edges, where the time limit leaves room for it, the LP
relaxation of :mod:`planner.solve.lp`), on ``--workers`` search workers: ``plan s`` is
the whole ``plan_kernel`` call
(graph, pricing, proofs, model building, search, evaluation), which ``time_limit`` bounds
(``/ limit``: its share of the limit), ``cp-sat s`` the search alone (tie-break
included; from 5,000 edges the windows' searches of :mod:`planner.solve.neighbourhoods`
and any whole-model search after them), ``model size`` the estimate of
:func:`planner.solve.budget.estimate_model_size`,
and the seconds of the plan's phases (building the priced problem, the CP-SAT model, the
search, the reference evaluation).

Part 3, the row softmax with ``N`` chained ``exp`` between its exp and its sum (the
issue's "400 chained exps"), each planned in a fresh process: the whole call's wall time,
its status, the process's peak resident memory (CP-SAT's included), and its phases.

``--repeat N`` plans every synthetic graph and chain ``N`` times (the machine is shared
and timings are noisy): ``plan s`` is then the median with the range, ``status`` counts
each status seen, ``gap`` is the largest, and the other columns are the median run's.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import random
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.catalog import CatalogRegistry  # noqa: E402
from planner.errors import PlannerError  # noqa: E402
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
    reduce_max,
    reduce_sum,
    shape,
    tile_kernel,
)
from planner.plan.plan_io import table  # noqa: E402
from planner.solve import Baseline, Status, plan_kernel  # noqa: E402
from planner.solve.budget import estimate_model_size  # noqa: E402


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


def softmax_chain(n_exp: int) -> Kernel:
    """Row softmax over 4-row blocks with ``n_exp`` more ``exp`` after its own."""

    @tile_kernel(f"softmax_chain_{n_exp}")
    def softmax_chain(X: TensorView[const(f32), dims("M", "N")],
                      Y: TensorView[f32, dims("M", "N")]) -> None:
        gm = axis("block_m", ceil_div(X.extent(0), 4))
        m, n = axis("m", 4), axis("n", X.extent(1))
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            x = X[coord(r0, 0), shape(m, n)]
            e = exp(x - broadcast(reduce_max(x, axis=1), shape(m, n), dims=(0,)))
            for _ in range(n_exp):
                e = exp(e)
            s = reduce_sum(e, axis=1)
            Y(coord(r0, 0), shape(m, n)).store(e / broadcast(s, shape(m, n), dims=(0,)))

    return softmax_chain


CHAIN_BINDINGS = {"M": 100, "N": 70}


def _phases(plan: object) -> str:
    """``build/model/solve/evaluate`` seconds of a plan (proofs are in the whole call)."""
    spent = dict(getattr(plan, "phases", ()))
    return "/".join(f"{spent.get(p, 0.0):.2f}" for p in ("build", "model", "solve", "evaluate"))


def _plan_chain(target: str, n_exp: int, time_limit: float, workers: int
                ) -> tuple[int, str, float, float, float, str]:
    kernel = softmax_chain(n_exp)
    t0 = time.perf_counter()
    plan = plan_kernel(kernel, CatalogRegistry().get(target), CHAIN_BINDINGS,
                       time_limit_s=time_limit, workers=workers)
    elapsed = time.perf_counter() - t0
    return (len(plan.edges), plan.status.value, plan.gap, elapsed, _peak_rss_mib(),
            _phases(plan))


def _peak_rss_mib() -> float:
    """This process's peak resident memory (``VmHWM``: unlike ``ru_maxrss`` it does not
    carry over the forking parent's peak across ``exec``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _median_run(runs: list[tuple[object, ...]], status_at: int, gap_at: int,
                elapsed_at: int) -> tuple[tuple[object, ...], str, float, str]:
    """Of repeated runs (tuples): the median run by wall time, every status seen with its
    count, the largest gap, and the wall time as ``median`` or ``median [min-max]``."""
    times = sorted(float(r[elapsed_at]) for r in runs)  # type: ignore[arg-type]
    median = statistics.median(times)
    run = min(runs, key=lambda r: abs(float(r[elapsed_at]) - median))  # type: ignore[arg-type]
    seen: dict[str, int] = {}
    for r in runs:
        seen[str(r[status_at])] = seen.get(str(r[status_at]), 0) + 1
    status = " ".join(s if len(runs) == 1 else f"{s}×{k}" for s, k in seen.items())
    gap = max(float(r[gap_at]) for r in runs)  # type: ignore[arg-type]
    wall = f"{median:.2f}" if len(runs) == 1 else f"{median:.2f} [{times[0]:.2f}-{times[-1]:.2f}]"
    return run, status, gap, wall


def bench_chain(target: str, sizes: list[int], time_limit: float, workers: int,
                repeat: int = 1) -> str:
    rows = []
    for n_exp in sizes:
        spawn = multiprocessing.get_context("spawn")  # a fresh process: its own peak RSS
        runs = []
        for _ in range(max(1, repeat)):
            with concurrent.futures.ProcessPoolExecutor(max_workers=1,
                                                        mp_context=spawn) as pool:
                runs.append(pool.submit(_plan_chain, target, n_exp, time_limit,
                                        workers).result())
        run, status, gap, wall = _median_run(runs, 1, 2, 3)
        edges, _, _, elapsed, _, spent = run
        size = estimate_model_size(softmax_chain(n_exp), CHAIN_BINDINGS).figure
        rows.append((str(n_exp), str(edges), f"{size:,}", status, f"{gap:.3%}",
                     wall, f"{float(elapsed) / time_limit:.2f}",  # type: ignore[arg-type]
                     f"{max(float(r[4]) for r in runs):.0f}", spent))  # type: ignore[arg-type]
    head = ("chained exps", "edges", "model size", "status", "gap", "plan s", "/ limit",
            "peak RSS MiB", "build/model/solve/evaluate s")
    return table(head, rows, right=(0, 1, 2, 4, 5, 6, 7))


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


def bench_synthetic(target: str, sizes: list[int], time_limit: float, workers: int,
                    repeat: int = 1) -> str:
    reg = CatalogRegistry()
    rows = []
    for size in sizes:
        kernel = synthetic_kernel(size)
        estimate = estimate_model_size(kernel, {"M": 64, "N": 64}).figure
        runs: list[tuple[object, ...]] = []
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            try:
                plan = plan_kernel(kernel, reg.get(target), {"M": 64, "N": 64},
                                   time_limit_s=time_limit, workers=workers)
            except PlannerError as exc:  # the limit passed with no plan at all
                runs.append((None, exc.kind or "error", 0.0, time.perf_counter() - t0))
                continue
            runs.append((plan, plan.status.value, plan.gap, time.perf_counter() - t0))
        run, status, gap, wall = _median_run(runs, 1, 2, 3)
        plan, elapsed = run[0], float(run[3])  # type: ignore[arg-type]
        if plan is None:
            rows.append((str(size), "-", f"{estimate:,}", status, wall,
                         f"{elapsed / time_limit:.2f}", "-", "-", "-", "-", "-"))
            continue
        rows.append((str(size), str(len(plan.edges)), f"{estimate:,}", status,  # type: ignore[attr-defined]
                     wall, f"{elapsed / time_limit:.2f}",
                     f"{plan.solve_time_s:.2f}", f"{gap:.3%}", f"{plan.objective:,}",  # type: ignore[attr-defined]
                     f"{plan.bound:,}", _phases(plan)))  # type: ignore[attr-defined]
    head = ("target edges", "edges", "model size", "status", "plan s", "/ limit", "cp-sat s",
            "gap", "objective ns", "bound ns", "build/model/solve/evaluate s")
    return table(head, rows, right=(0, 1, 2, 4, 5, 6, 7, 8, 9))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="x86-avx2")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-examples", action="store_true")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--chain", type=int, nargs="+", default=[100, 200, 400])
    ap.add_argument("--skip-chain", action="store_true")
    ap.add_argument("--repeat", type=int, default=1,
                    help="plan each synthetic graph and chain N times: median wall time "
                         "and range, every status seen, the largest gap")
    args = ap.parse_args(argv)
    print(f"target {args.target}, {args.workers} workers, time limit {args.time_limit:g} s\n")
    if not args.skip_examples:
        print(bench_examples(args.target, args.time_limit, args.workers), "\n", flush=True)
    if not args.skip_synthetic:
        print(bench_synthetic(args.target, args.sizes, args.time_limit, args.workers,
                              args.repeat), "\n", flush=True)
    if not args.skip_chain:
        print(bench_chain(args.target, args.chain, args.time_limit, args.workers,
                          args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
