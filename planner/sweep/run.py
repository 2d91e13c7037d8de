"""The sweep driver: every point × target × policy, planned once, ranked.

:func:`sweep_tasks` builds each configuration's instance on the client (running the
example's ``kernel(**config)``) and serializes it to the JSON IR; :func:`run_sweep`
answers what the plan cache knows, submits one task per remaining point to the
executor, and collects results as they complete (polling, so a stop request, a Ctrl-C
or a cancelled HTTP job ends the wait within one poll interval).  Pending tasks are
cancelled on a stop; the finished points stay in the result (``interrupted``).  A task
that raised on its worker (a lost worker, an unpicklable result) becomes an ``error``
result for that point only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.errors import Diagnostic, PlannerError
from planner.sweep.cache import PlanCache
from planner.sweep.execute import Executor
from planner.sweep.space import Space
from planner.sweep.worker import ERROR, PointResult, PointTask, error_result, plan_point

__all__ = ["SweepResult", "SweepSpec", "rank", "run_sweep", "sweep_tasks"]

POLL_S = 0.05


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep: an example (name or path), its space (restricted), targets, policies."""

    kernel: str
    targets: tuple[str, ...] = ("x86-avx2",)
    policies: tuple[str, ...] = ("default",)
    space: Mapping[str, Sequence[int | str]] = field(default_factory=dict)  # overrides
    bindings: Mapping[str, int] = field(default_factory=dict)
    time_limit_s: float = 10.0
    catalog_dirs: tuple[str, ...] = ()


@dataclass
class SweepResult:
    kernel: str
    space: str  # Space.describe() of the swept space
    total: int
    results: list[PointResult] = field(default_factory=list)
    interrupted: bool = False
    elapsed_s: float = 0.0
    executor: str = ""
    capacities: dict[str, int] = field(default_factory=dict)  # resource -> bytes
    measured: dict[int, float] = field(default_factory=dict)  # task index -> ns
    rho: float | None = None  # Spearman ρ, predicted vs measured

    def ranked(self) -> list[PointResult]:
        return rank(self.results)

    def counts(self) -> dict[str, int]:
        feasible = sum(r.feasible for r in self.results)
        failed = sum(r.status == ERROR for r in self.results)
        return {"done": len(self.results), "total": self.total, "feasible": feasible,
                "infeasible": len(self.results) - feasible - failed, "failed": failed,
                "cached": sum(r.cached for r in self.results)}

    def to_json(self) -> dict[str, Any]:
        rows = []
        for r in self.ranked():
            row = r.to_json()
            if r.index in self.measured:
                row["measured_ns"] = self.measured[r.index]
            rows.append(row)
        return {"kernel": self.kernel, "space": self.space, **self.counts(),
                "interrupted": self.interrupted, "elapsed_s": round(self.elapsed_s, 3),
                "executor": self.executor, "capacities": self.capacities,
                "spearman_rho": self.rho, "results": rows}


def rank(results: Iterable[PointResult]) -> list[PointResult]:
    """Feasible points by predicted time, then infeasible ones, then errors (each in
    task order among equals)."""
    def key(r: PointResult) -> tuple[int, int, int]:
        group = 0 if r.feasible else (2 if r.status == ERROR else 1)
        return group, r.predicted_ns if r.predicted_ns is not None else 0, r.index
    return sorted(results, key=key)


@dataclass(frozen=True)
class _Prepared:
    tasks: list[PointTask]
    kernels: dict[int, Any]  # task index -> the instance Kernel (for the cache key)
    targets: dict[str, Any]
    example: Any
    space: Space


