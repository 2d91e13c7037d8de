"""The manual GEMM (examples/manual_gemm.py) with its tiles staged by asynchronous copies.

``As.copy_async(A[...])`` starts copying the next tiles of A and B into explicit Memory
and ``token.wait()`` makes them readable (S9 async rules).  Two forms:

- ``form="staged"``: the copies are issued in the pipeline's "load" stage and waited for
  in its "compute" stage of the same iteration: the pipeline overlaps the stages, so the
  copy of iteration i + 1 runs while iteration i computes, into the next version of As/Bs;
- ``form="carried"``: the first copies are issued before the loop, each iteration waits,
  takes its snapshots and issues the copies of the next k-step (tokens carried by the
  loop), and the last copies are waited for after it.

How each copy runs is the target's: an engine from the catalog's ``copy_engines`` (TMA
or cp.async on the NVIDIA targets, DMA on npu-systolic, software prefetch on x86) or, on
apple-m2, a synchronous cooperative copy; ``planner plan`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exec_,
    f32,
    layout,
    mem,
    memory,
    mma,
    parallel,
    shape,
    stride,
    tile_kernel,
    zeros,
)
from planner.sweep import Space, where


@dataclass(frozen=True)
class AsyncGemmConfig:
    block_m: int = 32
    block_n: int = 32
    block_k: int = 16
    window: int = 2
    form: str = "staged"  # or "carried"


def make_async_gemm(cfg: AsyncGemmConfig = AsyncGemmConfig(), scope: str = exec_.AUTOMATIC,
                    resource=mem.shared):
    if cfg.form not in ("staged", "carried"):
        raise ValueError(f"form must be 'staged' or 'carried', not {cfg.form!r}")

    @tile_kernel("async_gemm")
    def async_gemm(A: TensorView[const(f32), dims("M", "K")],
                   B: TensorView[const(f32), dims("K", "N")],
                   C: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(A.extent(0), cfg.block_m))
        gn = axis("block_n", ceil_div(B.extent(1), cfg.block_n))
        kt = axis("k_tiles", ceil_div(A.extent(1), cfg.block_k))
        m = axis("m", cfg.block_m)
        n = axis("n", cfg.block_n)
        k = axis("k", cfg.block_k)

        for nest in parallel(shape(gm, gn), scope):
            m0 = nest.index(gm) * cfg.block_m
            n0 = nest.index(gn) * cfg.block_n
            As = memory[f32](layout(shape(m, k), stride(cfg.block_k + 1, 1)), resource)
            Bs = memory[f32](layout(shape(k, n), stride(1, cfg.block_k)), resource)
            acc = zeros[f32](shape(m, n))
            if cfg.form == "staged":
                for step in nest.pipeline(shape(kt), window=cfg.window, interval=1):
                    k0 = step.index() * cfg.block_k
                    step.stage("load")
                    ta = As.copy_async(A[coord(m0, k0), shape(m, k)])
                    tb = Bs.copy_async(B[coord(k0, n0), shape(k, n)])

                    step.stage("compute")
                    ta.wait()
                    tb.wait()
                    acc = mma(As.load(), Bs.load(), acc)
            else:
                ta = As.copy_async(A[coord(m0, 0), shape(m, k)])
                tb = Bs.copy_async(B[coord(0, n0), shape(k, n)])
                for step in nest.pipeline(shape(kt), window=cfg.window, interval=1):
                    k0 = step.index() * cfg.block_k
                    ta.wait()
                    tb.wait()
                    a, b = As.load(), Bs.load()
                    ta = As.copy_async(A[coord(m0, k0 + cfg.block_k), shape(m, k)])
                    tb = Bs.copy_async(B[coord(k0 + cfg.block_k, n0), shape(k, n)])
                    acc = mma(a, b, acc)
                ta.wait()
                tb.wait()

            C(coord(m0, n0), shape(m, n)).store(acc)

    return async_gemm


#: The sweep space: tile sizes, the pipeline window and the copy form.
SPACE = Space(
    {"block_m": (16, 32, 64), "block_n": (16, 32, 64), "block_k": (16, 32),
     "window": (2, 3), "form": ("staged", "carried")},
    where("acc tile <= 8192 elements", lambda block_m, block_n: block_m * block_n <= 8192),
)


def kernel(block_m=32, block_n=32, block_k=16, window=2, form="staged"):
    return make_async_gemm(AsyncGemmConfig(block_m, block_n, block_k, window, form))


BINDINGS = {"M": 100, "N": 70, "K": 37}


def reference(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)}
