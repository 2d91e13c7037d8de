"""``planner serve``: run the HTTP planning service under uvicorn.

The command turns its flags (and the token's environment variable) into a
:class:`planner.server.Settings` and hands it to :func:`planner.server.create_app`;
nothing else reads
the environment.  Catalog writes are enabled only when the variable named by
``--token-env`` holds a token and a writable catalog directory is known.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from planner.cli.common import (
    add_catalog_dir_arg,
    non_negative_int,
    positive_float,
    positive_int,
)
from planner.errors import error

if TYPE_CHECKING:
    from planner.server.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the HTTP planning service",
                       description="Serve /v1/plan, /v1/compare, /v1/check, /v1/lower and "
                       "/v1/catalogs over HTTP (OpenAPI at /docs); built-in catalogs by "
                       "default.")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000,
                   help="TCP port, 0..65535 (0: any free port; default 8000)")
    add_catalog_dir_arg(p)
    p.add_argument("--writable-catalog-dir", type=Path, metavar="DIR",
                   help="where PUT/DELETE /v1/catalogs write (default: the first "
                   "--catalog-dir); its files override built-in targets of the same name")
    p.add_argument("--token-env", default="PLANNER_TOKEN", metavar="VAR",
                   help="environment variable holding the bearer token for catalog writes "
                   "(default PLANNER_TOKEN; unset: writes disabled)")
    p.add_argument("--workers", type=positive_int, default=2, metavar="N",
                   help="worker threads that parse, solve and lower, 1..256 (default 2)")
    p.add_argument("--cache-size", type=non_negative_int, default=256, metavar="N",
                   help="plans kept in the LRU cache, >= 0 (default 256)")
    p.add_argument("--max-time-limit", type=positive_float, default=60.0, metavar="SECONDS",
                   help="cap on a request's solver time limit, > 0 (default 60)")
    p.add_argument("--max-body-bytes", type=positive_int, default=1 << 20, metavar="N",
                   help="largest request body, >= 1 (default 1 MiB)")
    p.add_argument("--max-graph-ops", type=positive_int, default=5000, metavar="N",
                   help="largest kernel, in ops, >= 1 (default 5000)")
    p.set_defaults(func=cmd_serve)


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """The :class:`planner.server.Settings` the flags describe (``environ`` supplies the token)."""
    from pydantic import ValidationError

    from planner.catalog import env_catalog_dirs
    from planner.server.settings import Settings

    extra = [*args.catalog_dir, *env_catalog_dirs(environ)]
    writable = args.writable_catalog_dir or (args.catalog_dir[0] if args.catalog_dir else None)
    token = environ.get(args.token_env) or None
    try:
        return Settings(host=args.host, port=args.port,
                        catalog_dirs=tuple(d for d in extra if d != writable),
                        writable_catalog_dir=writable, token=token,
                        max_body_bytes=args.max_body_bytes, max_graph_ops=args.max_graph_ops,
                        max_time_limit_s=args.max_time_limit, pool_workers=args.workers,
                        cache_size=args.cache_size)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise error(f"planner serve: {problems}", kind="usage") from None


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from planner.server import create_app

    settings = settings_from_args(args, os.environ)
    app = create_app(settings)
    writes = "enabled" if settings.writes_enabled else "disabled"
    print(f"planner serve: http://{settings.host}:{settings.port}  (catalog writes {writes}; "
          f"OpenAPI at /docs)")
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    return 0
