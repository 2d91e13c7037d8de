"""S14: an unused Memory on an empty domain whose stride divides by the empty extent.

At ``N = 0`` the layout ``[4, N] stride [ceildiv(64, N), 1]`` has no elements, so no
address event reaches ``ceildiv(64, N)``: nothing may evaluate it.  The Memory has no
loads or stores, so the lowering does not allocate it.
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
    layout,
    memory,
    parallel,
    shape,
    stride,
    tile_kernel,
)


def kernel():
    @tile_kernel("s14_unused_empty_memory")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        n = X.extent(1)
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 4
            spare = memory[f32](layout(shape(4, n), stride(ceil_div(64, n), 1)))  # noqa: F841
            Y(coord(r0, 0), shape(4, 4)).store(X[coord(r0, 0), shape(4, 4)])

    return k


BINDINGS = {"M": 16, "N": 0}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    Y = np.zeros_like(X)
    Y[:16, :4] = X[:16, :4]
    return {"Y": Y}
