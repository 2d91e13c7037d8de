"""Verifier: one test per rejected case, each asserting rule, object and user line."""

from __future__ import annotations

import inspect

import pytest

from planner.errors import PlannerError
from planner.ir import core
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    layout,
    mem,
    memory,
    parallel,
    serial,
    shape,
    stride,
    tile_kernel,
)
from planner.ir.verify import collect_diagnostics, remove_unused_empty_allocs, verify


def line_of(marker: str) -> int:
    """The line of this file carrying ``# <marker>``."""
    src = inspect.getsource(inspect.getmodule(line_of))
    for i, text in enumerate(src.splitlines(), start=1):
        if text.rstrip().endswith(f"# {marker}"):
            return i
    raise AssertionError(marker)


def errors_of(kernel, bindings=None):
    return collect_diagnostics(kernel, bindings)


def only_error(kernel, bindings=None):
    diags = errors_of(kernel, bindings)
    assert len(diags) == 1, [d.render() for d in diags]
    return diags[0]


def copy_kernel(shape_m=8):
    m = axis("m", shape_m)
    n = axis("n", 4)

    @tile_kernel("copy")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", ceil_div(X.extent(0), shape_m))
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * shape_m
            buf = memory[f32](shape(m, n))
            buf.store(X[coord(r0, 0), shape(m, n)])
            Y(coord(r0, 0), shape(m, n)).store(buf.load())

    return kernel


def test_valid_kernel_passes():
    verify(copy_kernel())


def test_s10_read_before_definite_store():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        for _nest in parallel(shape(g)):
            buf = memory[f32](shape(4, 4))
            Y(coord(0, 0), shape(4, 4)).store(buf.load())  # read-before-store

    d = only_error(kernel)
    assert d.rule == "S10"
    assert "before a definite store" in d.message and "never stored" in d.message
    assert d.loc.line == line_of("read-before-store")


def test_s10_init_only_inside_loop_that_may_run_zero_times():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        kt = axis("k_tiles", ceil_div(X.extent(1), 4))
        for _nest in parallel(shape(g)):
            buf = memory[f32](shape(4, 4))
            for step in serial(shape(kt)):
                buf.store(X[coord(0, step.index() * 4), shape(4, 4)])
            Y(coord(0, 0), shape(4, 4)).store(buf.load())  # zero-trip-read

    d = only_error(kernel)
    assert d.rule == "S10"
    assert "loop 'k_tiles', which may run zero times" in d.message
    assert "ceildiv(N, 4)" in d.message
    assert d.loc.line == line_of("zero-trip-read")


def test_loop_with_known_positive_trip_count_initializes():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        kt = axis("k_tiles", 3)
        for _nest in parallel(shape(g)):
            buf = memory[f32](shape(4, 4))
            for step in serial(shape(kt)):
                buf.store(X[coord(0, step.index() * 4), shape(4, 4)])
            Y(coord(0, 0), shape(4, 4)).store(buf.load())

    verify(kernel)
    # ...and with symbolic extents, bindings that make the trip count positive suffice
    verify(copy_kernel(), {"M": 8, "N": 4})


def _two_stores_kernel():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        for _nest in parallel(shape(g)):
            a = memory[f32](shape(4, 4))
            b = memory[f32](shape(4, 4))
            a.store(X[coord(0, 0), shape(4, 4)])
            b.store(X[coord(4, 0), shape(4, 4)])
            a.store(X[coord(8, 0), shape(4, 4)])
            Y(coord(0, 0), shape(4, 4)).store(a.load())  # the-load

    return kernel


def _ops(kernel, cls):
    return [op for op in kernel.walk() if isinstance(op, cls)]


def test_s15_reuse_of_old_state_after_store():
    kernel = _two_stores_kernel()
    verify(kernel)
    load = _ops(kernel, core.MemLoadOp)[0]
    first_store = _ops(kernel, core.MemStoreOp)[0]
    load.state = first_store.result  # the state before the second store of `a`
    d = only_error(kernel)
    assert d.rule == "S15" and "uses an old state" in d.message and "%a" in d.message
    assert d.loc.line == line_of("the-load")


def test_s15_swapping_same_typed_states_between_memories():
    kernel = _two_stores_kernel()
    load = _ops(kernel, core.MemLoadOp)[0]
    b_store = _ops(kernel, core.MemStoreOp)[1]
    load.state = b_store.result  # same type, other memory
    d = only_error(kernel)
    assert d.rule == "S15"
    assert "on memory %a uses a state of memory %b" in d.message


