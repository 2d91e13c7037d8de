"""S14 in the lowering: an allocation without loads or stores has no address events, so
the program allocates nothing for it (the planner holds no bytes for it either), while
its explicit resource constraint is still checked."""

from __future__ import annotations

import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.errors import PlannerError
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    coord,
    dims,
    f32,
    mem,
    memory,
    parallel,
    shape,
    tile_kernel,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.lower import build_loop_program, compile_kernel
from planner.solve import Status, plan_kernel


def kernel_with_unused(rows: int, resource=mem.auto_):
    @tile_kernel("unused_memory")
    def kernel(X: TensorView[f32, dims("M", "N")]):
        g = axis("g", ceil_div(X.extent(0), 4))
        for nest in parallel(shape(g)):
            spare = memory[f32](shape(rows, 4), resource)  # noqa: F841
            r0 = nest.index(g) * 4
            X(coord(r0, 0), shape(4, 8)).store(X[coord(r0, 0), shape(4, 8)] * 2.0)

    return kernel


@pytest.mark.parametrize("rows", [0, 16])
def test_s14_unused_memory_is_not_allocated(rows: int) -> None:
    x86 = CatalogRegistry().get("x86-avx2")
    k = kernel_with_unused(rows)
    b = {"M": 10, "N": 8}
    plan = plan_kernel(k, x86, b)
    assert plan.status is Status.OPTIMAL and plan.memories == ()
    program = build_loop_program(k, plan, x86)
    assert [buf.name for buf in program.buffers if buf.role == "memory"] == []
    assert any("has no loads or stores: not allocated" in n for n in program.notes)
    ck = compile_kernel(k, plan, x86)
    for bb in (b, {"M": 1, "N": 8}, {"M": 0, "N": 8}):
        inputs = random_inputs(k, bb, 0)
        want = interpret(k, inputs, bb)
        got = ck({n: v.copy() for n, v in inputs.items()}, bindings=bb)
        np.testing.assert_allclose(got["X"], want["X"], rtol=1e-6)


def test_s14_empty_allocation_never_bypasses_its_resource_constraint() -> None:
    # apple-m2 has no private resource a threadgroup-owned Memory may live in (S17):
    # even an unused, empty one is refused
    m2 = CatalogRegistry().get("apple-m2")
    k = kernel_with_unused(0, mem.private_)
    with pytest.raises(PlannerError, match="no legal home"):
        build_loop_program(k, None, m2)
