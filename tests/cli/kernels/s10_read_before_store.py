"""S10: a Memory read before any store (there is no implicit zero fill)."""

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
    @tile_kernel("s10_read_before_store")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 4
            buf = memory[f32](shape(4, 4))
            Y(coord(r0, 0), shape(4, 4)).store(buf.load())  # verifier: S10 "never stored"

    return k


BINDINGS = {"M": 16, "N": 4}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    return {"Y": np.zeros_like(X)}
