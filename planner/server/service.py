"""What the routers share: settings, catalogs, the plan cache, the worker pool, metrics.

One :class:`Service` per app, built by :func:`server.app.create_app` from its settings
and reached from a route through the ``ServiceDep`` dependency.  Parsing, planning,
proving and lowering run in :attr:`Service.workers`, ``settings.pool_workers`` worker
processes with memory and CPU limits (:mod:`planner.server.workers`), never on the event
loop, so a long solve leaves other requests (``/healthz``, catalog reads) answering and
one request cannot take the server down.

Bounded work: at most ``settings.pool_workers`` jobs run and ``settings.max_queue`` wait;
one more is 503 with ``Retry-After``.  ``time_limit`` bounds a planning request as a
whole: the CP-SAT search gets :data:`SOLVER_SHARE` of it, model building, proofs and
evaluation the rest, and a job still running at the deadline is killed and answered 422
``timeout`` (rule ``time-limit``: the request asked for less time than its kernel
needs, a verdict about the request, not a server fault).  A job whose client hangs up
is killed at once (answered 499, which nobody reads).

Catalog reads and writes go through :class:`planner.server.catalog_store.CatalogStore`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from planner.catalog import BUILTIN_DIR, CatalogRegistry, Target
from planner.errors import Diagnostic, PlannerError, SourceLoc
from planner.ir.core import Kernel
from planner.ir.json_form import kernel_from_json
from planner.ir.parser import parse_kernel
from planner.ir.verify import verify
from planner.lower.backends import backend_for, emit_forms
from planner.prove.proofs import prove_kernel
from planner.server.cache import PlanCache, PlanKey
from planner.server.catalog_store import CatalogStore
from planner.server.guard import check_text_integers
from planner.server.metrics import Metrics
from planner.server.settings import Settings
from planner.server.workers import (
    ApiErrorData,
    ClientGone,
    DeadlineExceeded,
    JobFailed,
    Overloaded,
    WorkerPool,
)
from planner.solve import (
    DEFAULT_MODEL_LIMIT,
    Baseline,
    MaterializationPlan,
    Policy,
    Status,
    compare_plans,
    comparison_to_json,
    estimate_model_size,
    plan_kernel,
    plan_to_json,
)

T = TypeVar("T")
KernelSource = dict[str, Any] | str
SymbolBounds = Mapping[str, tuple[int, int]]

REQUEST_FILE = "<request>"
#: The share of a request's ``time_limit`` given to the CP-SAT search.
SOLVER_SHARE = 0.75
#: Set by the app's middleware for each request: fires when the client disconnects.
DISCONNECTED: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "planner_disconnected", default=None)

log = logging.getLogger("planner.server")


class ApiError(Exception):
    """A 4xx answer that is not a :class:`PlannerError` (preconditions, auth, ...)."""

    def __init__(self, status: int, kind: str, message: str, *,
                 headers: Mapping[str, str] | None = None,
                 explanation: list[str] | None = None,
                 diagnostics: list[Diagnostic] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.headers = dict(headers or {})
        self.explanation = explanation or []
        self.diagnostics = diagnostics or []


class ClientClosed(ApiError):
    """The client hung up while its job ran (499, as nginx logs it; nobody reads it).

    ``abandoned``: requests waiting on the same cached computation compute for
    themselves instead of sharing this answer.
    """

    abandoned = True

    def __init__(self) -> None:
        super().__init__(499, "client-closed-request", "the client closed the connection "
                         "before the answer was ready; its job was stopped")


# -- the work done in the pool ---------------------------------------------------------


def decode_kernel(source: KernelSource, max_ops: int, bindings: Mapping[str, int],
                  bounds: SymbolBounds | None = None) -> Kernel:
    """A verified kernel from its JSON IR object or text IR; never executes anything.

    Every endpoint that takes a kernel reads it here, and here it is verified under
    ``bindings`` and the declared ``bounds`` (S10's zero-trip loops are decided over the
    bounds, never the bindings) with the call the CLI's load path makes
    (``planner.cli.common.kernel_and_bindings``): :func:`planner.ir.verify.verify`.
    A rejected kernel is a 422 with the verifier's rule and location before anything
    plans, proves or lowers it.  Then every name in ``bounds`` (the request's declared
    symbol ranges, already range-checked by :mod:`server.models`) must be one of the
    kernel's symbols (:meth:`Kernel.symbols`), else 422 naming it and them.

    The readers bound ops and region depth; nesting they do not bound (parentheses in
    an expression) ends in a RecursionError, reported here as ``too-large``.
    """
    try:
        if isinstance(source, str):
            long_int = check_text_integers(source)
            if long_int is not None:
                line, col, digits = long_int
                raise PlannerError(Diagnostic(
                    f"an integer literal of {digits} digits; integers must fit in 64 bits",
                    SourceLoc(REQUEST_FILE, line, col), rule="integer-too-large"),
                    kind="parse")
            kernel = parse_kernel(source, REQUEST_FILE, max_ops=max_ops)
        else:
            kernel = kernel_from_json(source, file=REQUEST_FILE, max_ops=max_ops)
        verify(kernel, bindings, bounds)
    except RecursionError:
        raise PlannerError(Diagnostic("the kernel is nested too deeply to read",
                                      SourceLoc(REQUEST_FILE, 0)), kind="too-large") from None
    check_bound_names(kernel, bounds or {})
    return kernel


def check_bound_names(kernel: Kernel, bounds: SymbolBounds) -> None:
    """422 (``validation``) when ``bounds`` names something that is not a kernel symbol."""
    symbols = kernel.symbols()
    unknown = [name for name in bounds if name not in symbols]
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        known = ", ".join(symbols) if symbols else "none"
        what = "is not a symbol" if len(unknown) == 1 else "are not symbols"
        raise PlannerError(Diagnostic(
            f"bounds: {names} {what} of kernel {kernel.name!r} (its symbols: {known})",
            SourceLoc(REQUEST_FILE, 0), rule="unknown-symbol"), kind="validation")


@dataclass(frozen=True, slots=True)
class Planned:
    """A solved plan, its JSON and target, as the cache keeps them.

    ``refuted`` holds the located diagnostics of proofs the plan's kernel fails on its
    target (an inaccessible resource, say): /plan and /lower refuse such a plan (422),
    /compare shows it beside the others.
    """

    plan: MaterializationPlan
    json: dict[str, Any]
    target: Target
    refuted: tuple[Diagnostic, ...] = ()

    @property
    def infeasible(self) -> bool:
        return self.plan.status == Status.INFEASIBLE

    def raise_if_unusable(self) -> None:
        """422 for a plan that must not be used: infeasible, or a refuted proof."""
        if self.refuted:
            raise PlannerError(list(self.refuted), kind="proof")
        if self.infeasible:
            explanation = [str(line) for line in self.plan.explanation]
            message = "no plan satisfies the constraints" + (
                f": {explanation[0]}" if explanation else "")
            raise ApiError(422, "infeasible", message, explanation=explanation)


@dataclass(frozen=True, slots=True)
class PlanJob:
    """Everything one solve needs (plain data: safe to hand to a worker thread)."""

    kernel: KernelSource
    target: Target
    bindings: dict[str, int]
    policy: Policy
    baseline: Baseline | None
    time_limit_s: float
    max_ops: int
    solver_workers: int
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)
    max_model_size: int = DEFAULT_MODEL_LIMIT

    def run(self) -> Planned:
        kernel = decode_kernel(self.kernel, self.max_ops, self.bindings, self.bounds)  # verified
        budget = estimate_model_size(kernel, self.bindings or None, limit=self.max_model_size)
        if budget.exceeded:  # refused before any model is built
            raise PlannerError(Diagnostic(
                f"kernel {kernel.name!r} is too large to plan here: {budget.describe()}",
                SourceLoc(REQUEST_FILE, 0), rule="model-size"), kind="too-large")
        plan = plan_kernel(kernel, self.target, bindings=self.bindings or None,
                           policy=self.policy, baseline=self.baseline,
                           time_limit_s=self.time_limit_s, workers=self.solver_workers,
                           bounds=self.bounds or None)
        refuted: tuple[Diagnostic, ...] = ()
        if any(p.status == "refuted" for p in plan.proofs):  # re-prove for the locations
            report = prove_kernel(kernel, self.target, self.bindings or None,
                                  symbol_bounds=self.bounds or None)
            refuted = tuple(r.diagnostic() for r in report.refuted) or tuple(
                Diagnostic(f"{p.name} refuted: {p.detail}") for p in plan.proofs
                if p.status == "refuted")
        return Planned(plan, plan_to_json(plan), self.target, refuted)


def check_job(source: KernelSource, target: Target, bindings: dict[str, int],
              max_ops: int, time_limit_s: float,
              bounds: SymbolBounds | None = None) -> dict[str, Any]:
    """Verifier, then the target's proofs over ``bounds`` where no binding fixes a
    symbol; a verifier error or an unknown bound name raises (422)."""
    kernel = decode_kernel(source, max_ops, bindings, bounds)
    report = prove_kernel(kernel, target, bindings or None,
                          symbol_bounds=dict(bounds) if bounds else None,
                          time_limit_ms=max(1, int(time_limit_s * 1000)))
    return {"kernel": kernel.name, "target": target.name, "ok": report.ok,
            "proofs": [r.to_json() for r in report.results],
            "diagnostics": [d.to_json() for d in report.diagnostics()]}


def lower_job(source: KernelSource, plan: MaterializationPlan, target: Target, emit: str,
              max_ops: int, bindings: Mapping[str, int],
              bounds: SymbolBounds | None = None) -> str:
    """The code form ``emit`` of ``plan``, from the target's backend in the registry."""
    return backend_for(target).emit(decode_kernel(source, max_ops, bindings, bounds), plan,
                                    target, emit)


