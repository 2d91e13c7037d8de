"""The service's configuration: one frozen object, built by the CLI or a test and passed down.

Nothing here reads the environment or the command line; :func:`server.create_app` takes
a :class:`Settings` and every router reaches it through the app's :class:`Service`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class Settings(BaseModel):
    """Limits, catalog directories and credentials of one service instance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field("127.0.0.1", description="interface uvicorn binds to")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0: any free port)")
    catalog_dirs: tuple[Path, ...] = Field(
        (), description="extra read-only catalog directories, searched before the built-ins")
    writable_catalog_dir: Path | None = Field(
        None, description="where PUT/DELETE /v1/catalogs write; searched first, so a file "
        "here overrides a built-in target of the same name; None disables writes")
    token: SecretStr | None = Field(
        None, description="bearer token required by catalog writes; None disables writes")
    max_body_bytes: int = Field(1 << 20, gt=0, description="largest accepted request body")
    max_graph_ops: int = Field(5000, gt=0, description="largest accepted kernel, in ops")
    max_model_size: int = Field(
        1_000_000, gt=0, description="largest planning model, as planner.solve."
        "estimate_model_size counts it before building (edges, inlining sites, holder-points); "
        "a larger kernel is answered 413 with the figure and this limit")
    default_time_limit_s: float = Field(10.0, gt=0, description="solver limit when none is asked")
    max_time_limit_s: float = Field(60.0, gt=0, description="cap on a request's time_limit")
    pool_workers: int = Field(2, ge=1, le=256, description="threads that parse, solve and lower")
    solver_workers: int = Field(1, ge=1, le=64, description="CP-SAT search workers per solve")
    cache_size: int = Field(256, ge=0, description="plans kept in the LRU plan cache")
    sweep_scheduler: str | None = Field(
        None, description="Dask scheduler (tcp://HOST:PORT) that runs /v1/sweeps jobs; None: "
        "a local process pool sized to the machine")
    max_compare_variants: int = Field(8, ge=1, le=64, description="variants per /v1/compare")
    max_queue: int = Field(16, ge=0, le=4096, description="planning jobs that may wait for "
                           "a worker; one more is answered 503 with Retry-After")
    retry_after_s: int = Field(2, ge=1, description="the Retry-After of a 503 overloaded")
    worker_memory_mb: int | None = Field(
        4096, ge=256, description="address-space limit of each worker process (RLIMIT_AS), "
        "MiB; None: no limit")
    worker_cpu_s: float | None = Field(
        None, gt=0, description="CPU seconds one job may use in its worker (RLIMIT_CPU); "
        "None: twice the largest time limit (solver workers counted) plus 30 s")
    body_timeout_s: float = Field(30.0, gt=0, description="time to receive a request body "
                                  "once its headers arrived; slower is 408")
    head_timeout_s: float = Field(10.0, gt=0, description="time for a request head (the "
                                  "request line and headers) to arrive; slower connections "
                                  "are closed")
    keep_alive_s: float = Field(5.0, gt=0, description="idle keep-alive connections are "
                                "closed after this long (uvicorn timeout_keep_alive)")
    max_connections: int = Field(512, ge=1, description="concurrent connections and "
                                 "requests; more are answered 503 (uvicorn limit_concurrency)")
    max_header_bytes: int = Field(64 * 1024, ge=1024, description="largest request head "
                                  "(uvicorn h11_max_incomplete_event_size)")

    def time_limit(self, asked: float | None) -> float:
        """The solver time limit for a request: its own (or the default), capped."""
        return min(asked if asked is not None else self.default_time_limit_s,
                   self.max_time_limit_s)

    def job_cpu_s(self) -> float:
        """The CPU-time limit of one job (``worker_cpu_s`` or its default)."""
        if self.worker_cpu_s is not None:
            return self.worker_cpu_s
        return 2 * self.max_time_limit_s * self.solver_workers + 30.0

    @property
    def writes_enabled(self) -> bool:
        return self.token is not None and self.writable_catalog_dir is not None
