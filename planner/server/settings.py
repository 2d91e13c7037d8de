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
    default_time_limit_s: float = Field(10.0, gt=0, description="solver limit when none is asked")
    max_time_limit_s: float = Field(60.0, gt=0, description="cap on a request's time_limit")
    pool_workers: int = Field(2, ge=1, le=256, description="threads that parse, solve and lower")
    solver_workers: int = Field(1, ge=1, le=64, description="CP-SAT search workers per solve")
    cache_size: int = Field(256, ge=0, description="plans kept in the LRU plan cache")
    max_compare_variants: int = Field(8, ge=1, le=64, description="variants per /v1/compare")

    def time_limit(self, asked: float | None) -> float:
        """The solver time limit for a request: its own (or the default), capped."""
        return min(asked if asked is not None else self.default_time_limit_s,
                   self.max_time_limit_s)

    @property
    def writes_enabled(self) -> bool:
        return self.token is not None and self.writable_catalog_dir is not None
