"""The sweep's plan cache: plan JSON on disk, keyed by the plan's content hash.

The key is :func:`planner.solve.planner.content_hash` of the instance (its printed
structure, configuration included), the catalog, the bindings and the policy, so the
same question is answered once: a repeat of a sweep is served from here without
submitting a task.  Entries live under ``plans/`` of the user's cache directory
(:func:`planner.lower.cpu.jit.cache_dir`: ``$PLANNER_CACHE_DIR``, else
``$XDG_CACHE_HOME/planner``, else ``~/.cache/planner``; ``PLANNER_DISK_CACHE=0`` turns
it off, as for compiled kernels).  Only deterministic answers are kept (optimal and
infeasible plans; a plan cut short by the time limit is not).  The client writes the
entries as results arrive, so Dask workers need no shared disk.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["PlanCache", "default_plan_cache"]

KEPT_STATUSES = ("optimal", "infeasible")


class PlanCache:
    """Plan JSON files ``<root>/<hash[:2]>/<hash>.json``; I/O errors only cost the cache."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def load(self, key: str) -> Any | None:
        """The cached MaterializationPlan, or None."""
        from planner.errors import PlannerError
        from planner.plan.plan_io import plan_from_json

        try:
            return plan_from_json(json.loads(self.path(key).read_text()))
        except (OSError, ValueError, PlannerError):  # missing, unreadable or stale entry
            return None

    def store(self, key: str, plan_json: dict[str, Any]) -> bool:
        if plan_json.get("status") not in KEPT_STATUSES:
            return False
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(plan_json, f)
            os.replace(tmp, path)  # atomic: a concurrent reader sees all or nothing
        except OSError:
            return False
        return True


def default_plan_cache() -> PlanCache | None:
    """The cache under the user's cache directory, or None with ``PLANNER_DISK_CACHE=0``."""
    if os.environ.get("PLANNER_DISK_CACHE", "1").strip().lower() in ("0", "off", "no",
                                                                     "false"):
        return None
    from planner.lower.cpu.jit import cache_dir

    return PlanCache(cache_dir() / "plans")
