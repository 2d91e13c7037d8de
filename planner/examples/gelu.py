"""GELU (tanh approximation): a pure elementwise chain over 1-D tiles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exec_,
    f32,
    parallel,
    shape,
    tanh,
    tile_kernel,
)

SQRT_2_OVER_PI = 0.7978845608028654


@dataclass(frozen=True)
class GeluConfig:
    block: int = 256


def make_gelu(cfg: GeluConfig = GeluConfig(), scope: str = exec_.AUTOMATIC):
    @tile_kernel("gelu")
    def gelu(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        gb = axis("blocks", ceil_div(X.extent(0), cfg.block))
        b = axis("b", cfg.block)
        for nest in parallel(shape(gb), scope):
            i0 = nest.index(gb) * cfg.block
            x = X[coord(i0), shape(b)]
            inner = (x + 0.044715 * (x * x * x)) * SQRT_2_OVER_PI
            y = 0.5 * x * (1.0 + tanh(inner))
            Y(coord(i0), shape(b)).store(y)

    return gelu


def kernel():
    return make_gelu()


BINDINGS = {"N": 1000}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    x = X.astype(np.float64)
    y = 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return {"Y": y.astype(np.float32)}
