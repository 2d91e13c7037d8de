"""Machine references for the peer table: copy bandwidth and the FMA peak.

* Copy bandwidth: a 64 MiB float32 ``np.copyto`` split into one contiguous slice per
  thread (numpy releases the GIL for the copy), counted as bytes read plus written.
* FMA peak: an llvmlite loop of 12 independent fused multiply-adds of the host's widest
  vector per iteration (``<16 x float>`` with AVX-512, else ``<8 x float>``; enough
  chains to hide the FMA latency), compiled for the host through the planner's own JIT
  and run on every thread at once through ctypes (calls release the GIL), counted as 2
  flops per lane.

Both report the median of ``rounds`` samples, so a kernel's bytes or flops per second
can be quoted as a share of what this machine can do at all.
"""

from __future__ import annotations

import ctypes
import itertools
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from llvmlite import ir

from planner.lower.cpu.jit import compile_module, host_target

COPY_BYTES = 64 * 2**20
_CHAINS = 12
_ITERATIONS = 4_000_000


def copy_bandwidth(threads: int, rounds: int = 7) -> float:
    """Bytes read plus written per second by a 64 MiB copy on ``threads`` threads."""
    src = np.ones(COPY_BYTES // 4, dtype=np.float32)
    dst = np.empty_like(src)
    cuts = np.linspace(0, src.size, threads + 1).astype(int)
    parts = [(dst[a:b], src[a:b]) for a, b in itertools.pairwise(cuts)]
    with ThreadPoolExecutor(threads) as pool:
        def once() -> float:
            t0 = time.perf_counter()
            list(pool.map(lambda p: np.copyto(*p), parts))
            return time.perf_counter() - t0

        once()
        return 2 * COPY_BYTES / statistics.median(once() for _ in range(rounds))


def fma_lanes() -> int:
    """fp32 lanes of the host's widest vector (what the planner's code uses too)."""
    return 16 if host_target().has_feature("avx512f") else 8


def _fma_module(lanes: int) -> ir.Module:
    f32 = ir.FloatType()
    vec = ir.VectorType(f32, lanes)
    i64 = ir.IntType(64)
    mod = ir.Module("fma_peak")
    mod.triple = host_target().triple
    fma = ir.Function(mod, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{lanes}f32")
    fn = ir.Function(mod, ir.FunctionType(f32, [i64, f32]), "fma_peak")
    n, seed = fn.args
    entry, loop, done = (fn.append_basic_block(x) for x in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    splat = b.insert_element(ir.Constant(vec, ir.Undefined), seed, ir.Constant(ir.IntType(32), 0))
    splat = b.shuffle_vector(splat, ir.Constant(vec, ir.Undefined),
                             ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))
    mul = ir.Constant(vec, [0.999999] * lanes)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    accs = [b.phi(vec) for _ in range(_CHAINS)]
    nxt = [b.call(fma, [a, mul, splat]) for a in accs]
    inc = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(ir.Constant(i64, 0), entry)
    i.add_incoming(inc, loop)
    for k, (a, x) in enumerate(zip(accs, nxt, strict=True)):
        a.add_incoming(ir.Constant(vec, [float(k)] * lanes), entry)
        a.add_incoming(x, loop)
    b.cbranch(b.icmp_unsigned("<", inc, n), loop, done)
    b.position_at_end(done)
    total = nxt[0]
    for x in nxt[1:]:
        total = b.fadd(total, x)
    b.ret(b.extract_element(total, ir.Constant(ir.IntType(32), 0)))
    return mod


def fma_peak(threads: int, rounds: int = 5) -> float:
    """Single-precision flops per second of the FMA loop on ``threads`` threads."""
    lanes = fma_lanes()
    module = compile_module(_fma_module(lanes), disk=False)
    run = module.ctypes_function("fma_peak", ctypes.c_float, [ctypes.c_int64, ctypes.c_float])
    flops = 2.0 * lanes * _CHAINS * _ITERATIONS * threads
    with ThreadPoolExecutor(threads) as pool:
        def once() -> float:
            t0 = time.perf_counter()
            list(pool.map(lambda _: run(_ITERATIONS, 1.0), range(threads)))
            return time.perf_counter() - t0

        once()
        return flops / statistics.median(once() for _ in range(rounds))


if __name__ == "__main__":
    for th in (1, 2):
        print(f"{th} thread(s): copy {copy_bandwidth(th) / 1e9:.1f} GB/s, "
              f"FMA peak {fma_peak(th) / 1e9:.0f} GFLOP/s")
