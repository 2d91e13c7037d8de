"""Shared test configuration: a fixed, derandomized hypothesis profile for CI."""

from __future__ import annotations

import faulthandler
import os
import sys
import tempfile
from pathlib import Path

import pytest
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


#: Seconds a test process may take to exit once its tests are done (pytest-timeout bounds
#: each test; this bounds what follows them: threads joined at exit, clusters closing).
EXIT_WATCHDOG_S = 180


def pytest_unconfigure(config: pytest.Config) -> None:
    """A process that does not exit within :data:`EXIT_WATCHDOG_S` after its last test
    prints every thread's stack and exits 1, instead of stalling CI until its cap; only
    a process that exists to run the tests (the ``pytest`` command, an xdist worker), not
    one that called ``pytest.main`` and goes on (a REPL, an IDE)."""
    if _runs_only_the_tests():
        config.get_terminal_writer().flush()  # the watchdog's exit flushes nothing
        sys.stdout.flush()
        sys.stderr.flush()
        faulthandler.dump_traceback_later(EXIT_WATCHDOG_S, exit=True)


def _runs_only_the_tests() -> bool:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return True
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    return script.name in ("pytest", "py.test") or (
        script.name == "__main__.py" and script.parent.name == "pytest")
