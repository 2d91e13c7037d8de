"""The seed's ``make_manual_gemm``, transcribed almost line for line (S19).

Explicit Memory is optional: use it only when stable address identity or a
resource constraint is required.  The ordinary ``make_gemm`` (examples/gemm.py)
remains unchanged.
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
class GemmConfig:
    block_m: int = 32
    block_n: int = 32
    block_k: int = 16
    window: int = 2


def make_manual_gemm(cfg: GemmConfig = GemmConfig(), scope: str = exec_.AUTOMATIC,
                     resource=mem.auto_):
    @tile_kernel("manual_gemm")
    def manual_gemm(A: TensorView[const(f32), dims("M", "K")],
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
            # Distinct local address maps; the logical operand shapes and
            # their common execution owner do not change.
            As = memory[f32](layout(shape(m, k), stride(cfg.block_k + 1, 1)), resource)
            Bs = memory[f32](layout(shape(k, n), stride(1, cfg.block_k)), resource)
            acc = zeros[f32](shape(m, n))

            for step in nest.pipeline(shape(kt), window=cfg.window, interval=1):
                k0 = step.index() * cfg.block_k
                step.stage("load")
                As.store(A[coord(m0, k0), shape(m, k)])
                Bs.store(B[coord(k0, n0), shape(k, n)])

                step.stage("compute")
                acc = mma(As.load(), Bs.load(), acc)

            C(coord(m0, n0), shape(m, n)).store(acc)

    return manual_gemm


#: The sweep space: tile sizes, the pipeline window and where As/Bs may live ("auto":
#: the planner picks a home, "shared": threadgroup/shared memory only).
SPACE = Space(
    {"block_m": (16, 32, 64, 128), "block_n": (16, 32, 64, 128), "block_k": (16, 32, 64),
     "window": (1, 2, 3), "resource": ("auto", "shared")},
    where("acc tile <= 8192 elements", lambda block_m, block_n: block_m * block_n <= 8192),
)

RESOURCES = {"auto": mem.auto_, "shared": mem.shared}


def kernel(block_m=32, block_n=32, block_k=16, window=2, resource="auto"):
    return make_manual_gemm(GemmConfig(block_m, block_n, block_k, window),
                            resource=RESOURCES[resource])


BINDINGS = {"M": 100, "N": 70, "K": 37}


def reference(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)}
