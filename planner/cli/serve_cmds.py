"""``planner serve``: run the HTTP planning service under uvicorn.

The command turns its flags (and the token's environment variable) into a
:class:`planner.server.Settings` and hands it to :func:`planner.server.create_app`;
nothing else reads
the environment.  Catalog writes are enabled only when the variable named by
``--token-env`` holds a token and a writable catalog directory is known.

The command binds the listening socket itself (so ``--port 0`` prints the port it got)
and, with ``--processes N`` (N > 1), forks N server processes that accept on that one
socket, each with its own app, worker pool and plan cache; the parent only supervises
(a process that dies is replaced; SIGINT/SIGTERM stop them all).  They share the
catalog directories: :mod:`planner.server.catalog_store` serializes writes across
processes with a lock file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import time
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
                   help="worker processes that parse, solve and lower (memory- and "
                   "CPU-limited, killed on a deadline or a disconnect), 1..256 (default 2)")
    p.add_argument("--processes", type=positive_int, default=1, metavar="N",
                   help="server processes accepting on the one listening socket, each with "
                   "--workers worker processes and its own plan cache (default 1)")
    p.add_argument("--max-queue", type=non_negative_int, default=16, metavar="N",
                   help="planning jobs that may wait for a worker; one more is answered 503 "
                   "with Retry-After, >= 0 (default 16)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", default=None,
                   help="run POST /v1/sweeps on this Dask scheduler (default "
                   "$PLANNER_DASK_SCHEDULER; unset: a local process pool)")
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
                        cache_size=args.cache_size, max_queue=args.max_queue,
                        sweep_scheduler=(args.scheduler
                                         or environ.get("PLANNER_DASK_SCHEDULER") or None))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise error(f"planner serve: {problems}", kind="usage") from None


def cmd_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, os.environ)
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    try:
        sock = socket.create_server((settings.host, settings.port), family=family,
                                    backlog=2048)
    except OSError as exc:
        raise error(f"planner serve: cannot listen on {settings.host}:{settings.port}: "
                    f"{exc.strerror}", kind="usage") from None
    port = sock.getsockname()[1]
    writes = "enabled" if settings.writes_enabled else "disabled"
    processes = f"; {args.processes} processes" if args.processes > 1 else ""
    print(f"planner serve: http://{settings.host}:{port}  (catalog writes {writes}{processes}; "
          f"OpenAPI at /docs)", flush=True)
    if args.processes == 1:
        _serve(settings, sock)
        return 0
    return _supervise(settings, sock, args.processes)


#: A server process that exits (not killed by a signal) sooner than this after its start
#: failed to start: the supervisor stops rather than fork it again and again.
_STARTUP_S = 10.0


def _serve(settings: Settings, sock: socket.socket) -> None:
    """One server process: a new app on the listening socket ``sock``, until signalled."""
    import uvicorn

    from planner.server import create_app
    from planner.server.protocol import uvicorn_options

    app = create_app(settings)
    # Connection limits: slow heads and idle connections are closed, heads are bounded.
    uvicorn.Server(uvicorn.Config(app, log_level="info", **uvicorn_options(settings))).run(
        sockets=[sock])


def _fork_server(settings: Settings, sock: socket.socket) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: default signal handling until uvicorn installs its own
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _serve(settings, sock)
        code = 0
    except BaseException as exc:  # report it, then leave the forked process
        print(f"planner serve: process {os.getpid()} failed: {exc!r}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _supervise(settings: Settings, sock: socket.socket, processes: int) -> int:
    """Fork ``processes`` servers on ``sock``; replace one killed by a signal or ending
    after it served a while; stop all on SIGINT/SIGTERM, or when one fails as it starts
    (status 1)."""
    children = {_fork_server(settings, sock): time.monotonic() for _ in range(processes)}
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failed = False
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        started = children.pop(pid, time.monotonic())
        if stopping:
            continue
        failed = True
        exited = os.WIFEXITED(status)  # not killed by a signal
        if exited and time.monotonic() - started < _STARTUP_S:  # cannot start: no spinning
            print(f"planner serve: process {pid} failed as it started (status {status}); "
                  "stopping", file=sys.stderr, flush=True)
            stop(signal.SIGTERM, None)
            continue
        print(f"planner serve: process {pid} ended (status {status}); starting another",
              file=sys.stderr, flush=True)
        children[_fork_server(settings, sock)] = time.monotonic()
    sock.close()
    return 1 if failed else 0
