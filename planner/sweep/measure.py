"""``--measure``: compile the top K plans on the CPU backend, time them, and compare
the measured order with the predicted one (Spearman's ρ).

Each plan is compiled with :func:`planner.lower.cpu.compile_kernel` (single-threaded, so
the timing is the kernel's and not the pool's) and run on random inputs until at
least ``min_s`` seconds have passed; the figure is the median of the runs.  Points are
timed one after another on the client, never in parallel (they would disturb each
other).  ρ is the Pearson correlation of the two rank vectors, ties given their
average rank, computed here with numpy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from planner.sweep.worker import PointResult

__all__ = ["measure_point", "measure_top", "spearman"]


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks; equal values share their average rank."""
    a = np.asarray(values, dtype=float)
    order = np.argsort(a, kind="stable")
    r = np.empty(len(a))
    r[order] = np.arange(1, len(a) + 1)
    for v in np.unique(a):
        tied = a == v
        r[tied] = r[tied].mean()
    return r


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation of ``x`` and ``y`` (None below 2 points or when one
    side is constant)."""
    if len(x) != len(y) or len(x) < 2:
        return None
    rx, ry = ranks(x), ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denom = float(np.sqrt((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum() / denom) if denom else None


def measure_point(kernel: Any, plan: Any, target: Any, bindings: dict[str, int],
                  min_s: float = 0.05, seed: int = 0) -> float:
    """Median wall time of one run of ``kernel`` under ``plan``, in nanoseconds."""
    from planner.ir.interpreter import random_inputs
    from planner.lower.cpu import compile_kernel

    compiled = compile_kernel(kernel, plan, target, threads=1)
    arrays = random_inputs(kernel, bindings, seed)
    compiled({n: a.copy() for n, a in arrays.items()}, bindings=bindings)  # warm up
    times: list[int] = []
    deadline = time.perf_counter() + min_s
    while len(times) < 5 or time.perf_counter() < deadline:
        fresh = {n: a.copy() for n, a in arrays.items()}
        t0 = time.perf_counter_ns()
        compiled(fresh, bindings=bindings)
        times.append(time.perf_counter_ns() - t0)
        if len(times) >= 1000:
            break
    return float(np.median(times))


def measure_top(ranked: Sequence[PointResult], instance: Callable[[dict], Any],
                targets: dict[str, Any], bindings: dict[str, int], top: int,
                min_s: float = 0.05) -> tuple[dict[int, float], float | None, list[str]]:
    """Time the ``top`` best feasible points whose target runs on the CPU backend.

    Returns ``{task index: measured ns}``, ρ between predicted and measured times, and
    notes (points that could not be measured, and why)."""
    from planner.catalog import Backend
    from planner.plan.plan_io import plan_from_json

    measured: dict[int, float] = {}
    notes: list[str] = []
    runnable = [r for r in ranked if r.feasible and r.plan is not None
                and targets[r.target].backend is Backend.LLVM_CPU]
    skipped = {r.target for r in ranked if r.feasible
               and targets[r.target].backend is not Backend.LLVM_CPU}
    notes += [f"{t}: not measured (only llvm-cpu targets run here)" for t in sorted(skipped)]
    for r in runnable[:top]:
        try:
            measured[r.index] = measure_point(instance(r.config), plan_from_json(r.plan),
                                              targets[r.target], bindings, min_s)
        except Exception as exc:  # one point that does not compile or run: noted
            notes.append(f"point {r.index} {r.config}: not measured: "
                         f"{type(exc).__name__}: {exc}")
    pred = [float(r.predicted_ns or 0) for r in runnable if r.index in measured]
    meas = [measured[r.index] for r in runnable if r.index in measured]
    return measured, spearman(pred, meas), notes
