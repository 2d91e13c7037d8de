"""S14: a stride that divides by zero on a non-empty domain.

The Memory's shape ``[4, 4]`` does not depend on ``N``, so at ``N = 0`` its address
map evaluates ``4 * ceildiv(N, N)``: a division by zero, which is an error (S14).
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
    @tile_kernel("s14_nonempty_zero_divisor")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        n = X.extent(1)
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 4
            buf = memory[f32](layout(shape(4, 4), stride(4 * ceil_div(n, n), 1)))
            buf.store(X[coord(r0, 0), shape(4, 4)])
            Y(coord(r0, 0), shape(4, 4)).store(buf.load())

    return k


BINDINGS = {"M": 16, "N": 4}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    Y = np.zeros_like(X)
    Y[:16, :4] = X[:16, :4]
    return {"Y": Y}
