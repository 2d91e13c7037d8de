"""API documentation served from the package, never from a CDN: ``/docs`` and ``/redoc``.

Swagger UI 5 (which renders OpenAPI 3.1, what FastAPI produces) and ReDoc come from the
``fastapi-offline`` package's static files, served under ``/docs/static``.  Neither page
loads anything from another host.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

router = APIRouter(include_in_schema=False)
STATIC = "/docs/static"
ASSETS = Path(fastapi_offline.__file__).resolve().parent / "static"


def install(app: FastAPI) -> None:
    """The docs routes and their static files (``docs_url=None, redoc_url=None`` in the
    FastAPI constructor)."""
    app.include_router(router)
    app.mount(STATIC, StaticFiles(directory=str(ASSETS)), name="api-docs")


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=root + request.app.openapi_url, title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{STATIC}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{STATIC}/swagger-ui.css",
        swagger_favicon_url=f"{root}{STATIC}/favicon.png",
        oauth2_redirect_url=f"{root}/docs/oauth2-redirect")


@router.get("/docs/oauth2-redirect")
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(openapi_url=root + request.app.openapi_url,
                          title=f"{request.app.title} - ReDoc",
                          redoc_js_url=f"{root}{STATIC}/redoc.standalone.js",
                          redoc_favicon_url=f"{root}{STATIC}/favicon.png",
                          with_google_fonts=False)
