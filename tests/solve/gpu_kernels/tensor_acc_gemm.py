"""A manual GEMM whose accumulator lives in an explicit ``mem.tensor`` Memory.

``As``/``Bs`` are shared memory (the mma's A/B operands), ``Acc`` is tensor memory: the
mma reads it in place (``mma_read``) and accumulates into it (``mma_write``); it is
zeroed and read out by asynchronous copies (tcgen05.st / tcgen05.ld: ``copy_async``).
Plannable only where the catalog lets the mma's scope do all of that (nvidia-b200).
"""

from __future__ import annotations

import numpy as np

from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    mem,
    memory,
    mma,
    parallel,
    serial,
    shape,
    tile_kernel,
    zeros,
)

BM, BN, BK = 64, 64, 16


def kernel():
    @tile_kernel("tensor_acc_gemm")
    def tensor_acc_gemm(A: TensorView[const(f32), dims("M", "K")],
                        B: TensorView[const(f32), dims("K", "N")],
                        C: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(A.extent(0), BM))
        gn = axis("block_n", ceil_div(B.extent(1), BN))
        kt = axis("k_tiles", ceil_div(A.extent(1), BK))
        m, n, k = axis("m", BM), axis("n", BN), axis("k", BK)
        for nest in parallel(shape(gm, gn)):
            m0 = nest.index(gm) * BM
            n0 = nest.index(gn) * BN
            As = memory[f32](shape(m, k), mem.shared)
            Bs = memory[f32](shape(k, n), mem.shared)
            Acc = memory[f32](shape(m, n), mem.tensor)
            Acc.store(zeros[f32](shape(m, n)))
            for step in serial(shape(kt)):
                k0 = step.index() * BK
                As.store(A[coord(m0, k0), shape(m, k)])
                Bs.store(B[coord(k0, n0), shape(k, n)])
                Acc.store(mma(As.load(), Bs.load(), Acc.load()))
            C(coord(m0, n0), shape(m, n)).store(Acc.load())

    return tensor_acc_gemm


BINDINGS = {"M": 100, "N": 70, "K": 37}


def reference(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)}
