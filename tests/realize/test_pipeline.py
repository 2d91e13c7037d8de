"""S18: a recurrence through outer Memory keeps a pipeline ordered, so neither the plan nor
the program keeps more than one version of anything in it (one rule: realize.pipeline)."""

from __future__ import annotations

import numpy as np

from planner.catalog import CatalogRegistry
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    memory,
    parallel,
    shape,
    tile_kernel,
    zeros,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.lower import build_loop_program, compile_kernel
from planner.realize.pipeline import KernelIndex, pipeline_schedule
from planner.solve import Status, plan_kernel


def staged_running_sum(window: int):
    """Bs is stored in stage load and read in stage compute (it would want two versions
    in an overlapped pipeline); acc is read in the state of the previous iteration."""

    @tile_kernel("staged_running_sum")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gm = axis("bm", ceil_div(X.extent(0), 4))
        kt = axis("kt", ceil_div(X.extent(1), 8))
        m = axis("m", 4)
        n = axis("n", 8)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            acc = memory[f32](shape(m, n))
            Bs = memory[f32](shape(m, n))
            acc.store(zeros[f32](shape(m, n)))
            for step in nest.pipeline(shape(kt), window=window):
                step.stage("load")
                Bs.store(X[coord(r0, step.index() * 8), shape(m, n)])
                step.stage("compute")
                acc.store(acc.load() + Bs.load())
            Y(coord(r0, 0), shape(m, n)).store(acc.load())

    return kernel


def test_s18_ordered_recurrence_gets_one_version_everywhere() -> None:
    x86 = CatalogRegistry().get("x86-avx2")
    k = staged_running_sum(window=3)
    loop = next(op for op in k.walk() if getattr(op, "window", 1) == 3)
    reason = pipeline_schedule(loop, KernelIndex(k, lambda v: "?"))
    assert isinstance(reason, str) and "recurrence through outer Memory" in reason
    b = {"M": 10, "N": 29}
    plan = plan_kernel(k, x86, b)
    assert plan.status is Status.OPTIMAL
    assert [(m.name, m.versions, m.max_versions) for m in plan.memories] == [
        ("%acc", 1, 1), ("%Bs", 1, 1)]
    assert all(e.versions == 1 for e in plan.edges)
    program = build_loop_program(k, plan, x86)
    assert {buf.name: buf.versions for buf in program.buffers
            if buf.role == "memory"} == {"acc": 1, "Bs": 1}
    ck = compile_kernel(k, plan, x86)
    for bb in (b, {"M": 1, "N": 1}, {"M": 3, "N": 0}):
        inputs = random_inputs(k, bb, 0)
        want = interpret(k, inputs, bb)["Y"]
        np.testing.assert_allclose(ck(dict(inputs), bindings=bb)["Y"], want, rtol=1e-5,
                                   atol=1e-5)
