"""The ordinary ``make_gemm``: no Memory, the planner decides everything (S19)."""

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
    mma,
    parallel,
    shape,
    tile_kernel,
    zeros,
)
from planner.sweep import Space, where


@dataclass(frozen=True)
class GemmConfig:
    block_m: int = 32
    block_n: int = 32
    block_k: int = 16
    window: int = 2


def make_gemm(cfg: GemmConfig = GemmConfig(), scope: str = exec_.AUTOMATIC):
    @tile_kernel("gemm")
    def gemm(A: TensorView[const(f32), dims("M", "K")],
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
            acc = zeros[f32](shape(m, n))
            for step in nest.pipeline(shape(kt), window=cfg.window, interval=1):
                k0 = step.index() * cfg.block_k
                acc = mma(A[coord(m0, k0), shape(m, k)], B[coord(k0, n0), shape(k, n)], acc)
            C(coord(m0, n0), shape(m, n)).store(acc)

    return gemm


#: The sweep space: tile sizes and the pipeline window.
SPACE = Space(
    {"block_m": (8, 16, 32, 64), "block_n": (8, 16, 32, 64), "block_k": (8, 16, 32),
     "window": (1, 2, 3)},
    where("acc tile <= 2048 elements", lambda block_m, block_n: block_m * block_n <= 2048),
)


def kernel(block_m=32, block_n=32, block_k=16, window=2):
    return make_gemm(GemmConfig(block_m, block_n, block_k, window))


BINDINGS = {"M": 100, "N": 70, "K": 37}


def reference(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)}
