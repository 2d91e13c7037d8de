"""S14: a zero-sized allocation that is still stored and loaded."""

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
    @tile_kernel("s14_empty_alloc_used")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 4
            used = memory[f32](shape(4, 0))  # verifier: S14 "empty logical domain [4, 0]"
            used.store(X[coord(r0, 0), shape(4, 0)])
            Y(coord(r0, 0), shape(4, 0)).store(used.load())

    return k


BINDINGS = {"M": 16, "N": 4}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    return {"Y": np.zeros_like(X)}
