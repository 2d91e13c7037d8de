"""The planner HTTP service: ``create_app(Settings(...))`` returns a FastAPI app.

Routers per resource live in :mod:`server.routers`; the shared state (catalogs, plan
cache, worker pool, metrics) in :mod:`server.service`.  ``planner serve`` runs it under
uvicorn.  The service executes no submitted code: kernels arrive as JSON or text IR.
"""

from planner.server.app import create_app
from planner.server.settings import Settings

__all__ = ["Settings", "create_app"]
