"""Accuracy and special cases of planner.lower.cpu.vecmath (exp, tanh, log)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import llvmlite.ir as ir
import numpy as np
import pytest

from planner.lower.cpu.jit import JitCache, compile_module
from planner.lower.cpu.vecmath import emit_exp, emit_log, emit_tanh

F32 = ir.FloatType()
I64 = ir.IntType(64)
CACHE = JitCache()
N_SWEEP = 1 << 20
WIDTHS = [8, 1, 16]  # <8 x float> (AVX2 register), scalar float, <16 x float>

Emitter = Callable[[ir.IRBuilder, ir.Value], ir.Value]


def _map_module(emit: Emitter, width: int) -> ir.Module:
    """``void f(float* src, float* dst, i64 n)``: dst = emit(src), ``width`` lanes at a
    time (n must be a multiple of width)."""
    m = ir.Module(name="vecmath_test")
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [F32.as_pointer()] * 2 + [I64]), "f")
    src, dst, n = fn.args
    ty = ir.VectorType(F32, width) if width > 1 else F32
    entry = fn.append_basic_block("entry")
    hdr = fn.append_basic_block("hdr")
    body = fn.append_basic_block("body")
    end = fn.append_basic_block("end")
    b = ir.IRBuilder(entry)
    b.branch(hdr)
    b.position_at_end(hdr)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    b.cbranch(b.icmp_signed("<", i, n), body, end)
    b.position_at_end(body)
    x = b.load(b.bitcast(b.gep(src, [i]), ty.as_pointer()), align=4)
    b.store(emit(b, x), b.bitcast(b.gep(dst, [i]), ty.as_pointer()), align=4)
    i.add_incoming(b.add(i, ir.Constant(I64, width)), body)
    b.branch(hdr)
    b.position_at_end(end)
    b.ret_void()
    return m


def _apply(emit: Emitter, x: np.ndarray, width: int) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    pad = (-x.size) % width
    xp = np.concatenate([x, np.ones(pad, np.float32)])
    cm = compile_module(_map_module(emit, width), cache=CACHE)
    f = cm.ctypes_function("f", None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64])
    y = np.empty_like(xp)
    f(xp.ctypes.data, y.ctypes.data, xp.size)
    return y[: x.size]


def _rel_err(y: np.ndarray, ref: np.ndarray) -> float:
    y64 = y.astype(np.float64)
    nz = ref != 0
    assert np.all(y64[~nz] == 0)
    return float(np.max(np.abs(y64[nz] - ref[nz]) / np.abs(ref[nz])))


@pytest.mark.parametrize("width", WIDTHS)
def test_exp_sweep(width: int) -> None:
    x = np.linspace(-87.0, 88.0, N_SWEEP, dtype=np.float32)  # normal results
    y = _apply(emit_exp, x, width)
    assert _rel_err(y, np.exp(x.astype(np.float64))) < 2.5e-7


@pytest.mark.parametrize("width", WIDTHS)
def test_exp_sweep_with_subnormal_results(width: int) -> None:
    x = np.linspace(-88.0, 88.0, N_SWEEP, dtype=np.float32)
    y = _apply(emit_exp, x, width)
    ref = np.exp(x.astype(np.float64))
    assert _rel_err(y, ref) < 4e-7
    # deep into the subnormal range: within one subnormal step of correctly rounded
    xs = np.linspace(-103.9, -87.4, 1 << 16, dtype=np.float32)
    ys = _apply(emit_exp, xs, width).astype(np.float64)
    refs = np.exp(xs.astype(np.float64))
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    assert np.all(np.abs(ys - refs) <= tiny + 2.5e-7 * refs)


def test_exp_every_449th_float_within_an_ulp() -> None:
    # every 449th float32 whose exp is neither 0 nor inf-bound: across the switch of the
    # two-step scaling at 0, the subnormal results and the last finite ones
    bits = np.arange(0, 2**32, 449, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x) & (x > -104.0) & (x < 89.0)]
    y = _apply(emit_exp, x, 16).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    f32 = np.finfo(np.float32)
    normal = (ref >= float(f32.tiny)) & (ref <= float(f32.max))
    spacing = np.spacing(ref[normal].astype(np.float32)).astype(np.float64)
    assert float(np.max(np.abs(y[normal] - ref[normal]) / spacing)) < 1.02
    small = ref < float(f32.tiny)
    assert np.all(np.abs(y[small] - ref[small]) <= float(f32.smallest_subnormal))
    assert np.all(np.isposinf(y[ref > float(f32.max)]))


@pytest.mark.parametrize("width", WIDTHS)
def test_tanh_sweep(width: int) -> None:
    x = np.linspace(-10.0, 10.0, N_SWEEP, dtype=np.float32)
    y = _apply(emit_tanh, x, width)
    assert _rel_err(y, np.tanh(x.astype(np.float64))) < 3e-7
    # tiny arguments: tanh(x) == x to within rounding
    xt = np.geomspace(1e-30, 1e-3, 4096).astype(np.float32)
    yt = _apply(emit_tanh, np.concatenate([xt, -xt]), width)
    assert _rel_err(yt, np.tanh(np.concatenate([xt, -xt]).astype(np.float64))) < 3e-7


@pytest.mark.parametrize("width", WIDTHS)
def test_log_sweep(width: int) -> None:
    x = np.geomspace(1e-30, 1e30, N_SWEEP).astype(np.float32)
    y = _apply(emit_log, x, width)
    ref = np.log(x.astype(np.float64))
    assert _rel_err(y, ref) < 2e-7
    # around 1, where log(x) -> 0: relative error still bounded, absolute error tiny
    x1 = np.linspace(0.5, 2.0, 1 << 18, dtype=np.float32)
    y1 = _apply(emit_log, x1, width)
    r1 = np.log(x1.astype(np.float64))
    assert _rel_err(y1, r1) < 2e-7
    assert np.max(np.abs(y1 - r1)) < 1e-7
    # subnormal inputs
    xs = np.geomspace(1.5e-45, 1.1e-38, 4096).astype(np.float32)
    assert _rel_err(_apply(emit_log, xs, width), np.log(xs.astype(np.float64))) < 2e-7


SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 1e-45, -1e-45, 88.72, 88.73,
     -103.9, -104.5, -200.0, 200.0, 20.0, -20.0, 3.4e38, -3.4e38, 1e-30, 0.625, -0.625],
    dtype=np.float32,
)


@pytest.mark.parametrize("width", [8, 1])
def test_special_values(width: int) -> None:
    with np.errstate(all="ignore"):
        x64 = SPECIALS.astype(np.float64)
        cases = [
            (emit_exp, np.exp(x64).astype(np.float32)),
            (emit_tanh, np.tanh(x64).astype(np.float32)),
            (emit_log, np.log(x64).astype(np.float32)),
        ]
    for emit, ref in cases:
        y = _apply(emit, SPECIALS, width)
        assert np.array_equal(np.isnan(y), np.isnan(ref)), (emit.__name__, y, ref)
        exact = np.isinf(ref) | (ref == 0) | np.isnan(ref)
        np.testing.assert_array_equal(y[exact & ~np.isnan(ref)], ref[exact & ~np.isnan(ref)])
        # signs of zeros and infinities
        np.testing.assert_array_equal(
            np.signbit(y[exact & ~np.isnan(ref)]), np.signbit(ref[exact & ~np.isnan(ref)])
        )
        finite = ~exact
        np.testing.assert_allclose(y[finite], ref[finite], rtol=3e-7)


def test_saturation_and_limits() -> None:
    x = np.array([10.0, 15.0, 44.0, 50.0, 1e30, -10.0, -50.0, -1e30], np.float32)
    np.testing.assert_array_equal(_apply(emit_tanh, x, 8), np.sign(x))
    over = np.array([88.73, 89.0, 100.0, 1e10, np.inf], np.float32)
    assert np.all(np.isposinf(_apply(emit_exp, over, 1)))
    under = np.array([-104.0, -110.0, -1e10, -np.inf], np.float32)
    y = _apply(emit_exp, under, 1)
    assert np.all(y == 0.0) and not np.any(np.signbit(y))
    neg = np.array([-1e-30, -1.0, -np.inf, -1e30], np.float32)
    assert np.all(np.isnan(_apply(emit_log, neg, 8)))
    assert np.all(np.isneginf(_apply(emit_log, np.array([0.0, -0.0], np.float32), 1)))


def test_rejects_non_float() -> None:
    m = ir.Module()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ir.IntType(32)]), "g")
    b = ir.IRBuilder(fn.append_basic_block())
    with pytest.raises(TypeError):
        emit_exp(b, fn.args[0])


def test_no_libm_calls() -> None:
    """Only intrinsics are used, and no call survives code generation (no libm)."""
    cm = compile_module(_map_module(lambda b, x: emit_tanh(b, emit_log(b, emit_exp(b, x))), 8),
                        cache=CACHE)
    body = cm.llvm_ir.split("define", 1)[1]
    assert all("@llvm." in line for line in body.splitlines() if " call " in line)
    assert "call" not in cm.asm.lower()
