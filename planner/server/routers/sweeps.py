"""Sweeps as jobs: ``POST /v1/sweeps`` (202 + ``Location``), ``GET`` and ``DELETE
/v1/sweeps/{id}``.

A sweep plans every configuration of a built-in example's space (``planner sweep``,
:mod:`planner.sweep`); it runs in a background thread of the service on the executor
the settings name (``sweep_scheduler``: a Dask scheduler, else a local process pool
started with ``forkserver``, never by forking the threaded server).  ``GET`` returns
the state (``running``, ``done``, ``cancelled``, ``failed``), the counts and the results
so far, ranked; ``DELETE`` asks the job to stop (pending points are cancelled, finished
ones stay).  Only built-in examples are swept: building an instance runs the example's
Python, and the service never runs submitted code.  At most :data:`MAX_RUNNING` jobs
run at once (429 beyond) and :data:`MAX_KEPT` are remembered (the oldest finished ones
are forgotten first); a sweep of more than :data:`MAX_POINTS` points is 413.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from typing import Annotated, Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from planner.catalog import DEFAULT_TARGET
from planner.errors import PlannerError
from planner.plan.decisions import Policy
from planner.server.models import Bindings, TargetName, TimeLimit
from planner.server.routers import error_responses
from planner.server.service import ApiError, ServiceDep

router = APIRouter(prefix="/v1", tags=["sweeps"])

MAX_RUNNING = 2
MAX_KEPT = 16
MAX_POINTS = 2000

ParamValues = Annotated[list[int | str], Field(min_length=1, max_length=64)]


class SweepRequest(BaseModel):
    """A built-in example's space (optionally restricted) × targets × policies."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"kernel": "softmax", "targets": ["x86-avx2"], "space": {"block_m": [2, 4, 8]},
         "time_limit": 5}]})

    kernel: str = Field(..., pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                        description="a built-in example that declares a SPACE (e.g. gemm)")
    targets: list[TargetName] = Field([DEFAULT_TARGET], min_length=1, max_length=8)
    policies: list[Policy] = Field([Policy.DEFAULT], min_length=1, max_length=2)
    space: dict[str, ParamValues] = Field(
        {}, description="parameter -> the values to sweep (replaces the declared set)")
    bindings: Bindings = {}
    time_limit: TimeLimit = None


class _Job:
    def __init__(self, job_id: str, kernel: str, total: int) -> None:
        self.id, self.kernel, self.total = job_id, kernel, total
        self.state = "running"
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results: list[Any] = []
        self.error: str | None = None
        self.created = time.time()
        self.result: Any = None  # the SweepResult once finished
        self.thread: threading.Thread | None = None

    def add(self, r: Any) -> None:
        with self.lock:
            self.results.append(r)

    def to_json(self) -> dict[str, Any]:
        from planner.sweep.run import rank

        with self.lock:
            rows = rank(self.results)
        feasible = sum(r.feasible for r in rows)
        failed = sum(r.status == "error" for r in rows)
        return {"id": self.id, "url": f"/v1/sweeps/{self.id}", "kernel": self.kernel,
                "state": self.state, "total": self.total, "done": len(rows),
                "feasible": feasible, "infeasible": len(rows) - feasible - failed,
                "failed": failed, "error": self.error,
                "results": [r.to_json() for r in rows]}


class _Jobs:
    """The app's sweep jobs (``app.state.sweeps``)."""

    def __init__(self) -> None:
        self.jobs: OrderedDict[str, _Job] = OrderedDict()
        self.lock = threading.Lock()

    def admit(self, kernel: str, total: int) -> _Job:
        with self.lock:
            running = sum(j.state == "running" for j in self.jobs.values())
            if running >= MAX_RUNNING:
                raise ApiError(429, "too-many-jobs", f"{running} sweeps are running (at most "
                               f"{MAX_RUNNING}); retry when one finishes or cancel one",
                               headers={"Retry-After": "5"})
            while len(self.jobs) >= MAX_KEPT:
                old = next((k for k, j in self.jobs.items() if j.state != "running"), None)
                if old is None:
                    break
                del self.jobs[old]
            job = _Job(uuid.uuid4().hex[:16], kernel, total)
            self.jobs[job.id] = job
            return job

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Cancels every running sweep and waits up to ``timeout_s`` for them to stop
        (the executors close; finished points stay in the plan cache)."""
        with self.lock:
            running = [j for j in self.jobs.values() if j.state == "running"]
        for job in running:
            job.stop.set()
        deadline = time.monotonic() + timeout_s
        for job in running:
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))

    def get(self, job_id: str) -> _Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise ApiError(404, "not-found", f"no sweep {job_id!r} (finished sweeps are "
                           f"forgotten after {MAX_KEPT} newer ones)")
        return job


def shutdown_sweeps(app: Any) -> None:
    """The app's lifespan end: cancel and join the running sweeps."""
    jobs = getattr(app.state, "sweeps", None)
    if jobs is not None:
        jobs.shutdown()


