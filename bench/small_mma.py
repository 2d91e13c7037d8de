"""Benchmark the small in-place mma kernel (``planner.lower.cpu.small_gemm``) on in-cache tiles.

Usage::

    python bench/small_mma.py [--targets x86-avx512 x86-avx2] [--reps 9] [--dims 32 64 96 128]

For each catalog target the kernel is emitted at the target's vector width with a driver
that calls it ``calls`` times in a row on the same tiles (row-major A, B and C, as the
attention kernel's 64-row tiles are), so no Python call overhead is timed. The shapes are
m × n × k = 64 × 64 × 64, 64 × 64 × D (S = Q·Kᵀ) and 64 × D × 64 (O = P·V), plus two
odd ones. Samples of every (target, shape) are interleaved round by round; reported:
the median GFLOP/s (2·m·n·k per call) and the median share of the one-core FMA peak of
``bench/references.py`` measured in the same round (the machine is shared and its speed
drifts; the peak is the host's widest vector, so an 8-lane target's share is at most
~50 % on an AVX-512 host). Results are checked against
numpy first.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import llvmlite.ir as ir
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from references import fma_peak

from planner.catalog import CatalogRegistry
from planner.lower.cpu.jit import JitCache, catalog_target, compile_module, missing_features
from planner.lower.cpu.llvm_helpers import I64, c64, loop
from planner.lower.cpu.small_gemm import _emit_small_gemm

SAMPLE_S = 2e-3  # each sample: calls in a row for about this long


def _module(width: int) -> ir.Module:
    """The kernel and ``drive(calls, sets, m, n, k, a, lda, b, ldb, c, ldc, acc)``: call
    ``i`` runs on the tiles of set ``i % sets`` (set ``s`` of A at ``a + s·m·lda``, of B
    at ``b + s·k·ldb``, of C at ``c + s·m·ldc``)."""
    mod = ir.Module("small_mma_bench")
    kern = _emit_small_gemm(mod, "small_gemm", width)
    fnty = ir.FunctionType(ir.VoidType(), [I64, I64, *kern.function_type.args])
    drive = ir.Function(mod, fnty, name="drive")
    calls, sets, m, n, k, a, lda, bm, ldb, c, ldc, acc = drive.args
    b = ir.IRBuilder(drive.append_basic_block("entry"))
    with loop(b, c64(0), calls, 1, "call") as i:
        s = b.srem(i, sets)
        ptrs = [b.gep(p, [b.mul(s, b.mul(rows, ld))])
                for p, rows, ld in ((a, m, lda), (bm, k, ldb), (c, m, ldc))]
        b.call(kern, [m, n, k, ptrs[0], lda, ptrs[1], ldb, ptrs[2], ldc, acc])
    b.ret_void()
    return mod


def _driver(target_name: str):  # -> ctypes function
    target = CatalogRegistry().get(target_name)
    spec = catalog_target(target.cpu)
    if missing_features(spec):
        return None
    cm = compile_module(_module(target.cpu.vector_width), cache=JitCache(), target=spec,
                        disk=False)
    f32p, i64 = ctypes.POINTER(ctypes.c_float), ctypes.c_int64
    return cm.ctypes_function("drive", None, [i64, i64, i64, i64, i64, f32p, i64, f32p,
                                              i64, f32p, i64, ctypes.c_int32])


class _Case:
    """One shape's tiles and a call of the driver on them."""

    def __init__(self, drive, m: int, n: int, k: int, acc: bool,
                 sets: int) -> None:
        rng = np.random.default_rng(m * 131 + n * 7 + k)
        self.m, self.n, self.k, self.acc, self.sets = m, n, k, acc, sets
        self.a = rng.standard_normal((sets, m, k), dtype=np.float32)
        self.b = rng.standard_normal((sets, k, n), dtype=np.float32)
        self.c = rng.standard_normal((sets, m, n), dtype=np.float32)
        self.drive = drive
        self.calls = max(1, int(SAMPLE_S * 100e9 / (2 * m * n * k)))

    def run(self, calls: int) -> None:
        p = ctypes.POINTER(ctypes.c_float)
        self.drive(calls, self.sets, self.m, self.n, self.k, self.a.ctypes.data_as(p), self.k,
                   self.b.ctypes.data_as(p), self.n, self.c.ctypes.data_as(p), self.n,
                   int(self.acc))

    def check(self) -> None:
        c0 = self.c.astype(np.float64)
        self.run(self.sets)
        want = (c0 if self.acc else 0.0) + self.a.astype(np.float64) @ self.b
        np.testing.assert_allclose(self.c, want, rtol=1e-4, atol=1e-4 * max(1, self.k))

    def sample(self) -> float:
        """GFLOP/s of one sample."""
        t0 = time.perf_counter()
        self.run(self.calls)
        return 2.0 * self.m * self.n * self.k * self.calls / (time.perf_counter() - t0) / 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", nargs="+", default=["x86-avx512", "x86-avx2"])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--dims", type=int, nargs="+", default=[32, 64, 96, 128])
    ap.add_argument("--sets", type=int, default=1,
                    help="tile sets cycled through (1: all in L1; 8 x 48 KB: in L2)")
    args = ap.parse_args(argv)
    shapes = [(64, 64, 64, True), (64, 64, 64, False)]
    shapes += [(64, 64, d, False) for d in args.dims if d != 64]
    shapes += [(64, d, 64, True) for d in args.dims if d != 64]
    shapes += [(65, 63, 64, True), (7, 37, 13, True)]
    cases: dict[tuple[str, tuple[int, int, int, bool]], _Case] = {}
    for name in args.targets:
        drive = _driver(name)
        if drive is None:
            print(f"{name}: the host cannot run it, skipped")
            continue
        for s in shapes:
            cases[name, s] = _Case(drive, *s, args.sets)
            cases[name, s].check()
    samples: dict[tuple[str, tuple[int, int, int, bool]], list[float]] = {c: [] for c in cases}
    shares: dict[tuple[str, tuple[int, int, int, bool]], list[float]] = {c: [] for c in cases}
    peaks = []
    for _ in range(args.reps):  # interleaved: the peak and every case once per round
        peaks.append(fma_peak(1, rounds=3) / 1e9)
        for key, case in cases.items():
            case.run(case.calls)  # untimed warm-up of this case's code and tiles
            samples[key].append(case.sample())
            shares[key].append(samples[key][-1] / peaks[-1])
    print(f"one-core FMA peak {statistics.median(peaks):.0f} GFLOP/s (median; min "
          f"{min(peaks):.0f}, max {max(peaks):.0f}); median of {args.reps} interleaved rounds")
    print(f"{'target':<11} {'m x n x k':>14} {'acc':>3} | {'GFLOP/s':>7} {'peak':>5}")
    for (name, (m, n, k, acc)), xs in samples.items():
        med, share = statistics.median(xs), statistics.median(shares[name, (m, n, k, acc)])
        print(f"{name:<11} {f'{m}x{n}x{k}':>14} {int(acc):>3} | {med:>7.1f} {share:>5.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
