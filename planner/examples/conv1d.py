"""1-D convolution ``y[b, i] = sum_j w[j] * x[b, i + j]`` (zero past the end), written with
a static tile slice of the loaded block-with-halo (``h[:, j:j + BLOCK]``) and scalar view
elements (``W[j]``, broadcast by the multiply)."""

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
    parallel,
    shape,
    tile_kernel,
)
from planner.sweep import Space

TAPS = 3


def kernel(block_b: int = 2, block: int = 16):
    @tile_kernel("conv1d")
    def conv1d(X: TensorView[const(f32), dims("B", "N")], W: TensorView[const(f32), dims(TAPS)],
               Y: TensorView[f32, dims("B", "N")]):
        gb = axis("block_b", ceil_div(Y.extent(0), block_b))
        gn = axis("block_n", ceil_div(Y.extent(1), block))
        for nest in parallel(shape(gb, gn)):
            at = coord(nest.index(gb) * block_b, nest.index(gn) * block)
            h = X[at, shape(block_b, block + TAPS - 1)]  # the block and its halo
            y = h[:, 0:block] * W[0]
            for j in range(1, TAPS):
                y = y + h[:, j:j + block] * W[j]
            Y(at, shape(block_b, block)).store(y)

    return conv1d


BINDINGS = {"B": 3, "N": 37}
SPACE = Space({"block_b": (1, 2, 4), "block": (8, 16, 32)})


def reference(X: np.ndarray, W: np.ndarray) -> dict[str, np.ndarray]:
    n = X.shape[1]
    padded = np.concatenate([X, np.zeros((X.shape[0], TAPS - 1), X.dtype)], axis=1)
    y = sum(W[j] * padded[:, j:j + n] for j in range(TAPS))
    return {"Y": np.asarray(y, dtype=np.float32).reshape(X.shape)}