def compare_job(labelled: list[tuple[str, MaterializationPlan]]) -> dict[str, Any]:
    return comparison_to_json(compare_plans(labelled))


#: The emit forms the backend registry offers (``planner.lower.backends``).
EMITTERS: tuple[str, ...] = emit_forms()


def check_emitter(emit: str | None, target: Target) -> str:
    """The form to emit (``None``: the backend's default), or 400 unsupported unless
    ``target``'s backend emits ``emit`` (the registry's message, naming its forms).

    Called before planning, so a request that cannot be lowered is refused at once;
    a planning-only target gets the message ``planner lower`` prints for it.
    """
    return backend_for(target).require(target, emit)


# -- the service -----------------------------------------------------------------------


class Service:
    """The state of one app instance (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        writable = settings.writable_catalog_dir
        if writable is not None:
            writable.mkdir(parents=True, exist_ok=True)
            writable = writable.resolve()
        dirs = [d.resolve() for d in (writable, *settings.catalog_dirs) if d is not None]
        self.registry = CatalogRegistry(dirs)
        self.catalogs = CatalogStore(self.registry, writable, BUILTIN_DIR.resolve())
        self.cache: PlanCache[Planned] = PlanCache(settings.cache_size)
        self.metrics = Metrics()
        memory = settings.worker_memory_mb * (1 << 20) if settings.worker_memory_mb else None
        self.workers = WorkerPool(settings.pool_workers, settings.max_queue, memory,
                                  settings.job_cpu_s())
        self.in_flight = 0

    def close(self) -> None:
        self.workers.close()

    async def run(self, fn: Callable[..., T], /, *args: Any,
                  time_limit: float | None = None) -> T:
        """``fn(*args)`` in a worker process, within ``time_limit`` seconds (default: the
        server's cap); the client's disconnect kills it (see the module docstring)."""
        limit = time_limit if time_limit is not None else self.settings.max_time_limit_s
        self.in_flight += 1
        try:
            result: T = await self.workers.call(fn, args, deadline=time.monotonic() + limit,
                                                disconnected=DISCONNECTED.get())
            return result
        except Overloaded as exc:
            raise ApiError(503, "overloaded", f"the server is busy ({exc.running} planning "
                           f"jobs running, {exc.queued} waiting); retry later",
                           headers={"Retry-After": str(self.settings.retry_after_s)}) from None
        except DeadlineExceeded:
            raise PlannerError(Diagnostic(
                f"no answer within the request's time limit of {limit:g} s (building the "
                "model, solving and evaluating together); raise time_limit (the server "
                f"allows up to {self.settings.max_time_limit_s:g} s)",
                SourceLoc(REQUEST_FILE, 0), rule="time-limit"), kind="timeout") from None
        except ClientGone:
            raise ClientClosed() from None
        except ApiErrorData as exc:
            raise ApiError(**exc.fields) from None
        except JobFailed as exc:
            log.error("planning job failed:\n%s", exc)
            raise
        finally:
            self.in_flight -= 1

    async def plan(self, kernel: KernelSource, target_name: str, bindings: dict[str, int],
                   policy: Policy, baseline: Baseline | None, time_limit: float | None,
                   bounds: SymbolBounds | None = None) -> tuple[Planned, bool]:
        """The plan (from the cache when an identical request was solved) and ``hit``.

        ``bounds`` (declared symbol ranges) decide proofs, so they are part of the key.
        """
        target = await asyncio.to_thread(self.catalogs.target, target_name)
        bounds = dict(bounds or {})
        key = PlanKey.of(kernel, target_name, target.content_hash, bindings, policy.value,
                         baseline.value if baseline else None, bounds)
        limit = self.settings.time_limit(time_limit)
        job = PlanJob(kernel, target, dict(bindings), policy, baseline, limit * SOLVER_SHARE,
                      self.settings.max_graph_ops, self.settings.solver_workers, bounds,
                      self.settings.max_model_size)
        # Plans cut short by the time limit are not kept: a later request may do better.
        return await self.cache.get_or_compute(key, lambda: self.run(job.run, time_limit=limit),
                                               keep=lambda p: p.plan.status != Status.FEASIBLE)


def get_service(request: Request) -> Service:
    """The app's :class:`Service` (a dependency)."""
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]
