"""S17 on Metal: descendant-worker private Memory is per-thread storage; group-owned
private Memory is refused.

A Memory declared inside a nested parallel that the execution binding puts below the
threadgroup (at ``thread`` scope) is owned by the inner parallel; with ``mem.private_``
it resolves to ``thread_registers`` and lowers to ``thread`` arrays (per-thread slices),
never to threadgroup memory.  The same Memory declared directly in the threadgroup-level
parallel has no per-thread meaning and is refused naming the rule, the owner and the
resource.  Results come from the reference interpreter, in both thread orders.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from toolchain import needs_clang

from planner.catalog import CatalogRegistry, Target
from planner.errors import PlannerError
from planner.ir.core import Kernel
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exp,
    f32,
    mem,
    memory,
    parallel,
    shape,
    tile_kernel,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.lower.metal.emitter import emit_msl
from planner.lower.metal.emulator import check_msl
from planner.lower.metal.runtime import run_msl_kernel
from planner.realize.binding import bind_execution
from planner.solve import plan_kernel

SHAPE = {"M": 13, "N": 48}


@pytest.fixture(scope="module")
def m2() -> Target:
    return CatalogRegistry().get("apple-m2")


def worker_private(nesting: str) -> Kernel:
    """Rows of 8 per threadgroup; a nested parallel of 2-row workers, each with private
    scratch ``T`` (96 elements: more than one per thread of the group)."""

    @tile_kernel("worker_private")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("blocks", ceil_div(X.extent(0), 8))
        h, r = axis("halves", 2), axis("rows", 2)
        m, n = axis("m", 2), axis("n", 48)
        for outer in parallel(shape(g)):
            if nesting == "thread":  # one nested parallel, bound to thread scope
                for inner in parallel(shape(axis("workers", 4)), "thread"):
                    ro = outer.index(g) * 8 + inner.index() * 2
                    T = memory[f32](shape(m, n), mem.private_)
                    x = X[coord(ro, 0), shape(m, n)]
                    T.store(x * 2.0 - 1.0)
                    Y(coord(ro, 0), shape(m, n)).store(exp(T.load()) + x)
            else:  # AUTOMATIC twice: simdgroup, then thread
                for mid in parallel(shape(h)):
                    for inner in parallel(shape(r)):
                        ro = outer.index(g) * 8 + mid.index(h) * 4 + inner.index(r) * 2
                        T = memory[f32](shape(m, n), mem.private_)
                        x = X[coord(ro, 0), shape(m, n)]
                        T.store(x * 2.0 - 1.0)
                        Y(coord(ro, 0), shape(m, n)).store(exp(T.load()) + x)

    return kernel


def group_private() -> Kernel:
    @tile_kernel("group_private")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("blocks", ceil_div(X.extent(0), 8))
        m, n = axis("m", 8), axis("n", 48)
        for outer in parallel(shape(g)):
            T = memory[f32](shape(m, n), mem.private_)  # owned by the threadgroup level
            x = X[coord(outer.index(g) * 8, 0), shape(m, n)]
            T.store(x * 2.0 - 1.0)
            Y(coord(outer.index(g) * 8, 0), shape(m, n)).store(exp(T.load()) + x)

    return kernel


@pytest.mark.parametrize("nesting", ["thread", "automatic"])
def test_descendant_worker_memory_is_per_thread(nesting: str, m2: Target) -> None:
    kernel = worker_private(nesting)
    binding = bind_execution(kernel, m2, SHAPE)
    (mb,) = binding.memory_bindings()
    assert (mb.owner_scope, [r.name for r in mb.homes]) == ("thread", ["thread_registers"])
    plan = plan_kernel(kernel, m2, SHAPE)
    assert [(m.name, m.resource) for m in plan.memories] == [("%T", "thread_registers")]
    msl = emit_msl(kernel, plan, m2)
    assert re.search(r"^  float r_T\[2\];$", msl.source, re.M), msl.source  # 96 / 64 threads
    assert "tg_T" not in msl.source  # never in threadgroup memory


@needs_clang
@pytest.mark.parametrize("nesting", ["thread", "automatic"])
def test_descendant_worker_memory_matches_the_interpreter(nesting: str, m2: Target) -> None:
    kernel = worker_private(nesting)
    plan = plan_kernel(kernel, m2, SHAPE)
    msl = emit_msl(kernel, plan, m2)
    check = check_msl(msl.source)
    assert check.ok and not check.warnings, check.render()
    inputs = random_inputs(kernel, SHAPE, seed=9)
    ref = interpret(kernel, inputs, SHAPE)
    for order in ("forward", "reverse"):
        run = run_msl_kernel(kernel, msl, inputs, SHAPE, order=order)
        assert run.report is not None and run.report.groups_run == 2
        assert np.allclose(run.outputs["Y"], ref["Y"], rtol=1e-5, atol=1e-5), order


def test_group_owned_private_memory_is_refused(m2: Target) -> None:
    kernel = group_private()
    plan = plan_kernel(kernel, m2, SHAPE)
    with pytest.raises(PlannerError) as info:
        emit_msl(kernel, plan, m2)
    text = info.value.render()
    assert "[S17]" in text
    assert re.search(r"Memory %T \(private, 1,536 B\) is owned by \w+ at scope threadgroup",
                     text), text
    assert "thread_registers (per thread)" in text and "does not change the owner" in text
