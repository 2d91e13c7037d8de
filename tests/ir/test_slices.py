"""Static tile slices (``h[:, j:j + t]``) and scalar view elements (``w[j]``): the DSL, the
verifier's S2 rule, the printers' round trips and the interpreter against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.ir import core
from planner.ir.examples import list_examples, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    const,
    coord,
    dims,
    f32,
    parallel,
    shape,
    tile_kernel,
)
from planner.ir.interpreter import interpret
from planner.ir.json_form import kernel_from_json, kernel_to_json
from planner.ir.parser import parse_kernel
from planner.ir.printer import print_kernel
from planner.ir.structural import structurally_equal
from planner.ir.verify import verify


def _slicer(index):
    """A kernel storing ``index(h)`` of a loaded [4, 8] tile ``h`` into Y (shape of the
    result); the caller's index is any Python subscript."""

    @tile_kernel("slicer")
    def k(X: TensorView[const(f32), dims(4, 8)], Y: TensorView[f32, dims(4, 8)]):
        h = X[coord(0, 0), shape(4, 8)]
        t = index(h)
        Y(coord(0, 0), shape(*t.shape)).store(t) if t.type.rank == 2 else None

    return k


def _slices(kernel: core.Kernel) -> list[core.SliceOp]:
    return [op for op in kernel.walk() if isinstance(op, core.SliceOp)]


@pytest.mark.parametrize(("index", "offsets", "extents", "kept"), [
    (lambda h: h[:, 2:5], (0, 2), (4, 3), (0, 1)),
    (lambda h: h[1:3], (1, 0), (2, 8), (0, 1)),
    (lambda h: h[3], (3, 0), (1, 8), (1,)),
    (lambda h: h[:, 7], (0, 7), (4, 1), (0,)),
])
def test_slice_records_the_window(index, offsets, extents, kept) -> None:
    (op,) = _slices(_slicer(index))
    assert tuple(o.const_value() for o in op.offsets) == offsets
    assert tuple(n.const_value() for n in op.shape) == extents
    assert op.dims == kept


def test_the_whole_tile_is_not_a_slice() -> None:
    assert _slices(_slicer(lambda h: h[:, :])) == []
    assert _slices(_slicer(lambda h: h[0:4, 0:8])) == []


@pytest.mark.parametrize(("index", "message"), [
    (lambda h: h[:, 0:8:2], "slice step 2 in dim 1"),
    (lambda h: h[-1], "negative subscript -1 in dim 0"),
    (lambda h: h[:, 6:10], "slice [6, 10) of dim 1 is outside the tile's extent 8"),
    (lambda h: h[:, 5:3], "slice of dim 1 has negative extent -2"),
    (lambda h: h[0, 0, 0], "a rank-2 tile [4, 8] indexed with 3 subscripts"),
    (lambda h: h[h], "expected an integer or a kernel expression"),
])
def test_slice_mistakes_are_refused_at_capture(index, message) -> None:
    with pytest.raises(PlannerError) as exc:
        _slicer(index)
    assert message in str(exc.value)


def test_a_slice_at_a_region_index_is_refused_by_s2() -> None:
    @tile_kernel("dynamic")
    def k(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        g = axis("g", 4)
        for nest in parallel(shape(g)):
            h = X[coord(0), shape(8)]
            Y(coord(nest.index(g)), shape(4)).store(h[nest.index(g):nest.index(g) + 4])

    with pytest.raises(PlannerError) as exc:
        verify(k, {"N": 8})
    (d,) = exc.value.diagnostics
    assert d.rule == "S2" and "depends on the region index %g" in d.message


def test_a_symbolic_slice_outside_the_tile_is_refused_at_the_bindings() -> None:
    @tile_kernel("symbolic")
    def k(X: TensorView[const(f32), dims("N")], Y: TensorView[f32, dims("N")]):
        h = X[coord(0), shape(8)]
        Y(coord(0), shape(4)).store(h[X.extent(0):X.extent(0) + 4])

    verify(k, {"N": 4})  # [4, 8) fits the 8-element tile
    with pytest.raises(PlannerError) as exc:
        verify(k, {"N": 5})
    (d,) = exc.value.diagnostics
    assert d.rule == "S2" and "window [5, 9) is outside [0, 8) at N=5" in d.message


def test_a_view_element_is_a_rank0_tile_that_broadcasts() -> None:
    @tile_kernel("scale")
    def k(X: TensorView[const(f32), dims(8)], W: TensorView[const(f32), dims(3)],
          Y: TensorView[f32, dims(8)]):
        Y(coord(0), shape(8)).store(X[coord(0), shape(8)] * W[2])

    (op,) = _slices(k)
    assert op.result.type.rank == 0 and op.dims == ()
    x = np.arange(8, dtype=np.float32)
    w = np.array([5, 6, 7], dtype=np.float32)
    out = interpret(k, {"X": x, "W": w, "Y": np.zeros(8, np.float32)})
    np.testing.assert_array_equal(out["Y"], x * 7)


def _conv1d():
    return load_example({p.stem: p for p in list_examples()}["conv1d"])


def test_conv1d_prints_parses_and_round_trips() -> None:
    kernel = _conv1d().kernel
    text = print_kernel(kernel)
    assert '"tile.slice"(%h) <{offsets = [0, 1], shape = [2, 16], dims = [0, 1]}>' in text
    assert structurally_equal(parse_kernel(text), kernel)
    assert structurally_equal(kernel_from_json(kernel_to_json(kernel)), kernel)


@pytest.mark.parametrize("bindings", [{"B": 3, "N": 37}, {"B": 1, "N": 1}, {"B": 0, "N": 5},
                                      {"B": 2, "N": 0}, {"B": 5, "N": 16}])
def test_conv1d_interpreter_matches_numpy(bindings) -> None:
    ex = _conv1d()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((bindings["B"], bindings["N"])).astype(np.float32)
    w = rng.standard_normal(3).astype(np.float32)
    out = interpret(ex.kernel, {"X": x, "W": w, "Y": np.zeros_like(x)})
    # independent of the example's reference: the convolution written out with numpy
    want = np.zeros_like(x)
    for j in range(3):
        want[:, : max(bindings["N"] - j, 0)] += w[j] * x[:, j:]
    np.testing.assert_allclose(out["Y"], want, rtol=1e-6, atol=1e-6)