def sweep_tasks(spec: SweepSpec) -> _Prepared:
    """The tasks of ``spec``: one per configuration × target × policy, in that order."""
    from planner.catalog import CatalogRegistry
    from planner.ir.json_form import kernel_to_json
    from planner.ir.load import load_kernel

    loaded = load_kernel(spec.kernel)
    example = loaded.example
    if example is None or example.space is None:
        raise PlannerError(Diagnostic(
            f"{spec.kernel} declares no configuration space (an example .py with SPACE; "
            "see planner/ir/examples.py)"), kind="usage")
    space = example.space.restrict(spec.space)
    for policy in spec.policies:
        _policy(policy)
    registry = CatalogRegistry.from_environment(spec.catalog_dirs)
    targets = {t: registry.get(t) for t in dict.fromkeys(spec.targets)}
    bindings = {**dict(example.bindings), **dict(spec.bindings)}
    tasks: list[PointTask] = []
    kernels: dict[int, Any] = {}
    for config in space.points():
        kernel = example.instance(config)
        kjson = kernel_to_json(kernel)
        for target in targets:
            for policy in spec.policies:
                i = len(tasks)
                tasks.append(PointTask(i, dict(config), target, policy, kjson, bindings,
                                       spec.time_limit_s, tuple(spec.catalog_dirs)))
                kernels[i] = kernel
    return _Prepared(tasks, kernels, targets, example, space)


Progress = Callable[[int, int, float], None]


def run_sweep(spec: SweepSpec, executor: Executor, *, cache: PlanCache | None = None,
              on_result: Callable[[PointResult], None] | None = None,
              progress: Progress | None = None, stop: threading.Event | None = None,
              prepared: _Prepared | None = None) -> SweepResult:
    """Plan every task of ``spec`` on ``executor``; see the module docstring.

    ``on_result`` sees each result as it arrives, ``progress(done, total, elapsed_s)``
    after each; ``stop`` (or a KeyboardInterrupt) cancels what has not finished and
    returns the finished points with ``interrupted`` set.
    """
    from planner.solve.planner import content_hash

    prep = prepared or sweep_tasks(spec)
    start = time.perf_counter()
    out = SweepResult(spec.kernel, prep.space.describe(), len(prep.tasks),
                      executor=executor.name, capacities=_capacities(prep.targets))

    def record(r: PointResult) -> None:
        out.results.append(r)
        if on_result is not None:
            on_result(r)
        if progress is not None:
            progress(len(out.results), out.total, time.perf_counter() - start)

    keys = {t.index: content_hash(prep.kernels[t.index], prep.targets[t.target],
                                  t.bindings, _policy(t.policy), None) for t in prep.tasks}
    pending: dict[Any, PointTask] = {}
    try:
        for task in prep.tasks:
            hit = cache.load(keys[task.index]) if cache is not None else None
            if hit is not None:
                from planner.sweep.worker import summarize

                record(summarize(task.index, task.config, task.target, task.policy, hit,
                                 0.0, True))
            else:
                pending[executor.submit(plan_point, task)] = task
            if stop is not None and stop.is_set():
                raise _Stopped
        while pending:
            if stop is not None and stop.is_set():
                raise _Stopped
            done = [f for f in pending if f.done()]
            if not done:
                time.sleep(POLL_S)
                continue
            for f in done:
                task = pending.pop(f)
                r = _result_of(f, task)
                if cache is not None and r.plan is not None:
                    cache.store(keys[task.index], r.plan)
                record(r)
    except (KeyboardInterrupt, _Stopped):
        out.interrupted = True
        executor.cancel(list(pending))
    out.elapsed_s = time.perf_counter() - start
    out.results.sort(key=lambda r: r.index)
    return out


class _Stopped(Exception):
    """A stop request seen by the driver."""


def _result_of(future: Any, task: PointTask) -> PointResult:
    try:
        return future.result()
    except Exception as exc:  # the task itself failed on its worker: that point only
        return error_result(task, exc)


def _policy(name: str) -> Any:
    from planner.plan.decisions import Policy

    try:
        return Policy(name)
    except ValueError:
        known = ", ".join(p.value for p in Policy)
        raise PlannerError(Diagnostic(f"unknown policy {name!r} (expected one of: {known})"),
                           kind="usage") from None


def _capacities(targets: Mapping[str, Any]) -> dict[str, int]:
    """Bounded per-instance capacities of the targets' resources (for the plot's lines)."""
    caps: dict[str, int] = {}
    for tgt in targets.values():
        for res in tgt.resources:
            if res.capacity:
                caps.setdefault(res.name, res.capacity)
    return caps
