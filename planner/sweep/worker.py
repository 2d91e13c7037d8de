"""What one sweep task does, on whichever process or Dask worker runs it.

A task carries the instance's JSON IR (never Python: a worker needs only ``planner``
installed, not the example file), the target's name, the policy, the bindings and the
time limit.  :func:`plan_point` parses, verifies and plans it with
:func:`planner.solve.planner.plan_kernel` (one CP-SAT worker: the parallelism is across
points) and returns a :class:`PointResult` that carries the plan's JSON; any failure of
the point becomes a result with status ``error`` rather than an exception, so one bad
point never stops a sweep.  :func:`summarize` turns a plan (fresh or from the cache)
into the figures the table shows, so a cache hit and a fresh plan read the same.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from planner.sweep.space import Config

__all__ = ["PointResult", "PointTask", "plan_point", "summarize"]

ERROR = "error"
FEASIBLE_STATUSES = ("optimal", "feasible")


@dataclass(frozen=True)
class PointTask:
    """One point × target × policy, as sent to a worker."""

    index: int
    config: Config
    target: str
    policy: str
    kernel_json: dict[str, Any]
    bindings: dict[str, int]
    time_limit_s: float
    catalog_dirs: tuple[str, ...] = ()


@dataclass(frozen=True)
class PointResult:
    """The figures of one planned point (``plan``: the plan's JSON, None on error)."""

    index: int
    config: Config
    target: str
    policy: str
    status: str  # optimal | feasible | infeasible | error
    predicted_ns: int | None = None
    #: (resource, peak bytes, capacity bytes or None), in the plan's order
    peaks: tuple[tuple[str, int, int | None], ...] = ()
    versions: str = ""  # e.g. "%As×2 %Bs×2": buffers held in more than one version
    binding: str = ""  # the tightest resource (feasible) or the violated group (infeasible)
    reason: str = ""  # infeasible: the explanation in one line; error: the error
    plan_hash: str = ""
    seconds: float = 0.0
    cached: bool = False
    plan: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def feasible(self) -> bool:
        return self.status in FEASIBLE_STATUSES

    def figures(self) -> dict[str, Any]:
        """Everything but the plan JSON, the timing and the cache flag: what two runs of
        the same sweep must agree on."""
        d = asdict(self)
        for key in ("plan", "seconds", "cached"):
            d.pop(key)
        d["peaks"] = [list(p) for p in self.peaks]
        return d

    def to_json(self) -> dict[str, Any]:
        d = self.figures()
        d["seconds"], d["cached"] = round(self.seconds, 4), self.cached
        return d


def summarize(task_index: int, config: Config, target: str, policy: str, plan: Any,
              seconds: float, cached: bool) -> PointResult:
    """The figures of ``plan`` (a :class:`~planner.plan.decisions.MaterializationPlan`)."""
    from planner.plan.decisions import Status
    from planner.plan.plan_io import plan_to_json

    peaks = tuple((p.resource, p.peak_bytes, p.capacity) for p in plan.peaks)
    versions = " ".join(f"{b.name}×{b.versions}" for b in plan.buffers if b.versions > 1)
    if plan.status is Status.INFEASIBLE:
        lines = plan.explanation or ("the solver gave no explanation",)
        reason = "; ".join(lines)
        binding = _group(lines[0])
        predicted = None
    else:
        reason, binding, predicted = "", _tightest(peaks), plan.objective
    return PointResult(task_index, dict(config), target, policy, plan.status.value, predicted,
                       peaks, versions, binding, reason, plan.content_hash, seconds, cached,
                       plan_to_json(plan))


def _group(line: str) -> str:
    """The constraint group an explanation line names (``[capacity of X]``), else the line."""
    if line.endswith("]") and "[" in line:
        return line[line.rindex("[") + 1:-1]
    return line


def _tightest(peaks: tuple[tuple[str, int, int | None], ...]) -> str:
    bounded = [(peak / cap, r, peak, cap) for r, peak, cap in peaks if cap]
    if not bounded:
        return ""
    ratio, r, peak, cap = max(bounded)
    return f"{r} {peak:,}/{cap:,} B ({ratio:.0%})"


def plan_point(task: PointTask) -> PointResult:
    """Plan one task; a failure is returned as an ``error`` result, never raised."""
    start = time.perf_counter()
    try:
        from planner.catalog import CatalogRegistry
        from planner.ir.json_form import kernel_from_json
        from planner.ir.verify import verify
        from planner.solve.planner import plan_kernel

        kernel = kernel_from_json(task.kernel_json)
        target = CatalogRegistry.from_environment(task.catalog_dirs).get(task.target)
        verify(kernel, task.bindings)
        plan = plan_kernel(kernel, target, task.bindings, policy=task.policy,
                           time_limit_s=task.time_limit_s, workers=1)
    except Exception as exc:  # one point's failure is a result, not the sweep's end
        return error_result(task, exc, time.perf_counter() - start)
    return summarize(task.index, task.config, task.target, task.policy, plan,
                     time.perf_counter() - start, False)


def error_result(task: PointTask, exc: BaseException, seconds: float = 0.0) -> PointResult:
    from planner.errors import PlannerError

    text = exc.render() if isinstance(exc, PlannerError) else f"{type(exc).__name__}: {exc}"
    return PointResult(task.index, dict(task.config), task.target, task.policy, ERROR,
                       reason=" ".join(text.split()), seconds=seconds)