def test_s15_dominance_violation():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        t = axis("t", 3)
        for _nest in parallel(shape(g)):
            for _step in serial(shape(t)):
                inner = X[coord(0, 0), shape(4, 4)]
            Y(coord(0, 0), shape(4, 4)).store(inner)  # dominance

    d = only_error(kernel)
    assert d.rule == "S15" and "does not dominate" in d.message
    assert d.loc.line == line_of("dominance")
    assert d.notes and "defined here" in d.notes[0][1]


def test_s16_ancestor_write_in_child_parallel_rejected_read_accepted():
    @tile_kernel("k")
    def writes(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        w = axis("w", 4)
        for _nest in parallel(shape(g)):
            buf = memory[f32](shape(4, 4))
            buf.store(X[coord(0, 0), shape(4, 4)])
            for _inner in parallel(shape(w)):
                buf.store(X[coord(4, 0), shape(4, 4)])  # child-write
            Y(coord(0, 0), shape(4, 4)).store(buf.load())

    d = only_error(writes)
    assert d.rule == "S16" and "not supported yet" in d.message and "%buf" in d.message
    assert d.loc.line == line_of("child-write")

    @tile_kernel("k")
    def reads(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        w = axis("w", 4)
        for _nest in parallel(shape(g)):
            buf = memory[f32](shape(4, 4))
            buf.store(X[coord(0, 0), shape(4, 4)])
            for inner in parallel(shape(w)):
                Y(coord(inner.index(w) * 4, 0), shape(4, 4)).store(buf.load())

    verify(reads)


@pytest.mark.parametrize("strides, expect", [
    ((1, 1), "elements [0, 1] and [1, 0] both map to offset 1"),
    ((0, 1), "is a broadcast map (stride 0 on dim 0)"),
])
def test_s13_non_injective_layout_rejected(strides, expect):
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        m, n = axis("m", 4), axis("n", 4)
        for _nest in parallel(shape(g)):
            buf = memory[f32](layout(shape(m, n), stride(*strides)))  # bad-layout
            buf.store(X[coord(0, 0), shape(m, n)])
            Y(coord(0, 0), shape(m, n)).store(buf.load())

    d = only_error(kernel)
    assert d.rule == "S13" and expect in d.message and "%buf" in d.message
    assert d.loc.line == line_of("bad-layout")


def test_s14_zero_sized_allocation_with_uses_rejected_and_unused_removed():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        for _nest in parallel(shape(g)):
            unused = memory[f32](shape(0, 1 << 62), mem.shared)  # noqa: F841
            used = memory[f32](shape(4, 0))  # empty-used
            used.store(X[coord(0, 0), shape(4, 0)])
            Y(coord(0, 0), shape(4, 0)).store(used.load())

    d = only_error(kernel)
    assert d.rule == "S14" and "empty logical domain [4, 0]" in d.message
    assert d.loc.line == line_of("empty-used")
    removed = remove_unused_empty_allocs(kernel)
    assert len(removed) == 1 and removed[0].layout.shape[0].const_value() == 0
    assert len(_ops(kernel, core.AllocOp)) == 1


def test_s14_signed_64_bit_byte_addressing_overflow():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        for _nest in parallel(shape(g)):
            huge = memory[f32](shape(1 << 31, 1 << 31))  # huge
            huge.store(X[coord(0, 0), shape(1 << 31, 1 << 31)])

    d = only_error(kernel)
    assert d.rule == "S14" and "overflow signed 64-bit byte addressing" in d.message
    assert str(4 * (1 << 62)) in d.message
    assert d.loc.line == line_of("huge")


def test_s5_resource_the_owner_cannot_have():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        buf = memory[f32](shape(4, 4), mem.shared)  # root-shared
        buf.store(X[coord(0, 0), shape(4, 4)])
        Y(coord(0, 0), shape(4, 4)).store(buf.load())

    d = only_error(kernel)
    assert d.rule == "S5" and "owned by the kernel root" in d.message and "'shared'" in d.message
    assert d.loc.line == line_of("root-shared")


def test_all_errors_are_collected_before_raising():
    @tile_kernel("k")
    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        buf = memory[f32](layout(shape(4, 4), stride(0, 1)), mem.private_)
        Y(coord(0, 0), shape(4, 4)).store(buf.load())

    with pytest.raises(PlannerError) as info:
        verify(kernel)
    rules = sorted(d.rule for d in info.value.diagnostics)
    assert rules == ["S10", "S13", "S5"]
    assert info.value.kind == "invalid-ir"


def test_s14_view_extents_must_be_non_negative_and_addressable():
    diags = errors_of(copy_kernel(), {"M": -3, "N": 4})
    assert any(d.rule == "S14" and "%X dim 0 has extent M = -3 < 0" in d.message for d in diags)
    diags = errors_of(copy_kernel(), {"M": 1 << 40, "N": 1 << 40})
    assert any(d.rule == "S14" and "overflows signed 64-bit" in d.message for d in diags)
