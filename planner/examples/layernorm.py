"""Layer normalization over rows: two reductions and a scale/shift epilogue."""

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
    f32,
    full,
    parallel,
    reduce_sum,
    rsqrt,
    shape,
    tile_kernel,
)
from planner.sweep import Space


@dataclass(frozen=True)
class LayerNormConfig:
    block_m: int = 4
    eps: float = 1e-5


def make_layernorm(cfg: LayerNormConfig = LayerNormConfig(), scope: str = exec_.AUTOMATIC):
    @tile_kernel("layernorm")
    def layernorm(X: TensorView[const(f32), dims("M", "N")],
                  W: TensorView[const(f32), dims("N")],
                  Bias: TensorView[const(f32), dims("N")],
                  Y: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(X.extent(0), cfg.block_m))
        m = axis("m", cfg.block_m)
        n = axis("n", X.extent(1))

        for nest in parallel(shape(gm), scope):
            r0 = nest.index(gm) * cfg.block_m
            x = X[coord(r0, 0), shape(m, n)]
            count = full(shape(m), X.extent(1), f32)
            mean = reduce_sum(x, axis=1) / count
            xc = x - broadcast(mean, shape(m, n), dims=(0,))
            var = reduce_sum(xc * xc, axis=1) / count
            inv = rsqrt(var + cfg.eps)
            w = broadcast(W[coord(0), shape(n)], shape(m, n), dims=(1,))
            b = broadcast(Bias[coord(0), shape(n)], shape(m, n), dims=(1,))
            y = xc * broadcast(inv, shape(m, n), dims=(0,)) * w + b
            Y(coord(r0, 0), shape(m, n)).store(y)

    return layernorm


#: The sweep space: rows per instance.
SPACE = Space({"block_m": (1, 2, 4, 8, 16, 32)})


def kernel(block_m=4):
    return make_layernorm(LayerNormConfig(block_m=block_m))


BINDINGS = {"M": 100, "N": 70}


def reference(X: np.ndarray, W: np.ndarray, Bias: np.ndarray) -> dict[str, np.ndarray]:
    x = X.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.mean(axis=1, keepdims=True) if x.shape[1] else np.zeros((x.shape[0], 1))
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True) if x.shape[1] else mean
        y = (x - mean) / np.sqrt(var + LayerNormConfig().eps) * W + Bias
    return {"Y": y.astype(np.float32)}
