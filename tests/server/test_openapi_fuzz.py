"""Schemathesis against the live server's OpenAPI schema: no input may produce a 5xx.

Bounded and reproducible: 30 derandomized examples per operation, loopback only.
Every response must also match the documented status codes, media types and bodies.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    positive_data_acceptance,
    response_schema_conformance,
)

from planner.solve import plan_json_schema

schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture(scope="session")
def api_schema(live: Any) -> Any:
    assert live.base_url.startswith("http://127.0.0.1:")
    return schemathesis.openapi.from_url(f"{live.base_url}/openapi.json")


@schema.parametrize()
@settings(max_examples=30, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_api_never_fails_on_generated_input(case: Any, auth: dict[str, str]) -> None:
    # With the token, writes get past authentication to validation and preconditions.
    # Schema-valid kernels are mostly not valid IR: a 422 for them is the right answer.
    # schemathesis 4.32 rewrites the plan schema's 2020-12 ``prefixItems`` into a list
    # ``items`` and then rejects it (schemathesis/schemathesis#3842, #4099), so a plan
    # (a 200 of /v1/plan, reached now that the OpenAPI example is a valid kernel) is
    # checked against GET /v1/schemas/plan with jsonschema here instead.
    plan_ok = case.path == "/v1/plan"
    excluded = [positive_data_acceptance, *([response_schema_conformance] if plan_ok else [])]
    response = case.call_and_validate(headers=auth, excluded_checks=excluded, timeout=60)
    if plan_ok and response.status_code == 200:
        jsonschema.validate(response.json(), plan_json_schema())
