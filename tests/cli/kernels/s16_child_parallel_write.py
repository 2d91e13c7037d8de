"""S16: a child parallel writes its ancestor's Memory (rejected today; reads are fine)."""

from __future__ import annotations

import numpy as np

from planner.ir.frontend import (
    TensorView,
    axis,
    const,
    coord,
    dims,
    f32,
    memory,
    parallel,
    shape,
    tile_kernel,
)


def kernel():
    @tile_kernel("s16_child_parallel_write")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        w = axis("w", 2)
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 8
            buf = memory[f32](shape(4, 4))
            buf.store(X[coord(r0, 0), shape(4, 4)])
            for _inner in parallel(shape(w)):
                buf.store(X[coord(r0 + 4, 0), shape(4, 4)])  # verifier: S16 "child parallel"
            Y(coord(r0, 0), shape(4, 4)).store(buf.load())

    return k


BINDINGS = {"M": 16, "N": 4}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    return {"Y": X.copy()}
