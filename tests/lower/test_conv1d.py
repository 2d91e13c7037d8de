"""conv1d (static tile slices, scalar view elements) compiled for the CPU and emitted as MSL,
both checked against numpy on shapes that are not multiples of the tile, empty and single."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from tests.toolchain import needs_clang

SHAPES = [{"B": 3, "N": 37}, {"B": 1, "N": 1}, {"B": 0, "N": 5}, {"B": 2, "N": 0},
          {"B": 5, "N": 16}]


def _inputs(bindings):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((bindings["B"], bindings["N"])).astype(np.float32)
    w = rng.standard_normal(3).astype(np.float32)
    want = np.zeros_like(x)
    for j in range(3):
        want[:, : max(bindings["N"] - j, 0)] += w[j] * x[:, j:]
    return x, w, want


@pytest.mark.parametrize("bindings", SHAPES)
def test_cpu_matches_numpy(bindings) -> None:
    x, w, want = _inputs(bindings)
    out = planner.run("conv1d", target="x86-avx2", bindings=bindings, inputs={"X": x, "W": w})
    np.testing.assert_allclose(out["Y"], want, rtol=1e-5, atol=1e-6)


@needs_clang
@pytest.mark.parametrize("bindings", SHAPES[:3])
def test_metal_matches_numpy_in_both_thread_orders(bindings) -> None:
    x, w, want = _inputs(bindings)
    out = planner.run("conv1d", target="apple-m2", bindings=bindings, inputs={"X": x, "W": w})
    np.testing.assert_allclose(out["Y"], want, rtol=1e-5, atol=1e-6)


def test_slices_are_read_in_place_not_copied() -> None:
    """The plan keeps the loaded block ``h`` once; each shifted window reads it at an
    offset (the loop program indexes ``%h`` at ``i.1 + j``), so no slice gets a buffer."""
    plan = planner.plan("conv1d", target="x86-avx2")
    loops = planner.lower("conv1d", plan, emit="loops")
    assert "%h[i.0, i.1 + 2]" in loops and "%h[i.0, i.1 + 1]" in loops, loops
    assert {b.name for b in plan.buffers} & {"%0", "%4", "%9"} == set()
