"""The tracing frontend: staged Tiles promoted to SSA, Memory identity, source lines."""

from __future__ import annotations

import copy
import inspect

import manual_gemm
import pytest

from planner.errors import PlannerError
from planner.ir import core
from planner.ir.frontend import (
    TensorView,
    axis,
    const,
    coord,
    dims,
    f32,
    memory,
    parallel,
    serial,
    shape,
    tile_kernel,
    zeros,
)
from planner.ir.types import StateType, TileType


def ops(kernel, cls):
    return [op for op in kernel.walk() if isinstance(op, cls)]


def test_s1_rebinding_in_a_temporal_region_becomes_a_loop_carried_value():
    kernel = manual_gemm.kernel()
    (loop,) = ops(kernel, core.LoopOp)
    kinds = [type(a.type) for a in loop.body.args]
    assert kinds == [TileType, StateType, StateType]
    assert [a.name_hint for a in loop.body.args] == ["acc", "As", "Bs"]
    (mma,) = ops(kernel, core.MmaOp)
    assert mma.acc is loop.body.args[0]  # the body sees the carried value, not the zeros
    yielded = loop.body.ops[-1]
    assert isinstance(yielded, core.YieldOp) and yielded.values[0] is mma.result
    (store,) = [op for op in ops(kernel, core.StoreOp)]
    assert store.tile is loop.results[0]  # after the loop: the value after the last iteration
    assert loop.stages == ("load", "compute")
    assert {op.stage for op in loop.body.ops[:-1]} == {"load", "compute"}


def test_ops_record_the_users_file_and_line():
    kernel = manual_gemm.kernel()
    src, _ = inspect.getsourcelines(manual_gemm)
    lines = {op.SPEC.name: op.loc.line for op in kernel.walk()}
    mma_line = next(i for i, t in enumerate(src, 1) if "acc = mma(" in t)
    assert lines["tile.mma"] == mma_line
    assert all(op.loc.file.endswith("manual_gemm.py") for op in kernel.walk())


def test_s10_memory_is_movable_not_copyable():
    seen = {}

    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        for _nest in parallel(shape(axis("g", 2))):
            buf = memory[f32](shape(4))
            with pytest.raises(TypeError, match="movable, not copyable"):
                copy.copy(buf)
            with pytest.raises(TypeError, match="movable, not copyable"):
                copy.deepcopy(buf)
            seen["ok"] = True

    assert seen["ok"]


def test_rebinding_an_outer_tile_inside_parallel_is_refused():
    with pytest.raises(PlannerError, match="rebound inside it") as info:
        @tile_kernel("k")
        def kernel(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
            acc = zeros[f32](shape(4))
            for _nest in parallel(shape(axis("g", 2))):
                acc = acc + X[coord(0), shape(4)]
            Y(coord(0), shape(4)).store(acc)

    assert info.value.diagnostics[0].rule == "S1"


def test_zero_trip_semantics_and_nested_carries():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        for _nest in parallel(shape(axis("g", 1))):
            acc = zeros[f32](shape(4))
            for i in serial(shape(axis("i", 3))):
                for j in serial(shape(axis("j", 2))):
                    acc = acc + X[coord(i.index() * 2 + j.index()), shape(4)]
            Y(coord(0), shape(4)).store(acc)

    outer, inner = ops(kernel, core.LoopOp)
    assert len(outer.inits) == len(inner.inits) == 1
    assert inner.inits[0] is outer.body.args[0]
    assert outer.body.ops[-1].values[0] is inner.results[0]


def test_tiles_outside_a_kernel_are_refused():
    with pytest.raises(PlannerError, match="only be used inside a @tile_kernel"):
        zeros[f32](shape(4))


def _named_kernel() -> core.Kernel:
    from planner.ir.frontend import exp

    def halve(t):  # a user helper: its locals name what it builds
        half = t * 0.5
        return half

    @tile_kernel("named")
    def k(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        n = axis("n", 8)
        for nest in parallel(shape(axis("g", 4))):
            at = coord(nest.index(axis("g", 4)) * 8)
            x = X[at, shape(n)]
            x = exp(x)  # rebinding: the old and the new value are both "x"
            scaled = halve(x) + 1.0
            Y(at, shape(n)).store(scaled)

    return k


def test_tiles_keep_the_users_variable_names():
    from planner.ir.json_form import kernel_to_json
    from planner.ir.printer import print_kernel

    kernel = _named_kernel()
    hints = [op.result.name_hint for op in kernel.walk()
             if getattr(op, "results", None) and isinstance(op.result.type, TileType)]
    # load, exp, mul (in halve: returned, so never bound where a later op is built),
    # the constant 1.0, add
    assert [h for h in hints if h] == ["x", "x", "scaled"] and hints[-1] == "scaled"
    text = print_kernel(kernel, locations=False)
    for line in ('%x = "tile.load"', '%x_0 = "tile.unary"(%x)', '= "tile.binary"(%x_0',
                 '"tile.store"(%Y, %scaled)'):
        assert line in text, text
    ids = {r["id"] for op in kernel_to_json(kernel)["body"]["ops"][0]["regions"][0]["ops"]
           for r in op.get("results", [])}
    assert {"x", "x_0", "scaled"} <= ids
