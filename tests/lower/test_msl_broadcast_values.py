"""A value fused into a broadcast is never computed per broadcast element on Metal.

The cost model prices a producer fused into a broadcast by the producer's own elements
(layernorm's ``rsqrt(var + eps)``: one per row), and the CPU backend hoists it out of
the loop over the broadcast axis.  The Metal emitter keeps it per thread: each thread
evaluates it when the row changes (once per thread and row), inside the row-change
guard, and adds no threadgroup buffer the plan does not hold.  The structure is read
from the emitted source; results come from the interpreter.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from toolchain import needs_clang

from planner.catalog import CatalogRegistry, Target
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    broadcast,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    parallel,
    rsqrt,
    shape,
    tile_kernel,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.lower.metal.emitter import emit_msl
from planner.lower.metal.emulator import check_msl
from planner.lower.metal.runtime import run_msl_kernel
from planner.solve import plan_kernel

SHAPE = {"M": 13, "N": 70}
PLANS = (None, "all-materialize", "greedy-fusion", "all-virtual")
_FOR = re.compile(r"^\s*for \(long (\w+) = [^;]*; \1 < (.*?); ")
_DECL = re.compile(r"^\s*const long (\w+) = ")


@pytest.fixture(scope="module")
def m2() -> Target:
    return CatalogRegistry().get("apple-m2")


def enclosing(source: str, needle: str) -> list[tuple[list[tuple[str, str]], set[str]]]:
    """For each line containing ``needle``: the ``for`` loops around it (variable, trip
    count; outermost first) and the index variables declared in the blocks around it."""
    out = []
    stack: list[tuple[tuple[str, str] | None, set[str]]] = []
    for line in source.splitlines():
        code = line.split("//", 1)[0]
        if needle in code:
            loops = [f for f, _ in stack if f is not None]
            names = set().union(*(d for _, d in stack)) if stack else set()
            out.append((loops, names))
        m = _DECL.match(code)
        if m and stack:
            stack[-1][1].add(m.group(1))
        for ch in code:
            if ch == "{":
                f = _FOR.match(code)
                stack.append(((f.group(1), f.group(2)) if f else None, set()))
            elif ch == "}":
                stack.pop()
    assert not stack
    return out


_CACHED = re.compile(r"\s*if \(i_0 != (hk\d+_)\) \{ \1 = i_0; ")


@pytest.mark.parametrize("baseline", PLANS)
def test_rsqrt_is_not_evaluated_per_broadcast_element(baseline: str | None,
                                                      m2: Target) -> None:
    kernel = load_example(builtin_examples_dir() / "layernorm.py").kernel
    plan = plan_kernel(kernel, m2, SHAPE, baseline=baseline)
    msl = emit_msl(kernel, plan, m2)
    sites = enclosing(msl.source, "rsqrt(")
    assert len(sites) == 1, msl.source  # one evaluation site in the kernel
    line = next(ln for ln in msl.source.splitlines() if "rsqrt(" in ln.split("//")[0])
    if _CACHED.match(line):  # fused into the broadcast: evaluated when the row changes
        assert any("kept per thread" in n for n in msl.notes)
    else:  # its own statement, over the rows only (no column index, no loop over N)
        loops, declared = sites[0]
        assert "i_1" not in declared and all("N" not in trip for _, trip in loops), line


@needs_clang
@pytest.mark.parametrize("baseline", PLANS)
def test_layernorm_with_row_values_kept_per_thread_matches_the_interpreter(
        baseline: str | None, m2: Target) -> None:
    kernel = load_example(builtin_examples_dir() / "layernorm.py").kernel
    plan = plan_kernel(kernel, m2, SHAPE, baseline=baseline)
    msl = emit_msl(kernel, plan, m2)
    check = check_msl(msl.source)
    assert check.ok and not check.warnings, check.render()
    peak = next((p.peak_bytes for p in plan.peaks if p.resource == "threadgroup_memory"), 0)
    assert msl.threadgroup_bytes == peak  # only the plan's buffers
    inputs = random_inputs(kernel, SHAPE, seed=5)
    ref = interpret(kernel, inputs, SHAPE)
    for order in ("forward", "reverse"):
        out = run_msl_kernel(kernel, msl, inputs, SHAPE, order=order).outputs
        assert np.allclose(out["Y"], ref["Y"], rtol=1e-4, atol=1e-4), (baseline, order)


@tile_kernel("row_scale")
def row_scale(X: TensorView[const(f32), dims("M", "N")], S: TensorView[const(f32), dims("M")],
              Y: TensorView[f32, dims("M", "N")]):
    g = axis("blocks", ceil_div(X.extent(0), 4))
    m, n = axis("m", 4), axis("n", X.extent(1))
    for nest in parallel(shape(g)):
        r0 = nest.index(g) * 4
        x = X[coord(r0, 0), shape(m, n)]
        s = S[coord(r0), shape(m)]
        Y(coord(r0, 0), shape(m, n)).store(
            x * broadcast(rsqrt(s * s + 1.0), shape(m, n), dims=(0,)))


@needs_clang
def test_without_threadgroup_bytes_each_thread_keeps_the_row_value(m2: Target) -> None:
    """Greedy fusion puts the whole chain (load of S, rsqrt, broadcast, scale) into the
    store and plans no threadgroup memory: the emitter adds none (the plan's peak is 0 B),
    so each thread keeps the row's rsqrt while the row stays the same (once per thread
    and row, never per element) and says so; the result does not change."""
    plan = plan_kernel(row_scale, m2, SHAPE, baseline="greedy-fusion")
    assert not [p for p in plan.peaks if p.resource == "threadgroup_memory"]
    msl = emit_msl(row_scale, plan, m2)
    check = check_msl(msl.source)
    assert check.ok and not check.warnings, check.render()
    assert msl.threadgroup_bytes == 0 and "tg_arena_" not in msl.source
    assert any("kept per thread" in n for n in msl.notes)
    assert len(enclosing(msl.source, "rsqrt(")) == 1
    line = next(ln for ln in msl.source.splitlines() if "rsqrt(" in ln.split("//")[0])
    assert _CACHED.match(line), line
    inputs = random_inputs(row_scale, SHAPE, seed=6)
    ref = interpret(row_scale, inputs, SHAPE)
    for order in ("forward", "reverse"):
        out = run_msl_kernel(row_scale, msl, inputs, SHAPE, order=order).outputs
        assert np.allclose(out["Y"], ref["Y"], rtol=1e-5, atol=1e-5), order
