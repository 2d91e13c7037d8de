"""S13: a Memory with a broadcast layout (stride 0): valid algebra, not storage."""

from __future__ import annotations

import numpy as np

from planner.ir.frontend import (
    TensorView,
    axis,
    const,
    coord,
    dims,
    f32,
    layout,
    memory,
    parallel,
    shape,
    stride,
    tile_kernel,
)


def kernel():
    @tile_kernel("s13_broadcast_layout")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        m, n = axis("m", 4), axis("n", 4)
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 4
            buf = memory[f32](layout(shape(m, n), stride(0, 1)))  # verifier: S13 "broadcast map"
            buf.store(X[coord(r0, 0), shape(m, n)])
            Y(coord(r0, 0), shape(m, n)).store(buf.load())

    return k


BINDINGS = {"M": 16, "N": 4}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    return {"Y": X.copy()}
