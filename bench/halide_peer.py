"""Halide as a peer of bench/peers.py: GELU-tanh, row softmax and layernorm written in
Halide's Python API (``import halide as hl``), each scheduled by the fastest of Halide's
shipped CPU autoschedulers that load (Mullapudi2016, Li2018, Adams2019; one that does
not load or apply is skipped with a note), JIT-compiled once outside the timing.

GELU evaluates tanh as ``1 - 2/(exp(2u) + 1)`` with Halide's vectorized ``exp``:
``hl.tanh`` is a scalar libm call (about 30× slower on 16M elements), so no Halide user
after speed would write it. The thread count comes from ``HL_NUM_THREADS``, set before
the child imports halide.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

AUTOSCHEDULERS = ("Mullapudi2016", "Li2018", "Adams2019")
KINDS = ("softmax", "layernorm", "gelu")
_SQRT_2_OVER_PI = 0.7978845608028654


def load_autoschedulers(hl: Any) -> tuple[list[str], list[str]]:
    """Load the autoscheduler plugins shipped in the halide package: (names, notes)."""
    libs = Path(hl.__file__).resolve().parent
    names, notes = [], []
    for name in AUTOSCHEDULERS:
        found = sorted(libs.rglob(f"libautoschedule_{name.lower()}.*"))
        try:
            if not found:
                raise FileNotFoundError(f"no libautoschedule_{name.lower()} under {libs}")
            hl.load_plugin(str(found[0]))
            names.append(name)
        except Exception as e:  # a plugin that does not load is skipped
            notes.append(f"halide {name} skipped: {type(e).__name__}: {e}")
    return names, notes


def _gelu(hl: Any, n: int) -> tuple[list[Any], Any]:
    x = hl.ImageParam(hl.Float(32), 1, "x")
    i = hl.Var("i")
    f = hl.Func("gelu")
    v = x[i]
    u = hl.f32(_SQRT_2_OVER_PI) * (v + hl.f32(0.044715) * v * v * v)
    t = hl.f32(1.0) - hl.f32(2.0) / (hl.exp(hl.f32(2.0) * u) + hl.f32(1.0))
    f[i] = hl.f32(0.5) * v * (hl.f32(1.0) + t)
    return [x], f


def _softmax(hl: Any, n: int) -> tuple[list[Any], Any]:
    x = hl.ImageParam(hl.Float(32), 2, "x")
    j, i, r = hl.Var("j"), hl.Var("i"), hl.RDom([(0, n)], "r")
    mx, e, s, out = hl.Func("mx"), hl.Func("e"), hl.Func("s"), hl.Func("softmax")
    mx[i] = hl.maximum(x[r.x, i])
    e[j, i] = hl.exp(x[j, i] - mx[i])
    s[i] = hl.sum(e[r.x, i])
    out[j, i] = e[j, i] / s[i]
    return [x], out


def _layernorm(hl: Any, n: int) -> tuple[list[Any], Any]:
    x = hl.ImageParam(hl.Float(32), 2, "x")
    w, b = hl.ImageParam(hl.Float(32), 1, "w"), hl.ImageParam(hl.Float(32), 1, "b")
    j, i, r = hl.Var("j"), hl.Var("i"), hl.RDom([(0, n)], "r")
    mean, var, out = hl.Func("mean"), hl.Func("var"), hl.Func("layernorm")
    mean[i] = hl.sum(x[r.x, i]) / hl.f32(n)
    d = x[r.x, i] - mean[i]
    var[i] = hl.sum(d * d) / hl.f32(n)
    out[j, i] = (x[j, i] - mean[i]) / hl.sqrt(var[i] + hl.f32(1e-5)) * w[j] + b[j]
    return [x, w, b], out


_PIPELINES = {"gelu": _gelu, "softmax": _softmax, "layernorm": _layernorm}


def _compile(hl: Any, kind: str, arrays: list[np.ndarray], threads: int,
             scheduler: str) -> Callable[[], np.ndarray]:
    params, func = _PIPELINES[kind](hl, arrays[0].shape[-1])
    for p, a in zip(params, arrays, strict=True):
        for d in range(a.ndim):  # Halide's dimension 0 is numpy's last axis
            p.dim(d).set_estimate(0, a.shape[a.ndim - 1 - d])
        p.set(hl.Buffer(a))
    shape = arrays[0].shape
    func.set_estimates([(0, s) for s in reversed(shape)])
    pipe = hl.Pipeline(func)
    target = hl.get_jit_target_from_environment()
    pipe.apply_autoscheduler(target, hl.AutoschedulerParams(
        scheduler, {"parallelism": str(threads)}))
    pipe.compile_jit(target)
    out = np.empty(shape, np.float32)
    buf = hl.Buffer(out)

    def run() -> np.ndarray:
        pipe.realize(buf)
        return out
    return run


def build(hl: Any, kind: str, arrays: list[np.ndarray], threads: int,
          schedulers: list[str]) -> tuple[Callable[[], np.ndarray] | None, str]:
    """The fastest autoscheduled pipeline for ``kind`` on ``arrays`` (best of three
    untimed-warm calls each) and a note naming every scheduler's time or failure."""
    best: tuple[float, Callable[[], np.ndarray]] | None = None
    parts = []
    for name in schedulers:
        try:
            run = _compile(hl, kind, arrays, threads, name)
        except Exception as e:  # a scheduler that cannot schedule this pipeline
            parts.append(f"{name} failed ({type(e).__name__})")
            continue
        run()
        t = min(_once(run) for _ in range(3))
        parts.append(f"{name} {t * 1e3:.2f} ms")
        if best is None or t < best[0]:
            best = (t, run)
    chosen = f"; chose the fastest ({min(parts, key=_ms)})" if best else ""
    return (best[1] if best else None), f"halide {kind} {arrays[0].shape}: " \
        + ", ".join(parts) + chosen


def _once(f: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def _ms(part: str) -> float:
    return float(part.split()[1]) if part.endswith(" ms") else float("inf")


def set_threads(threads: int) -> None:
    """Halide's thread pool size; call before ``import halide``."""
    os.environ["HL_NUM_THREADS"] = str(threads)