def _jobs(request: Request) -> _Jobs:
    state = request.app.state
    if getattr(state, "sweeps", None) is None:
        state.sweeps = _Jobs()
    jobs: _Jobs = state.sweeps
    return jobs


def _run(job: _Job, spec: Any, prepared: Any, scheduler: str | None) -> None:
    from planner.sweep.cache import default_plan_cache
    from planner.sweep.execute import make_executor
    from planner.sweep.run import run_sweep

    try:
        executor = make_executor(scheduler, start_method="forkserver")
        try:
            job.result = run_sweep(spec, executor, cache=default_plan_cache(),
                                   on_result=job.add, stop=job.stop, prepared=prepared)
        finally:
            executor.close()
        job.state = "cancelled" if job.result.interrupted else "done"
    except Exception as exc:  # reported in the job, which is what the client polls
        job.error = exc.render() if isinstance(exc, PlannerError) else \
            f"{type(exc).__name__}: {exc}"
        job.state = "failed"


_JOB = {"description": "The job: state, counts and the results so far (ranked)",
        "content": {"application/json": {"schema": {"type": "object"}}}}


@router.post("/sweeps", status_code=202, responses={
    202: {**_JOB, "headers": {"Location": {"description": "the job's URL",
                                           "schema": {"type": "string"}}}},
    429: {"description": "Too many sweeps running"}, **error_responses(400, 404, 422)})
async def start_sweep(body: SweepRequest, request: Request, service: ServiceDep) -> Response:
    """Start a sweep of a built-in example's configuration space; poll the job's URL."""
    from planner.ir.examples import list_examples
    from planner.sweep.run import SweepSpec, sweep_tasks

    if body.kernel not in {p.stem for p in list_examples()}:
        raise ApiError(404, "not-found", f"no built-in example {body.kernel!r} (a sweep names "
                       "a built-in example; the service runs no submitted Python)")
    settings = service.settings
    dirs = tuple(str(d) for d in (*(() if settings.writable_catalog_dir is None
                                    else (settings.writable_catalog_dir,)),
                                  *settings.catalog_dirs))
    spec = SweepSpec(body.kernel, tuple(body.targets), tuple(p.value for p in body.policies),
                     {k: tuple(v) for k, v in body.space.items()}, dict(body.bindings),
                     settings.time_limit(body.time_limit), dirs)
    prepared = await asyncio.to_thread(sweep_tasks, spec)
    if len(prepared.tasks) > MAX_POINTS:
        raise ApiError(413, "too-large", f"{len(prepared.tasks)} points; at most "
                       f"{MAX_POINTS} per sweep (restrict the space)")
    job = _jobs(request).admit(body.kernel, len(prepared.tasks))
    job.thread = threading.Thread(target=_run, args=(job, spec, prepared,
                                                     settings.sweep_scheduler),
                                  name=f"sweep-{job.id}", daemon=True)
    job.thread.start()
    return JSONResponse(job.to_json(), status_code=202,
                        headers={"Location": f"/v1/sweeps/{job.id}"})


@router.get("/sweeps/{job_id}", responses={200: _JOB, **error_responses(404)})
async def get_sweep(job_id: str, request: Request) -> Response:
    """Progress and the results so far."""
    return JSONResponse(_jobs(request).get(job_id).to_json())


@router.delete("/sweeps/{job_id}", status_code=202, responses={202: _JOB,
                                                              **error_responses(404)})
async def cancel_sweep(job_id: str, request: Request) -> Response:
    """Cancel a sweep: pending points are dropped, finished ones are kept."""
    job = _jobs(request).get(job_id)
    job.stop.set()
    return JSONResponse(job.to_json(), status_code=202)
