"""Liveness and metrics: ``GET /healthz`` and ``GET /metrics`` (Prometheus text)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from planner.server.models import Health
from planner.server.routers import error_responses
from planner.server.service import ServiceDep

router = APIRouter(tags=["health"])



class PrometheusResponse(PlainTextResponse):
    media_type = "text/plain; version=0.0.4"


def package_version() -> str:
    try:
        return version("planner")
    except PackageNotFoundError:
        return "0+unknown"


@router.get("/healthz", responses=error_responses())
async def healthz(service: ServiceDep) -> Health:
    """Answers at once, even while solves run: nothing here waits for the worker pool."""
    return Health(version=package_version(), targets=len(service.registry.list()),
                  plans_cached=len(service.cache), solves_in_flight=service.in_flight)


@router.get("/metrics", response_class=PrometheusResponse, responses={
    200: {"description": "Prometheus text exposition format 0.0.4",
          "content": {PrometheusResponse.media_type: {"schema": {"type": "string"}}}},
    **error_responses(explicit=True)})
async def metrics(service: ServiceDep) -> PrometheusResponse:
    """Request counts by route and status, plan latency, plan-cache hits and misses."""
    cache = service.cache
    return PrometheusResponse(service.metrics.render(cache.hits, cache.misses, len(cache)))
