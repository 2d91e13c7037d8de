"""S10: the only store is inside a loop that runs zero times when N = 0."""

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
    memory,
    parallel,
    serial,
    shape,
    tile_kernel,
)


def kernel():
    @tile_kernel("s10_zero_trip_loop")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        kt = axis("k_tiles", ceil_div(X.extent(1), 4))
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 4
            buf = memory[f32](shape(4, 4))
            for step in serial(shape(kt)):
                buf.store(X[coord(r0, step.index() * 4), shape(4, 4)])
            Y(coord(r0, 0), shape(4, 4)).store(buf.load())  # verifier: S10 "run zero times"

    return k


BINDINGS = {"M": 16, "N": 0}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    return {"Y": X.copy()}
