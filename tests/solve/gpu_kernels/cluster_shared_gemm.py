"""A GEMM whose B panel is shared by a thread-block cluster through distributed shared memory.

The outer parallel is bound to the ``cluster`` scope and owns ``Bs`` (``mem.cluster``):
one copy per cluster, filled once at cluster scope (an asynchronous copy from global
memory: the catalog lets a cluster only ``copy_async`` there) and read by each of the
cluster's ``CB`` blocks, which the catalog's cluster sync rule (``barrier.cluster``) must
order after the fill.  Plannable where a cluster-class resource exists (nvidia-h100/b200).
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
    shape,
    tile_kernel,
    zeros,
)

BM, BN, CB = 32, 32, 4  # block tile, and blocks per cluster along M


def kernel():
    @tile_kernel("cluster_shared_gemm")
    def cluster_shared_gemm(A: TensorView[const(f32), dims("M", 16)],
                            B: TensorView[const(f32), dims(16, "N")],
                            C: TensorView[f32, dims("M", "N")]):
        gc = axis("cluster_m", ceil_div(A.extent(0), BM * CB))
        gn = axis("block_n", ceil_div(B.extent(1), BN))
        cb = axis("cluster_block", CB)
        m, n, k = axis("m", BM), axis("n", BN), axis("k", 16)
        for cl in parallel(shape(gc, gn), scope="cluster"):
            n0 = cl.index(gn) * BN
            Bs = memory[f32](shape(k, n), mem.cluster)
            Bs.store(B[coord(0, n0), shape(k, n)])
            for blk in parallel(shape(cb), scope="block"):
                m0 = (cl.index(gc) * CB + blk.index(cb)) * BM
                acc = mma(A[coord(m0, 0), shape(m, k)], Bs.load(), zeros[f32](shape(m, n)))
                C(coord(m0, n0), shape(m, n)).store(acc)

    return cluster_shared_gemm


BINDINGS = {"M": 200, "N": 70}


def reference(A: np.ndarray, B: np.ndarray) -> dict[str, np.ndarray]:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)}
