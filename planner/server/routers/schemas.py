"""The JSON Schemas of the documents the API exchanges: kernel, plan and catalog."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter

from planner.catalog import catalog_json_schema
from planner.ir.json_form import kernel_json_schema
from planner.server.routers import error_responses
from planner.solve import plan_json_schema

router = APIRouter(prefix="/v1/schemas", tags=["schemas"])

_SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "kernel": kernel_json_schema, "plan": plan_json_schema, "catalog": catalog_json_schema}


@router.get("/{name}", responses=error_responses(422))
async def get_schema(name: Literal["kernel", "plan", "catalog"]) -> dict[str, Any]:
    """A JSON Schema (draft 2020-12): the kernel JSON IR, a plan, or a catalog file."""
    return _SCHEMAS[name]()
