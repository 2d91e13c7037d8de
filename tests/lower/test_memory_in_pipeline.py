"""Memory declared inside a pipeline body (S7, S18).

The nearest spatial parallel owns it (one allocation per instance); the pipeline only
contributes its lifetime and the versions the planner derives.  A manual GEMM whose
``As``/``Bs`` are declared in the pipeline's load stage plans on x86-avx2, lowers, and
runs like the reference interpreter for odd sizes, one element and an empty K, with
windows 1, 2 and 3.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from planner.catalog import CatalogRegistry, Target
from planner.ir.core import Kernel
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    layout,
    memory,
    mma,
    parallel,
    shape,
    stride,
    tile_kernel,
    zeros,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.lower import compile_kernel
from planner.lower.loops.program import Pipeline, walk_stmts
from planner.solve.planner import plan_kernel

BM, BN, BK = 16, 16, 8


@functools.cache
def x86() -> Target:
    return CatalogRegistry().get("x86-avx2")


def make_inner_memory_gemm(window: int) -> Kernel:
    @tile_kernel("inner_memory_gemm")
    def gemm(A: TensorView[const(f32), dims("M", "K")],
             B: TensorView[const(f32), dims("K", "N")],
             C: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(A.extent(0), BM))
        gn = axis("block_n", ceil_div(B.extent(1), BN))
        kt = axis("k_tiles", ceil_div(A.extent(1), BK))
        m, n, k = axis("m", BM), axis("n", BN), axis("k", BK)
        for nest in parallel(shape(gm, gn)):
            m0 = nest.index(gm) * BM
            n0 = nest.index(gn) * BN
            acc = zeros[f32](shape(m, n))
            for step in nest.pipeline(shape(kt), window=window, interval=1):
                k0 = step.index() * BK
                step.stage("load")
                As = memory[f32](layout(shape(m, k), stride(BK + 1, 1)))
                Bs = memory[f32](shape(k, n))
                As.store(A[coord(m0, k0), shape(m, k)])
                Bs.store(B[coord(k0, n0), shape(k, n)])
                step.stage("compute")
                acc = mma(As.load(), Bs.load(), acc)
            C(coord(m0, n0), shape(m, n)).store(acc)

    return gemm


@pytest.mark.parametrize("window", [1, 2, 3])
def test_s7_memory_declared_in_a_pipeline_lowers_and_runs(window: int) -> None:
    kernel = make_inner_memory_gemm(window)
    planned = dict(M=37, N=29, K=43)
    plan = plan_kernel(kernel, x86(), planned)
    assert plan.status.value == "optimal"
    assert {m.name for m in plan.memories} == {"%As", "%Bs"}
    ck = compile_kernel(kernel, plan, x86())
    program = ck.loop_program
    # owned by the parallel: buffers of the segment, versioned by the pipeline
    (segment,) = program.segments
    assert {"As", "Bs"} <= set(segment.buffers)
    pipelined = any(isinstance(s, Pipeline) for s in walk_stmts(segment.body))
    assert pipelined == (window > 1)
    versions = {m.name: m.versions for m in plan.memories}
    for name in ("As", "Bs"):
        assert program.buffer(name).versions >= (2 if pipelined else 1)
        assert program.buffer(name).versions >= versions["%" + name]
    assert [s.const_value() for s in program.buffer("As").layout.strides] == [BK + 1, 1]
    for b in (planned, dict(M=1, N=1, K=1), dict(M=5, N=3, K=0), dict(M=17, N=16, K=9)):
        inputs = random_inputs(kernel, b, 3)
        want = interpret(kernel, inputs, b)["C"]
        for threads in (1, 2):
            got = ck({k: v.copy() for k, v in inputs.items()}, bindings=b, threads=threads)
            np.testing.assert_allclose(got["C"], want, rtol=2e-5, atol=2e-5,
                                       err_msg=f"window {window} at {b}, {threads} threads")
