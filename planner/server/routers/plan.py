"""Planning: ``POST /v1/plan``, ``/v1/compare``, ``/v1/check`` and ``/v1/lower``."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Response
from fastapi.responses import JSONResponse

from planner.server.models import (
    REQUEST_EXAMPLES,
    CheckRequest,
    CheckResponse,
    CompareRequest,
    LowerRequest,
    LowerResponse,
    PlanRequest,
    api_wording,
)
from planner.server.routers import error_responses
from planner.server.service import (
    ApiError,
    ServiceDep,
    check_emitter,
    check_job,
    compare_job,
    lower_job,
)
from planner.solve import plan_json_schema

router = APIRouter(prefix="/v1", tags=["planning"])


def _example(name: str) -> Any:
    """The request body's media-type example (what /docs fills in): softmax as text IR."""
    return Body(openapi_examples={"softmax": {
        "summary": "softmax (text IR) with bindings", "value": REQUEST_EXAMPLES[name]}})


PlanBody = Annotated[PlanRequest, _example("PlanRequest")]
CompareBody = Annotated[CompareRequest, _example("CompareRequest")]
CheckBody = Annotated[CheckRequest, _example("CheckRequest")]
LowerBody = Annotated[LowerRequest, _example("LowerRequest")]


def _embedded(schema: dict[str, Any]) -> dict[str, Any]:
    """A standalone JSON Schema as an OpenAPI 3.1 schema object."""
    return {k: v for k, v in schema.items() if k not in ("$schema", "$id")}


_PLAN_OK = {"description": "The MaterializationPlan (schema: GET /v1/schemas/plan)",
            "content": {"application/json": {"schema": _embedded(plan_json_schema())}},
            "headers": {"X-Plan-Cache": {"description": "hit or miss",
                                         "schema": {"type": "string"}}}}


@router.post("/plan", responses={200: _PLAN_OK, **error_responses(400, 404, 422, 503)})
async def plan(body: PlanBody, service: ServiceDep) -> Response:
    """Plan one kernel on one target; identical requests are answered from the cache."""
    start = time.perf_counter()
    planned, hit = await service.plan(body.kernel, body.target, body.bindings, body.policy,
                                      body.baseline, body.time_limit, body.bounds)
    service.metrics.observe_plan("plan", "hit" if hit else "miss", time.perf_counter() - start)
    planned.raise_if_unusable()
    return JSONResponse(planned.json, headers={"X-Plan-Cache": "hit" if hit else "miss"})


@router.post("/compare", responses={
    200: {"description": "The comparison (rows per edge, one column per variant)",
          "content": {"application/json": {"schema": {"type": "object"}}}},
    **error_responses(400, 404, 422, 503)})
async def compare(body: CompareBody, service: ServiceDep) -> Response:
    """Plan one kernel under several targets, policies or baselines and compare the plans."""
    if len(body.variants) > service.settings.max_compare_variants:
        raise ApiError(413, "too-large", f"{len(body.variants)} variants; at most "
                       f"{service.settings.max_compare_variants} per request")
    start = time.perf_counter()
    tasks = [asyncio.ensure_future(service.plan(body.kernel, v.target, body.bindings, v.policy,
                                                v.baseline, body.time_limit, body.bounds))
             for v in body.variants]
    try:
        results = await asyncio.gather(*tasks)
    except BaseException:  # the first failure answers; the other variants' jobs stop
        for task in tasks:
            task.cancel()
        raise
    labelled = [(v.default_label(), planned.plan)
                for v, (planned, _) in zip(body.variants, results, strict=True)]
    comparison: dict[str, Any] = await service.run(compare_job, labelled)
    cache = "hit" if all(hit for _, hit in results) else "miss"
    service.metrics.observe_plan("compare", cache, time.perf_counter() - start)
    return JSONResponse(comparison)


@router.post("/check", responses=error_responses(400, 404, 422, 503))
async def check(body: CheckBody, service: ServiceDep) -> CheckResponse:
    """Run the verifier and the target's proofs (capacity, access, layouts, 64-bit)."""
    target = await asyncio.to_thread(service.catalogs.target, body.target)
    time_limit = min(body.time_limit or 2.0, service.settings.max_time_limit_s)
    report = await service.run(check_job, body.kernel, target, dict(body.bindings),
                               service.settings.max_graph_ops, time_limit, dict(body.bounds))
    response = CheckResponse.model_validate(report).capped()
    for proof in response.proofs:  # the proofs' hints name CLI flags
        proof.detail = api_wording(proof.detail)
    for diag in response.diagnostics:
        diag.message = api_wording(diag.message)
    return response


@router.post("/lower", responses=error_responses(400, 404, 422, 503))
async def lower(body: LowerBody, service: ServiceDep) -> LowerResponse:
    """Plan the kernel (or reuse the cached plan) and return the emitted code."""
    emit = check_emitter(body.emit, await asyncio.to_thread(service.catalogs.target,
                                                            body.target))
    start = time.perf_counter()
    planned, hit = await service.plan(body.kernel, body.target, body.bindings, body.policy,
                                      body.baseline, body.time_limit, body.bounds)
    planned.raise_if_unusable()
    code = await service.run(lower_job, body.kernel, planned.plan, planned.target, emit,
                             service.settings.max_graph_ops, dict(body.bindings),
                             dict(body.bounds))
    service.metrics.observe_plan("lower", "hit" if hit else "miss", time.perf_counter() - start)
    return LowerResponse(kernel=planned.plan.kernel, target=body.target, emit=emit,
                         code=code, plan=planned.json)
