"""One router per resource: planning (``plan``), catalogs, health and metrics, schemas."""

from __future__ import annotations

from typing import Any

from planner.server.models import PROBLEM_MEDIA_TYPE, ErrorResponse

_DESCRIPTIONS = {
    400: "Bad request: invalid JSON, or an unsupported option",
    401: "Missing or wrong bearer token",
    403: "Catalog writes are disabled (no token or no writable directory configured)",
    404: "Unknown target",
    409: "The catalog is not a user file (built-in catalogs cannot be deleted)",
    412: "If-Match does not match the catalog's current ETag",
    413: "Request body or kernel too large",
    422: "Malformed request, invalid kernel or catalog, or an infeasible plan",
    428: "A catalog write without If-Match / If-None-Match",
    500: "Unexpected server error (carries a request id; never caused by client input)",
    503: "Temporarily unavailable (Retry-After): every planning worker is busy and the queue "
         "is full (kind overloaded), the catalog storage is busy, or it refuses writes "
         "(read-only, permission denied); nothing was changed",
    507: "Insufficient storage: the catalog could not be written; nothing was changed",
}


def error_responses(*codes: int, explicit: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for ``codes`` plus 413 and 500, all with the problem details body
    (``application/problem+json``).

    ``explicit`` spells the media type out, for routes whose own responses are not JSON.
    """
    body: dict[str, Any] = {"content": {PROBLEM_MEDIA_TYPE: {
        "schema": {"$ref": "#/components/schemas/ErrorResponse"}}}}
    if not explicit:
        body["model"] = ErrorResponse
    return {code: {**body, "description": _DESCRIPTIONS[code]}
            for code in sorted({*codes, 413, 500})}
