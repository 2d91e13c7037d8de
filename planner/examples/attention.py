"""Flash-attention-style forward pass: a pipeline over key/value tiles.

The running row max ``m_i``, row sum ``l_i`` and accumulator ``acc`` are Tiles
rebound inside the pipeline, so they become loop-carried values (S1).  Keys past
the end of the sequence are masked to -inf before the softmax.
"""

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
    full,
    i32,
    iota,
    maximum,
    mma,
    parallel,
    reduce_max,
    reduce_sum,
    rsqrt,
    shape,
    tile_kernel,
    transpose,
    where,
    zeros,
)
from planner.sweep import Space


@dataclass(frozen=True)
class AttentionConfig:
    block_q: int = 16
    block_kv: int = 16
    window: int = 2


def make_attention(cfg: AttentionConfig = AttentionConfig(), scope: str = exec_.AUTOMATIC):
    @tile_kernel("attention")
    def attention(Q: TensorView[const(f32), dims("L", "D")],
                  K: TensorView[const(f32), dims("S", "D")],
                  V: TensorView[const(f32), dims("S", "D")],
                  O: TensorView[f32, dims("L", "D")]):
        gq = axis("block_q", ceil_div(Q.extent(0), cfg.block_q))
        kv = axis("kv_tiles", ceil_div(K.extent(0), cfg.block_kv))
        q = axis("q", cfg.block_q)
        c = axis("c", cfg.block_kv)
        d = axis("d", Q.extent(1))

        for nest in parallel(shape(gq), scope):
            q0 = nest.index(gq) * cfg.block_q
            scale = rsqrt(full(shape(q, d), Q.extent(1), f32))
            qt = Q[coord(q0, 0), shape(q, d)] * scale
            m_i = full(shape(q), float("-inf"), f32)
            l_i = zeros[f32](shape(q))
            acc = zeros[f32](shape(q, d))

            for step in nest.pipeline(shape(kv), window=cfg.window, interval=1):
                k0 = step.index() * cfg.block_kv
                step.stage("load")
                kt = K[coord(k0, 0), shape(c, d)]
                vt = V[coord(k0, 0), shape(c, d)]

                step.stage("compute")
                s = mma(qt, transpose(kt), zeros[f32](shape(q, c)))
                valid = iota(shape(q, c), 1) < full(shape(q, c), K.extent(0) - k0, i32)
                s = where(valid, s, float("-inf"))
                m_new = maximum(m_i, reduce_max(s, axis=1))
                p = exp(s - broadcast(m_new, shape(q, c), dims=(0,)))
                alpha = exp(m_i - m_new)
                l_i = l_i * alpha + reduce_sum(p, axis=1)
                acc = mma(p, vt, acc * broadcast(alpha, shape(q, d), dims=(0,)))
                m_i = m_new

            O(coord(q0, 0), shape(q, d)).store(acc / broadcast(l_i, shape(q, d), dims=(0,)))

    return attention


#: The sweep space: query and key/value tile sizes and the pipeline window.  Up to a
#: 64×64 score tile (16 KiB of f32, half a CPU core's L1): on the CPU it is both the
#: predicted and the measured best at L = S = 2048 (``planner sweep attention --bind
#: L=2048 --bind S=2048 --bind D=64 --measure``); a 128-row tile was predicted faster
#: than 64×64 but measured slower.  Targets with less room refuse large tiles by capacity.
SPACE = Space({"block_q": (8, 16, 32, 64), "block_kv": (8, 16, 32, 64), "window": (1, 2, 3)})


def kernel(block_q=16, block_kv=16, window=2):
    return make_attention(AttentionConfig(block_q, block_kv, window))


BINDINGS = {"L": 50, "S": 37, "D": 24}


def reference(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> dict[str, np.ndarray]:
    q, k, v = (a.astype(np.float64) for a in (Q, K, V))
    with np.errstate(invalid="ignore", divide="ignore"):
        s = q @ k.T / np.sqrt(q.shape[1]) if q.shape[1] else q @ k.T
        s = s - (s.max(axis=1, keepdims=True) if s.shape[1] else 0.0)
        p = np.exp(s)
        out = (p @ v) / p.sum(axis=1, keepdims=True)
    return {"O": out.astype(np.float32)}
