"""A copy kernel whose "bad" configuration reads a Memory before any store (S10)."""

from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    exec_,
    f32,
    mem,
    memory,
    parallel,
    shape,
    tile_kernel,
)
from planner.sweep import Space

SPACE = Space({"block_m": (2, 4), "mode": ("ok", "bad")})


def kernel(block_m=2, mode="ok"):
    @tile_kernel("flaky")
    def flaky(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gm = axis("block_m", ceil_div(X.extent(0), block_m))
        m = axis("m", block_m)
        n = axis("n", X.extent(1))
        for nest in parallel(shape(gm), exec_.AUTOMATIC):
            r0 = nest.index(gm) * block_m
            x = X[coord(r0, 0), shape(m, n)]
            if mode == "bad":
                buf = memory[f32](shape(m, n), mem.auto_)
                x = buf.load()
            Y(coord(r0, 0), shape(m, n)).store(x)
    return flaky


BINDINGS = {"M": 8, "N": 4}


def reference(X):
    return {"Y": X.copy()}
