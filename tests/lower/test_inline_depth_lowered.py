"""Plans cut by the inline depth limit run and agree with the interpreter.

A chain of 12 elementwise steps planned with a limit of 3 is cut into short fused
pieces, each cut stored and read back; the compiled kernel matches the numpy reference
interpreter on shapes that are not multiples of the 4-row tile, including a single
element and an empty one.
"""

from __future__ import annotations

import pytest

from planner.catalog import CatalogRegistry
from planner.ir.core import Kernel
from planner.ir.frontend import (
    TensorView,
    abs_,
    axis,
    broadcast,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    parallel,
    reduce_sum,
    shape,
    tanh,
    tile_kernel,
)
from planner.lower import compile_kernel
from planner.lower.cpu.runtime import KernelCache
from planner.plan.decisions import Decision
from planner.solve.planner import plan_kernel
from tests.lower.test_cpu_backend import check


def _tanh_chain(steps: int) -> Kernel:
    @tile_kernel(f"tanh_chain_{steps}")
    def tanh_chain(X: TensorView[const(f32), dims("M", "N")],
                   Y: TensorView[f32, dims("M", "N")]) -> None:
        gm = axis("block_m", ceil_div(X.extent(0), 4))
        m, n = axis("m", 4), axis("n", X.extent(1))
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            x = X[coord(r0, 0), shape(m, n)]
            y = x
            for _ in range(steps):
                y = tanh(y * 0.5) + 0.1
            s = reduce_sum(abs_(y), axis=1) + 1.0
            Y(coord(r0, 0), shape(m, n)).store(y / broadcast(s, shape(m, n), dims=(0,)))

    return tanh_chain


@pytest.mark.parametrize("bindings", [{"M": 37, "N": 13}, {"M": 1, "N": 1},
                                      {"M": 0, "N": 5}, {"M": 6, "N": 70}])
def test_a_chain_cut_by_the_limit_matches_the_interpreter(bindings: dict[str, int]) -> None:
    kernel = _tanh_chain(12)
    target = CatalogRegistry().get("x86-avx2")
    plan = plan_kernel(kernel, target, {"M": 37, "N": 13}, max_inline_depth=3)
    inlined = [e for e in plan.edges if e.decision in (Decision.FUSED, Decision.RECOMPUTED)]
    cuts = [e for e in plan.edges if "the inline depth limit of 3" in e.reason]
    assert inlined and cuts
    ck = compile_kernel(kernel, plan, target, cache=KernelCache())
    check(kernel, ck, bindings)
