"""Shared test configuration: a fixed, derandomized hypothesis profile for CI."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "planner" / "examples"
SUPPORT = ROOT / "tests"  # test-support modules shared across folders (live_http)
for path in (EXAMPLES, SUPPORT):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# Compiled kernels are cached on disk (planner.lower.cpu.jit); the suite keeps its own.
os.environ.setdefault("PLANNER_CACHE_DIR", tempfile.mkdtemp(prefix="planner-test-cache-"))

settings.register_profile(
    "ci", max_examples=60, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci")
