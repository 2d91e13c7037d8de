"""Target catalogs: list, read (YAML or JSON), validate, and guarded writes.

Writes (PUT, DELETE) need ``Authorization: Bearer <token>`` and a precondition:
``If-Match: "<etag>"`` with the ETag of the catalog as last read (``If-None-Match: *``
to create a new one).  A missing precondition is 428, a stale one 412, so two people
editing the same catalog cannot silently overwrite each other.  Written files go to
the writable catalog directory, which is searched first: writing ``x86-avx2`` there
overrides the built-in target until the file is deleted again.

The files live in a :class:`planner.server.catalog_store.CatalogStore`, which serializes
writes across server processes and keeps every accepted revision: ``GET
/v1/catalogs/{name}/revisions`` lists them (content hashes, the ``catalog_hash`` of
plans), ``GET /v1/catalogs/{name}/revisions/{hash}`` returns one.  A write the storage
refuses is 507 (``insufficient-storage``) or 503 (``read-only-storage``,
``storage-permission-denied``, ``catalog-busy``, ...) with nothing changed.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import yaml
from fastapi import APIRouter, Depends, Header, Path, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from planner.errors import PlannerError
from planner.server.catalog_store import CatalogFile, StoreError, etag_of, load_catalog_bytes
from planner.server.models import (
    CatalogDeleted,
    CatalogDetail,
    CatalogList,
    CatalogSummary,
    CatalogValidation,
    CatalogWritten,
)
from planner.server.routers import error_responses
from planner.server.service import REQUEST_FILE, ApiError, ServiceDep

T = TypeVar("T")

router = APIRouter(prefix="/v1/catalogs", tags=["catalogs"])

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
CatalogName = Annotated[str, Path(min_length=1, max_length=100, pattern=r"^[a-z0-9][a-z0-9_.-]*$",
                                  description="target name (the file is <name>.yaml)")]
IfMatch = Annotated[str | None, Header(description='the ETag last read, e.g. "3f2a..."')]
IfNoneMatch = Annotated[str | None, Header(description="* to create a catalog that must "
                                                       "not exist yet")]
_bearer = HTTPBearer(auto_error=False, description="the token set with planner serve "
                     "--token-env")

_CATALOG_BODY = {"requestBody": {"required": True, "description": "the catalog file (YAML; "
                                 "JSON is YAML too). Schema: GET /v1/schemas/catalog",
                                 "content": {"application/yaml": {"schema": {"type": "string"}},
                                             "application/json": {"schema": {"type": "object"}}}}}
_ETAG_HEADER = {"ETag": {"description": "the catalog's content hash", "schema": {"type": "string"}}}
RevisionHash = Annotated[str, Path(pattern=r"^[0-9a-f]{6,64}$",
                                   description="the revision's SHA-256 (or a unique prefix of "
                                   "at least 6 hex digits)")]


class CatalogRevision(BaseModel):
    hash: str = Field(description="SHA-256 of the file: its ETag and a plan's catalog_hash")
    size: int = Field(description="bytes")
    kept_at: str | None = Field(description="when this revision was first accepted (UTC, "
                                "ISO 8601); null for a file that was never written here")
    current: bool = Field(description="the catalog's visible file has this content")


class CatalogRevisions(BaseModel):
    name: str
    revisions: list[CatalogRevision] = Field(description="oldest first")


async def _stored(fn: Callable[..., T], /, *args: Any) -> T:
    """``fn(*args)`` of the catalog store in a thread; its refusals become problems."""
    try:
        return await asyncio.to_thread(fn, *args)
    except StoreError as exc:
        raise ApiError(exc.status, exc.kind, exc.message, headers=exc.headers) from None


def require_writer(service: ServiceDep,
                   credentials: Annotated[HTTPAuthorizationCredentials | None,
                                          Depends(_bearer)]) -> None:
    """Catalog writes: 403 when disabled, 401 without the configured bearer token."""
    token = service.settings.token
    if token is None or service.catalogs.writable is None:
        raise ApiError(403, "writes-disabled", "catalog writes are disabled on this server "
                       "(start it with a token and a writable catalog directory)")
    given = credentials.credentials if credentials else ""
    if not secrets.compare_digest(given.encode(), token.get_secret_value().encode()):
        raise ApiError(401, "unauthorized", "catalog writes need Authorization: Bearer <token>",
                       headers={"WWW-Authenticate": "Bearer"})


WriterDep = Annotated[None, Depends(require_writer)]


def _summary(file: CatalogFile, service: ServiceDep) -> dict[str, Any]:
    out: dict[str, Any] = {"name": file.name, "etag": file.etag, "origin": file.origin,
                           "overrides_builtin": file.overrides_builtin}
    try:
        target = service.catalogs.target(file.name)
    except PlannerError:
        return out
    backend = target.backend.value if target.backend else None
    return {**out, "description": target.description, "backend": backend}


def _wants_yaml(accept: str | None) -> bool:
    """True when ``Accept`` ranks a YAML type above JSON (JSON is the default)."""
    best: dict[str, float] = {"yaml": -1.0, "json": -1.0}
    for part in (accept or "").split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        kind = "yaml" if media.lower() in YAML_TYPES else \
            "json" if media.lower() in ("application/json", "*/*", "application/*") else None
        if kind:
            best[kind] = max(best[kind], q)
    return best["yaml"] > 0 and best["yaml"] > best["json"]


@router.get("", responses=error_responses())
async def list_catalogs(service: ServiceDep) -> CatalogList:
    """Every visible target, the file it comes from and its ETag."""
    def collect() -> list[dict[str, Any]]:
        found = (service.catalogs.find_or_none(e.name) for e in service.registry.list())
        return [_summary(f, service) for f in found if f is not None]

    summaries = await asyncio.to_thread(collect)
    return CatalogList(catalogs=[CatalogSummary.model_validate(s) for s in summaries],
                       writes_enabled=service.settings.writes_enabled)


# Declared before the /{name} routes: a request for /validate with another method then
# reports this route (Allow: POST), not GET/PUT/DELETE of a catalog named "validate".
@router.post("/validate", openapi_extra=_CATALOG_BODY, responses=error_responses(422))
async def validate_catalog(request: Request) -> CatalogValidation:
    """Check a catalog without saving it: 200 if valid, else 422 with every located mistake."""
    data = await _catalog_body(request)
    target = await asyncio.to_thread(load_catalog_bytes, data, REQUEST_FILE)
    return CatalogValidation(valid=True, name=target.name, etag=etag_of(data))


@router.get("/{name}", response_model=CatalogDetail, responses={
    200: {"description": "The catalog: JSON by default, the YAML file for Accept: "
          "application/yaml", "headers": _ETAG_HEADER,
          "content": {"application/yaml": {"schema": {"type": "string"}}}},
    **error_responses(404, 422)})
async def get_catalog(name: CatalogName, request: Request, service: ServiceDep) -> Response:
    """One catalog, as its YAML file or as JSON (chosen by ``Accept``), with its ETag."""
    file = await asyncio.to_thread(service.catalogs.find, name)
    headers = {"ETag": f'"{file.etag}"', "Vary": "Accept"}
    if _wants_yaml(request.headers.get("accept")):
        return Response(file.data, media_type="application/yaml", headers=headers)
    await asyncio.to_thread(service.catalogs.target, name)  # 422 if the file is invalid
    content = json.loads(json.dumps(yaml.safe_load(file.data), default=str))
    detail = CatalogDetail(**_summary(file, service), content=content)
    return Response(detail.model_dump_json(), media_type="application/json", headers=headers)


@router.put("/{name}", status_code=200, openapi_extra=_CATALOG_BODY, responses={
    200: {"model": CatalogWritten, "description": "Replaced (or overrode the built-in) catalog",
          "headers": _ETAG_HEADER},
    201: {"model": CatalogWritten, "description": "Created the catalog (Location: its URL)",
          "headers": {**_ETAG_HEADER, "Location": {"description": "the new catalog's path",
                                                   "schema": {"type": "string"}}}},
    **error_responses(401, 403, 412, 422, 428, 503, 507)})
async def put_catalog(name: CatalogName, request: Request, service: ServiceDep,
                      _writer: WriterDep, if_match: IfMatch = None,
                      if_none_match: IfNoneMatch = None) -> Response:
    """Validate a catalog and atomically replace ``<writable dir>/<name>.yaml``: 201 with
    ``Location`` when no catalog of this name existed, else 200 (replaced, or a built-in
    now overridden).

    Writing the name of a built-in target overrides it (DELETE restores the built-in).
    """
    data = await _catalog_body(request)
    result = await _stored(service.catalogs.write, name, data, if_match, if_none_match)
    dropped = service.cache.drop_target(name)
    note = (f"this file overrides the built-in catalog {name!r}; DELETE "
            f"/v1/catalogs/{name} restores it" if result.overrides_builtin else "")
    body = CatalogWritten(name=name, etag=result.etag, created=result.created,
                          overrides_builtin=result.overrides_builtin, note=note,
                          dropped_plans=dropped)
    headers = {"ETag": f'"{result.etag}"'}
    new = result.created and not result.overrides_builtin  # no catalog had this URL
    if new:
        headers["Location"] = f"{router.prefix}/{name}"
    return Response(body.model_dump_json(), media_type="application/json", headers=headers,
                    status_code=201 if new else 200)


@router.delete("/{name}", responses=error_responses(401, 403, 404, 409, 412, 422, 428, 503,
                                                    507))
async def delete_catalog(name: CatalogName, service: ServiceDep, _writer: WriterDep,
                         if_match: IfMatch = None) -> CatalogDeleted:
    """Delete a user catalog file (never a built-in one): 404 when it is already gone
    (another process deleted it), 412 when it changed since it was read."""
    restored = await _stored(service.catalogs.delete, name, if_match)
    return CatalogDeleted(name=name, builtin_restored=restored,
                          dropped_plans=service.cache.drop_target(name))


@router.get("/{name}/revisions", responses=error_responses(404, 422))
async def list_revisions(name: CatalogName, service: ServiceDep) -> CatalogRevisions:
    """Every accepted revision of a catalog, oldest first (kept after a DELETE too)."""
    found = await asyncio.to_thread(service.catalogs.revisions, name)
    return CatalogRevisions(name=name, revisions=[CatalogRevision(
        hash=r.digest, size=r.size, current=r.current,
        kept_at=datetime.fromtimestamp(r.kept_at, UTC).isoformat() if r.kept_at else None)
        for r in found])


@router.get("/{name}/revisions/{digest}", responses={
    200: {"description": "The revision's YAML file, byte for byte", "headers": _ETAG_HEADER,
          "content": {"application/yaml": {"schema": {"type": "string"}}}},
    **error_responses(400, 404, 422)})
async def get_revision(name: CatalogName, digest: RevisionHash,
                       service: ServiceDep) -> Response:
    """One revision of a catalog, as the YAML file that was accepted (immutable)."""
    full, data = await asyncio.to_thread(service.catalogs.revision, name, digest)
    return Response(data, media_type="application/yaml",
                    headers={"ETag": f'"{full}"', "Cache-Control": "public, max-age=31536000, "
                             "immutable"})


async def _catalog_body(request: Request) -> bytes:
    data = await request.body()
    if not data.strip():
        raise ApiError(422, "validation", "the request body must be the catalog (YAML or JSON)")
    return data

