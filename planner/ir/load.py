"""Load a kernel named on the command line: an example ``.py``, text IR or JSON IR.

Python examples are executed (they are the user's own code); text and JSON IR are
only parsed.  The HTTP service never calls :func:`load_kernel` on submitted data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner.errors import SourceLoc, error
from planner.ir.core import Kernel
from planner.ir.examples import Example


@dataclass(frozen=True)
class LoadedKernel:
    kernel: Kernel
    source: str
    bindings: Mapping[str, int] = field(default_factory=dict)
    example: Example | None = None

    def expected(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
        """The example's independent reference outputs, or None without an example."""
        return self.example.expected(arrays) if self.example is not None else None


def _example_path(spec: str) -> Path | None:
    from planner.ir.examples import builtin_examples_dir

    candidate = builtin_examples_dir() / f"{spec}.py"
    return candidate if candidate.is_file() else None


def load_kernel(spec: str) -> LoadedKernel:
    """``spec`` is a file path (.py, .json, anything else is text IR) or an example name."""
    path = Path(spec)
    if not path.exists():
        example = _example_path(spec)
        if example is None:
            raise error(f"no such kernel file or built-in example: {spec!r}",
                        SourceLoc(spec, 0), kind="not-found")
        path = example
    if path.suffix == ".py":
        from planner.ir.examples import load_example

        ex = load_example(path)
        return LoadedKernel(ex.kernel, str(path), dict(ex.bindings), ex)
    text = path.read_text()
    if path.suffix == ".json":
        from planner.ir.json_form import kernel_from_json

        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise error(f"invalid JSON: {exc.msg}", SourceLoc(str(path), exc.lineno, exc.colno),
                        kind="parse") from None
        bindings = obj.get("bindings", {}) if isinstance(obj, dict) else {}
        kernel_obj = obj.get("kernel", obj) if isinstance(obj, dict) else obj
        return LoadedKernel(kernel_from_json(kernel_obj), str(path), dict(bindings))
    from planner.ir.parser import parse_kernel

    return LoadedKernel(parse_kernel(text, str(path)), str(path))


def parse_bindings(items: list[str] | None) -> dict[str, int]:
    """``["M=100", "N=7"]`` → ``{"M": 100, "N": 7}``."""
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise error(f"--bind expects NAME=VALUE, got {item!r}", kind="usage")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise error(f"--bind {name.strip()}: {value!r} is not an integer",
                        kind="usage") from None
    return out


#: The range a symbol ranges over when no binding fixes it and no bound is declared.
DEFAULT_SYMBOL_BOUNDS = (0, 2**31 - 1)


def parse_bounds(items: list[str] | None) -> dict[str, tuple[int, int]]:
    """``["N=1..4096", "K=16.."]`` → ``{"N": (1, 4096), "K": (16, 2**31 - 1)}``: declared
    inclusive ranges of kernel symbols (an omitted end is the default range's)."""
    out: dict[str, tuple[int, int]] = {}
    lo_default, hi_default = DEFAULT_SYMBOL_BOUNDS
    for item in items or []:
        name, sep, value = item.partition("=")
        lo_text, dots, hi_text = value.partition("..")
        if not sep or not name.strip() or not dots:
            raise error(f"--bound expects NAME=LO..HI (e.g. N=1..4096), got {item!r}",
                        kind="usage")
        try:
            lo = int(lo_text) if lo_text.strip() else lo_default
            hi = int(hi_text) if hi_text.strip() else hi_default
        except ValueError:
            raise error(f"--bound {name.strip()}: {value!r} is not LO..HI with integer ends",
                        kind="usage") from None
        if lo > hi:
            raise error(f"--bound {name.strip()}={value}: the range is empty ({lo} > {hi})",
                        kind="usage")
        if lo < 0:
            raise error(f"--bound {name.strip()}={value}: symbols are extents and offsets, "
                        f"never negative (lower end {lo} < 0)", kind="usage")
        out[name.strip()] = (lo, hi)
    return out
