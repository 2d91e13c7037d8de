"""Row softmax: ``x`` and ``e = exp(x - max)`` each have two consumers (the S4 case)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.ir.frontend import (
    TensorView,
    axis,
    broadcast,
    ceil_div,
    const,
    coord,
    dims,
    exec_,
    exp,
    f32,
    parallel,
    reduce_max,
    reduce_sum,
    shape,
    tile_kernel,
)
from planner.sweep import Space


@dataclass(frozen=True)
class SoftmaxConfig:
    block_m: int = 4


def make_softmax(cfg: SoftmaxConfig = SoftmaxConfig(), scope: str = exec_.AUTOMATIC):
    @tile_kernel("softmax")
    def softmax(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(X.extent(0), cfg.block_m))
        m = axis("m", cfg.block_m)
        n = axis("n", X.extent(1))

        for nest in parallel(shape(gm), scope):
            r0 = nest.index(gm) * cfg.block_m
            x = X[coord(r0, 0), shape(m, n)]
            mx = reduce_max(x, axis=1)
            sh = x - broadcast(mx, shape(m, n), dims=(0,))
            e = exp(sh)
            s = reduce_sum(e, axis=1)
            y = e / broadcast(s, shape(m, n), dims=(0,))
            Y(coord(r0, 0), shape(m, n)).store(y)

    return softmax


#: The sweep space: rows per instance.
SPACE = Space({"block_m": (1, 2, 4, 8, 16, 32)})


def kernel(block_m=4):
    return make_softmax(SoftmaxConfig(block_m))


BINDINGS = {"M": 100, "N": 70}


def reference(X: np.ndarray) -> dict[str, np.ndarray]:
    x = X.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.exp(x - (x.max(axis=1, keepdims=True) if x.shape[1] else 0.0))
        return {"Y": (e / e.sum(axis=1, keepdims=True)).astype(np.float32)}
