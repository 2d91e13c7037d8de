"""Sweep tests: each test gets its own plan cache directory (a repeat is a cache hit)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def fresh_plan_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PLANNER_CACHE_DIR", str(cache))
    monkeypatch.delenv("PLANNER_DASK_SCHEDULER", raising=False)
    monkeypatch.delenv("PLANNER_DISK_CACHE", raising=False)
    return cache
