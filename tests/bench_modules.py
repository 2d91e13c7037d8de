"""The benchmarks' kernel builders, loaded by path (``bench/`` is not a package), so a test
and its benchmark build the very same kernel instead of two copies of it."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


@functools.cache
def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
