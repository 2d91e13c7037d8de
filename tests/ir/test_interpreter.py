"""The reference interpreter: edge tiles, Memory layouts and poison, loops, binding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.errors import PlannerError, SourceLoc
from planner.ir import core
from planner.ir.core import Block, Kernel, ResourceClass, Value
from planner.ir.dtypes import DType
from planner.ir.examples import builtin_examples_dir, load_example
from planner.ir.expr import Const, floordiv, sym
from planner.ir.frontend import (
    TensorView,
    axis,
    bf16,
    broadcast,
    cast,
    const,
    coord,
    dims,
    f16,
    f32,
    full,
    i32,
    iota,
    layout,
    memory,
    mma,
    parallel,
    reduce_max,
    reduce_sum,
    serial,
    shape,
    stride,
    swizzle,
    tile_kernel,
    transpose,
    where,
    zeros,
)
from planner.ir.interpreter import (
    Interpreter,
    bind_symbols,
    interpret,
    poison_value,
    random_inputs,
)
from planner.ir.layout import strided
from planner.ir.types import ViewType


def gemm_kernel():
    return load_example(builtin_examples_dir() / "gemm.py").kernel


# --------------------------------------------------------------------------- edge tiles


@tile_kernel("window_1d")
def window_1d(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("T")]):
    # Load a window of length w at offset o (extra symbols), store it at offset p.
    t = X(coord(sym("o")), shape(sym("w"))).load(fill=7.0)
    Y(coord(sym("p")), shape(sym("w"))).store(t)


def run_window_1d(x, t_len, o, w, p):
    y = interpret(window_1d, {"X": x, "Y": np.zeros(t_len, np.float32)},
                  {"o": o, "w": w, "p": p})["Y"]
    return y


def naive_window_1d(x, t_len, o, w, p):
    tile = [x[o + i] if 0 <= o + i < len(x) else 7.0 for i in range(w)]
    y = np.zeros(t_len, np.float32)
    for i, v in enumerate(tile):
        if 0 <= p + i < t_len:
            y[p + i] = v
    return y


def test_load_past_the_end_reads_fill():
    x = np.arange(1, 6, dtype=np.float32)
    np.testing.assert_array_equal(run_window_1d(x, 4, 3, 4, 0), [4, 5, 7, 7])


def test_store_past_the_end_is_dropped():
    x = np.arange(1, 6, dtype=np.float32)
    np.testing.assert_array_equal(run_window_1d(x, 5, 0, 4, 3), [0, 0, 0, 1, 2])


def test_negative_offsets():
    x = np.arange(1, 6, dtype=np.float32)
    np.testing.assert_array_equal(run_window_1d(x, 4, -2, 4, 0), [7, 7, 1, 2])
    np.testing.assert_array_equal(run_window_1d(x, 4, 0, 4, -1), [2, 3, 4, 0])


def test_windows_entirely_outside_the_view():
    x = np.arange(1, 6, dtype=np.float32)
    np.testing.assert_array_equal(run_window_1d(x, 3, 10, 3, 0), [7, 7, 7])
    np.testing.assert_array_equal(run_window_1d(x, 3, 0, 3, -5), [0, 0, 0])
    np.testing.assert_array_equal(run_window_1d(x, 3, -9, 3, 0), [7, 7, 7])


@given(n=st.integers(0, 6), t_len=st.integers(0, 6), o=st.integers(-8, 8),
       w=st.integers(0, 6), p=st.integers(-8, 8))
def test_windows_match_a_naive_reference(n, t_len, o, w, p):
    x = np.arange(1, n + 1, dtype=np.float32)
    np.testing.assert_array_equal(run_window_1d(x, t_len, o, w, p),
                                  naive_window_1d(x, t_len, o, w, p))


def test_edge_tiles_in_two_dimensions():
    @tile_kernel("window_2d")
    def window_2d(X: TensorView[const(f32), dims("R", "C")], Y: TensorView[f32, dims("R", "C")]):
        t = X(coord(-1, 2), shape(3, 4)).load(fill=-1.0)
        Y(coord(1, 0), shape(3, 4)).store(t)

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = interpret(window_2d, {"X": x, "Y": np.zeros((3, 4), np.float32)})["Y"]
    tile = np.full((3, 4), -1.0, np.float32)
    tile[1:3, 0:2] = x[0:2, 2:4]
    want = np.zeros((3, 4), np.float32)
    want[1:3] = tile[0:2]
    np.testing.assert_array_equal(y, want)


def test_integer_fill_must_be_representable():
    @tile_kernel("int_fill")
    def int_fill(X: TensorView[const(i32), dims("N")], Y: TensorView[i32, dims("N")]):
        Y(coord(0), shape(4)).store(X(coord(0), shape(4)).load(fill=float("-inf")))

    with pytest.raises(PlannerError, match=r"tile.load: fill -inf is not representable"):
        interpret(int_fill, {"X": np.zeros(2, np.int32), "Y": np.zeros(2, np.int32)})


# --------------------------------------------------------------------------- memory


def memory_roundtrip(lay_fn, rows, cols):
    @tile_kernel("roundtrip")
    def roundtrip(X: TensorView[const(f32), dims("R", "C")], Y: TensorView[f32, dims("R", "C")]):
        s = memory[f32](lay_fn(X.extent(0), X.extent(1)))
        s.store(X[coord(0, 0), shape(X.extent(0), X.extent(1))])
        Y(coord(0, 0), shape(X.extent(0), X.extent(1))).store(s.load())

    x = np.arange(1, rows * cols + 1, dtype=np.float32).reshape(rows, cols)
    interp = Interpreter(roundtrip, record_allocations=True)
    y = interp.run({"X": x, "Y": np.zeros_like(x)})["Y"]
    np.testing.assert_array_equal(y, x)
    (alloc,) = interp.allocations
    return x, alloc.storage


def test_s11_padded_layout_stores_through_the_map_and_leaves_padding_poisoned():
    x, storage = memory_roundtrip(lambda r, c: layout(shape(r, c), stride(c + 1, 1)), 3, 4)
    assert storage.size == 2 * 5 + 3 + 1  # span of the padded map
    for r in range(3):
        np.testing.assert_array_equal(storage[r * 5:r * 5 + 4], x[r])
    padding = [r * 5 + 4 for r in range(2)]
    assert np.isnan(storage[padding]).all()  # padding is never written, never zeroed


def test_s11_transposed_layout():
    x, storage = memory_roundtrip(lambda r, c: layout(shape(r, c), stride(1, r)), 3, 4)
    np.testing.assert_array_equal(storage, x.T.reshape(-1))


def test_s11_xor_swizzled_layout():
    x, storage = memory_roundtrip(
        lambda r, c: layout(shape(r, c), stride(8, 1), swizzle(3, 0, 3)), 8, 8)
    want = np.empty(64, np.float32)
    for r in range(8):
        for c in range(8):
            want[r * 8 + (c ^ r)] = x[r, c]
    np.testing.assert_array_equal(storage, want)
    assert not np.array_equal(storage, x.reshape(-1))  # it really permuted


def test_s11_padded_and_swizzled_layout():
    x, storage = memory_roundtrip(
        lambda r, c: layout(shape(r, c), stride(9, 1), swizzle(2, 0, 3)), 4, 8)
    assert storage.size == 64  # span 35 rounded up to the 32-element swizzle block
    written = np.zeros(storage.size, bool)
    for r in range(4):
        for c in range(8):
            off = r * 9 + c
            off ^= (off & (0b11 << 3)) >> 3
            assert storage[off] == x[r, c]
            written[off] = True
    assert np.isnan(storage[~written]).all()


def test_s10_load_is_a_snapshot():
    @tile_kernel("snapshot")
    def snapshot(X: TensorView[const(f32), dims("N")], Y1: TensorView[f32, dims("N")],
                 Y2: TensorView[f32, dims("N")]):
        n = X.extent(0)
        s = memory[f32](shape(n))
        s.store(X[coord(0), shape(n)])
        first = s.load()
        s.store(first * 2.0)
        Y1(coord(0), shape(n)).store(first)
        Y2(coord(0), shape(n)).store(s.load())

    x = np.arange(5, dtype=np.float32)
    out = interpret(snapshot, random_inputs(snapshot, {"N": 5}) | {"X": x})
    np.testing.assert_array_equal(out["Y1"], x)
    np.testing.assert_array_equal(out["Y2"], 2 * x)


def test_s5_memory_in_a_parallel_is_fresh_per_instance():
    @tile_kernel("per_instance")
    def per_instance(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        g = axis("g", X.extent(0))
        for nest in parallel(shape(g)):
            s = memory[f32](shape(1))
            i = nest.index(g)
            s.store(X[coord(i), shape(1)])
            Y(coord(i), shape(1)).store(s.load())

    interp = Interpreter(per_instance, record_allocations=True)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(interp.run({"X": x, "Y": np.zeros(4, np.float32)})["Y"], x)
    assert len(interp.allocations) == 4
    assert len({id(a.storage) for a in interp.allocations}) == 4


def test_s14_empty_domain_evaluates_no_layout_arithmetic():
    @tile_kernel("empty_memory")
    def empty_memory(X: TensorView[const(f32), dims("M", "C")], Y: TensorView[f32, dims("M", "C")]):
        m, c = X.extent(0), X.extent(1)
        # The row stride divides by M: evaluating it for M = 0 would raise.
        s = memory[f32](layout(shape(m, c), stride(floordiv(8, m) * c, 1)))
        s.store(X[coord(0, 0), shape(m, c)])
        Y(coord(0, 0), shape(m, c)).store(s.load())

    interp = Interpreter(empty_memory, record_allocations=True)
    out = interp.run({"X": np.zeros((0, 3), np.float32), "Y": np.zeros((0, 3), np.float32)})
    assert out["Y"].shape == (0, 3)
    assert interp.allocations[0].storage.size == 0
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = interpret(empty_memory, {"X": x, "Y": np.zeros_like(x)})["Y"]
    np.testing.assert_array_equal(y, x)


def test_s13_non_injective_layout_is_an_error():
    @tile_kernel("broadcast_map")
    def broadcast_map(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        s = memory[f32](layout(shape(2, 3), stride(0, 1)))
        s.store(broadcast(X[coord(0), shape(3)], shape(2, 3), dims=(1,)))
        Y(coord(0), shape(3)).store(reduce_sum(s.load(), axis=0))

    with pytest.raises(PlannerError, match=r"\[S13\].*not injective"):
        interpret(broadcast_map, random_inputs(broadcast_map, {"N": 3}))


def test_s11_layout_outside_its_storage_is_an_error():
    @tile_kernel("negative_stride")
    def negative_stride(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        # negative only at run time (N = 3): constant negative strides are refused earlier
        s = memory[f32](layout(shape(3), stride(X.extent(0) - 4)))
        s.store(X[coord(0), shape(3)])
        Y(coord(0), shape(3)).store(s.load())

    with pytest.raises(PlannerError, match="strides must be >= 0"):
        layout(shape(3), stride(-1))
    with pytest.raises(PlannerError, match="outside its storage"):
        interpret(negative_stride, random_inputs(negative_stride, {"N": 3}))


def core_kernel(ops, params, name="raw"):
    body = Block()
    for op in ops:
        body.append(op)
    return Kernel(name, params, body)


def test_s10_poison_reading_storage_before_any_store_sees_nan():
    # Built with core ops: the frontend and the verifier would both refuse it.
    y = Value(ViewType(DType.F32, (Const(2), Const(3))), "Y")
    alloc = core.AllocOp(DType.F32, strided((2, 3), (4, 1)), ResourceClass.AUTO, "kernel")
    load = core.MemLoadOp(alloc.memory, alloc.initial_state)
    store = core.StoreOp(y, load.result, (Const(0), Const(0)))
    kernel = core_kernel([alloc, load, store], [y])
    interp = Interpreter(kernel, record_allocations=True)
    out = interp.run({"Y": np.zeros((2, 3), np.float32)})
    assert np.isnan(out["Y"]).all()
    assert interp.allocations[0].storage.size == 7 and np.isnan(interp.allocations[0].storage).all()


def test_poison_values():
    assert np.isnan(poison_value(DType.F32)) and np.isnan(poison_value(DType.BF16))
    assert poison_value(DType.I32) == np.iinfo(np.int32).min
    y = Value(ViewType(DType.I32, (Const(2),)), "Y")
    alloc = core.AllocOp(DType.I32, strided((2,), (3,)), ResourceClass.AUTO, "kernel")
    load = core.MemLoadOp(alloc.memory, alloc.initial_state)
    kernel = core_kernel([alloc, load, core.StoreOp(y, load.result, (Const(0),))], [y])
    out = interpret(kernel, {"Y": np.zeros(2, np.int32)})
    np.testing.assert_array_equal(out["Y"], [np.iinfo(np.int32).min] * 2)


def test_s15_stale_state_and_swapped_states_are_errors():
    x = Value(ViewType(DType.F32, (Const(2),), True), "X")
    y = Value(ViewType(DType.F32, (Const(2),)), "Y")
    a = core.AllocOp(DType.F32, strided((2,), (1,)), ResourceClass.AUTO, "kernel")
    b = core.AllocOp(DType.F32, strided((2,), (1,)), ResourceClass.AUTO, "kernel")
    t = core.LoadOp(x, (Const(0),), (Const(2),))
    s1 = core.MemStoreOp(a.memory, a.initial_state, t.result)
    s2 = core.MemStoreOp(a.memory, s1.result, t.result)
    stale = core.MemLoadOp(a.memory, s1.result, loc=SourceLoc("k.py", 9))
    kernel = core_kernel([a, t, s1, s2, stale], [x, y])
    arrays = {"X": np.ones(2, np.float32), "Y": np.zeros(2, np.float32)}
    with pytest.raises(PlannerError, match=r"k.py:9: error \[S15\]: memory.load: stale state"):
        interpret(kernel, arrays)
    swapped = core.MemStoreOp(b.memory, a.initial_state, t.result)
    with pytest.raises(PlannerError, match=r"\[S15\].*belongs to memory"):
        interpret(core_kernel([a, b, t, swapped], [x, y]), arrays)


# --------------------------------------------------------------------------- regions


def test_zero_trip_loop_returns_inits():
    @tile_kernel("count_rows")
    def count_rows(X: TensorView[const(f32), dims("T", "C")], Y: TensorView[f32, dims("C")],
                   Z: TensorView[f32, dims("C")]):
        c = X.extent(1)
        acc = full(shape(c), 3.0)
        s = memory[f32](shape(c))
        s.store(full(shape(c), 5.0))
        for step in serial(shape(axis("t", X.extent(0)))):
            acc = acc + reduce_sum(X[coord(step.index(), 0), shape(1, c)], axis=0)
            s.store(acc)
        Y(coord(0), shape(c)).store(acc)
        Z(coord(0), shape(c)).store(s.load())

    empty = interpret(count_rows, {"X": np.zeros((0, 2), np.float32),
                                   "Y": np.zeros(2, np.float32), "Z": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(empty["Y"], [3, 3])
    np.testing.assert_array_equal(empty["Z"], [5, 5])
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    full_run = interpret(count_rows, {"X": x, "Y": np.zeros(2, np.float32),
                                      "Z": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(full_run["Y"], 3 + x.sum(axis=0))
    np.testing.assert_array_equal(full_run["Z"], 3 + x.sum(axis=0))


def test_loops_run_row_major_over_their_axes():
    @tile_kernel("digits")
    def digits(Y: TensorView[f32, dims("N")]):
        a, b = axis("a", 2), axis("b", 3)
        acc = zeros[f32](shape(1))
        for step in serial(shape(a, b)):
            idx = step.index(a) * 3 + step.index(b)
            acc = acc * 10.0 + full(shape(1), idx, f32)
        Y(coord(0), shape(1)).store(acc)

    assert interpret(digits, {"Y": np.zeros(1, np.float32)})["Y"][0] == 12345


def test_parallel_instances_run_sequentially_in_row_major_order():
    @tile_kernel("last_writer")
    def last_writer(Y: TensorView[i32, dims("N")]):
        a, b = axis("a", 3), axis("b", 4)
        for nest in parallel(shape(a, b)):
            Y(coord(0), shape(1)).store(full(shape(1), nest.index(a) * 10 + nest.index(b), i32))

    assert interpret(last_writer, {"Y": np.zeros(1, np.int32)})["Y"][0] == 23


def test_gemm_k_zero_gives_zeros_and_m_zero_gives_an_empty_result():
    k = gemm_kernel()
    out = interpret(k, random_inputs(k, {"M": 5, "N": 3, "K": 0}))["C"]
    np.testing.assert_array_equal(out, np.zeros((5, 3), np.float32))
    assert interpret(k, random_inputs(k, {"M": 0, "N": 3, "K": 4}))["C"].shape == (0, 3)


# --------------------------------------------------------------------------- tile ops


def test_elementwise_ops_reductions_and_layout_ops():
    @tile_kernel("ops")
    def ops(X: TensorView[const(f32), dims("R", "C")], S: TensorView[f32, dims("C", "R")],
            M: TensorView[f32, dims("R")], B: TensorView[f32, dims("R", "Q", "C")],
            I: TensorView[i32, dims("R", "C")], E: TensorView[f32, dims("R")]):
        r, c = X.extent(0), X.extent(1)
        x = X[coord(0, 0), shape(r, c)]
        S(coord(0, 0), shape(c, r)).store(transpose(x))
        M(coord(0), shape(r)).store(reduce_max(x, axis=1))
        B(coord(0, 0, 0), shape(r, 2, c)).store(broadcast(x, shape(r, 2, c), dims=(0, 2)))
        col = iota(shape(r, c), 1)
        I(coord(0, 0), shape(r, c)).store(where(col < full(shape(r, c), 2, i32),
                                                cast(x, i32), col))
        nothing = X[coord(0, 0), shape(r, 0)]
        E(coord(0), shape(r)).store(reduce_max(nothing, axis=1))

    x = np.array([[1.5, -2.5, 3.0], [-0.5, 4.0, 9.9]], np.float32)
    out = interpret(ops, random_inputs(ops, {"R": 2, "C": 3, "Q": 2}) | {"X": x})
    np.testing.assert_array_equal(out["S"], x.T)
    np.testing.assert_array_equal(out["M"], np.float32([3.0, 9.9]))
    np.testing.assert_array_equal(out["B"], np.broadcast_to(x[:, None, :], (2, 2, 3)))
    np.testing.assert_array_equal(out["I"], [[1, -2, 2], [0, 4, 2]])  # C truncation
    np.testing.assert_array_equal(out["E"], [-np.inf, -np.inf])


def test_full_with_an_expression_value_and_mma_dtype():
    @tile_kernel("scaled")
    def scaled(A: TensorView[const(f32), dims("M", "K")], C: TensorView[f32, dims("M", "M")]):
        m, k = A.extent(0), A.extent(1)
        a = A[coord(0, 0), shape(m, k)]
        acc = full(shape(m, m), k, f32)  # the extent K as a value
        C(coord(0, 0), shape(m, m)).store(mma(a, transpose(a), acc))

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = interpret(scaled, {"A": a, "C": np.zeros((2, 2), np.float32)})["C"]
    assert c.dtype == np.float32
    np.testing.assert_allclose(c, a @ a.T + 3)


def test_half_precision_stays_half_and_bf16_is_float32():
    @tile_kernel("halves")
    def halves(X: TensorView[const(f16), dims("N")], Y: TensorView[f16, dims("N")],
               Z: TensorView[bf16, dims("N")]):
        n = X.extent(0)
        x = X[coord(0), shape(n)]
        Y(coord(0), shape(n)).store(x * x)
        Z(coord(0), shape(n)).store(cast(x, bf16) + 1.0)

    x = np.array([1.5, 300.0], np.float16)
    out = interpret(halves, {"X": x, "Y": np.zeros(2, np.float16),
                             "Z": np.zeros(2, np.float32)})
    assert out["Y"].dtype == np.float16 and np.isinf(out["Y"][1])  # 90000 overflows f16
    assert out["Z"].dtype == np.float32
    np.testing.assert_array_equal(out["Z"], [2.5, 301.0])


def test_integer_division_truncates_toward_zero():
    @tile_kernel("idiv")
    def idiv(A: TensorView[const(i32), dims("N")], B: TensorView[const(i32), dims("N")],
             Q: TensorView[i32, dims("N")]):
        n = A.extent(0)
        Q(coord(0), shape(n)).store(A[coord(0), shape(n)] / B[coord(0), shape(n)])

    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    q = interpret(idiv, {"A": a, "B": b, "Q": np.zeros(4, np.int32)})["Q"]
    np.testing.assert_array_equal(q, [3, -3, -3, 3])
    with pytest.raises(PlannerError, match="integer division by zero"):
        interpret(idiv, {"A": a, "B": np.zeros(4, np.int32), "Q": np.zeros(4, np.int32)})


def test_execution_errors_name_the_op_and_its_location():
    x = Value(ViewType(DType.F32, (Const(4),), True), "X")
    y = Value(ViewType(DType.F32, (Const(4),)), "Y")
    a = core.LoadOp(x, (Const(0),), (Const(4),))
    b = core.LoadOp(x, (Const(0),), (Const(3),))
    add = core.BinaryOp(core.BinaryFn.ADD, a.result, b.result, loc=SourceLoc("bad.py", 12))
    kernel = core_kernel([a, b, add, core.StoreOp(y, add.result, (Const(0),))], [x, y])
    with pytest.raises(PlannerError, match=r"bad.py:12: error: tile.binary: add: operands "
                                           r"differ: float32\[4\] vs float32\[3\]"):
        interpret(kernel, {"X": np.ones(4, np.float32), "Y": np.zeros(4, np.float32)})


def test_unbound_symbol_in_an_op_is_reported():
    with pytest.raises(PlannerError, match=r"tile.load: unbound symbol o"):
        interpret(window_1d, {"X": np.ones(3, np.float32), "Y": np.zeros(3, np.float32)},
                  {"w": 2, "p": 0})


# --------------------------------------------------------------------------- binding


def gemm_arrays(m, k, k2, n):
    return {"A": np.zeros((m, k), np.float32), "B": np.zeros((k2, n), np.float32),
            "C": np.zeros((m, n), np.float32)}


def test_bind_symbols_from_shapes_and_bindings():
    assert bind_symbols(gemm_kernel(), gemm_arrays(3, 4, 4, 5)) == {"M": 3, "K": 4, "N": 5}
    assert bind_symbols(gemm_kernel(), gemm_arrays(3, 4, 4, 5), {"M": 3, "extra": 9}) == {
        "M": 3, "K": 4, "N": 5, "extra": 9}


def test_bind_symbols_reports_disagreeing_views():
    with pytest.raises(PlannerError, match=r"view 'B' dim 0 \(K\) has extent 5, but K = 4 "
                                           r"from view 'A' dim 1"):
        bind_symbols(gemm_kernel(), gemm_arrays(3, 4, 5, 2))


def test_bind_symbols_reports_disagreeing_bindings():
    with pytest.raises(PlannerError, match=r"view 'A' dim 0 \(M\) has extent 3, but M = 7 "
                                           "from the explicit bindings"):
        bind_symbols(gemm_kernel(), gemm_arrays(3, 4, 4, 2), {"M": 7})


def test_bind_symbols_reports_rank_missing_and_unknown_arrays():
    k = gemm_kernel()
    arrays = gemm_arrays(3, 4, 4, 2)
    with pytest.raises(PlannerError, match=r"view 'A' has rank 2.*array has rank 1"):
        bind_symbols(k, arrays | {"A": np.zeros(3, np.float32)})
    with pytest.raises(PlannerError, match="no array given for view 'C'"):
        bind_symbols(k, {n: a for n, a in arrays.items() if n != "C"})
    with pytest.raises(PlannerError, match="no view named D"):
        bind_symbols(k, arrays | {"D": np.zeros(1)})
    with pytest.raises(PlannerError, match=r"binding Q = 1.5 is not an integer"):
        bind_symbols(k, arrays, {"Q": 1.5})


def test_bind_symbols_checks_compound_extents():
    @tile_kernel("doubled")
    def doubled(X: TensorView[const(f32), sym("H") * 2], Y: TensorView[f32, dims("H")]):
        Y(coord(0), shape(1)).store(X[coord(0), shape(1)])

    assert bind_symbols(doubled, {"X": np.zeros(6), "Y": np.zeros(3)}) == {"H": 3}
    with pytest.raises(PlannerError, match=r"view 'X' dim 0 \(2 \* H\) has extent 5, but "
                                           r"2 \* H = 6"):
        bind_symbols(doubled, {"X": np.zeros(5), "Y": np.zeros(3)})

    @tile_kernel("only_compound")
    def only_compound(X: TensorView[f32, sym("H") * 2]):
        pass

    with pytest.raises(PlannerError, match="symbol H is not bound by any plain view extent"):
        bind_symbols(only_compound, {"X": np.zeros(4)})
    assert bind_symbols(only_compound, {"X": np.zeros(4)}, {"H": 2}) == {"H": 2}


def test_interpret_checks_dtypes_and_does_not_mutate_inputs():
    k = gemm_kernel()
    arrays = gemm_arrays(2, 3, 3, 2)
    with pytest.raises(PlannerError, match=r"view 'A' .* needs a float32 array, got float64"):
        interpret(k, arrays | {"A": np.zeros((2, 3))})
    arrays["A"][:] = 1.0
    arrays["B"][:] = 1.0
    out = interpret(k, arrays)
    np.testing.assert_array_equal(out["C"], np.full((2, 2), 3.0))
    np.testing.assert_array_equal(arrays["C"], np.zeros((2, 2)))
    assert set(out) == {"C"}


def test_random_inputs():
    k = gemm_kernel()
    a = random_inputs(k, {"M": 3, "N": 2, "K": 4}, seed=3)
    b = random_inputs(k, {"M": 3, "N": 2, "K": 4}, seed=3)
    assert {n: x.shape for n, x in a.items()} == {"A": (3, 4), "B": (4, 2), "C": (3, 2)}
    assert all(x.dtype == np.float32 for x in a.values())
    np.testing.assert_array_equal(a["A"], b["A"])
    assert np.any(a["A"] != 0) and not np.any(a["C"])
    with pytest.raises(PlannerError, match="needs symbol K"):
        random_inputs(k, {"M": 3, "N": 2})
