"""DSL mistakes refused at capture, at the user's file:line:column (issue 14).

The expected line and column are computed from this file's own source with
:mod:`inspect`, never written down as numbers.
"""

from __future__ import annotations

import inspect
import warnings

import pytest

from planner.errors import PlannerError
from planner.ir.frontend import (
    DslWarning,
    TensorView,
    axis,
    const,
    coord,
    dims,
    f32,
    reduce_max,
    reduce_sum,
    shape,
    tile_kernel,
)
from planner.ir.verify import unstored_outputs


def _where(fn, text: str) -> tuple[int, int]:
    """1-based line and column of the first occurrence of ``text`` in ``fn``'s source."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return first + i, line.index(text) + 1
    raise AssertionError(f"{text!r} not in the source of {fn.__name__}")


def _located(exc: pytest.ExceptionInfo[PlannerError], fn, text: str) -> str:
    d = exc.value.diagnostics[0]
    line, col = _where(fn, text)
    assert d.loc.file == __file__
    assert (d.loc.line, d.loc.col) == (line, col)
    assert str(d.loc) == f"{__file__}:{line}:{col}"
    assert text in d.message  # the source excerpt ends the message
    assert d.message.rstrip().endswith("^")
    return d.message


def test_store_into_a_window_of_another_shape():
    with pytest.raises(PlannerError) as exc:
        @tile_kernel("bad_store")
        def bad_store(X: TensorView[const(f32), dims("M", "N")],
                      Y: TensorView[f32, dims("M", "N")]):
            m, n = axis("m", 4), axis("n", 8)
            t = X[coord(0, 0), shape(m, n)]
            Y(coord(0, 0), shape(n, m)).store(t)

    message = _located(exc, test_store_into_a_window_of_another_shape,
                       "Y(coord(0, 0), shape(n, m)).store(t)")
    assert "store of a tile of shape [4, 8] into a window of Y declared with shape [8, 4]" \
        in message


def test_store_into_a_window_of_the_same_shape_is_fine():
    @tile_kernel("good_store")
    def good_store(X: TensorView[const(f32), dims("M", "N")],
                   Y: TensorView[f32, dims("M", "N")]):
        m, n = axis("m", 4), axis("n", 8)
        Y(coord(0, 0), shape(m, n)).store(X[coord(0, 0), shape(m, n)])

    assert good_store.name == "good_store"


def test_reduce_axis_out_of_range():
    with pytest.raises(PlannerError) as exc:
        @tile_kernel("bad_axis")
        def bad_axis(X: TensorView[const(f32), dims("M", "N")],
                     Y: TensorView[f32, dims("M")]):
            m, n = axis("m", 4), axis("n", 8)
            Y(coord(0), shape(m)).store(reduce_sum(X[coord(0, 0), shape(m, n)], axis=2))

    message = _located(exc, test_reduce_axis_out_of_range, "reduce_sum(X[")
    assert "reduce_sum(axis=2) on a rank-2 tile [4, 8]: the axis must be in [-2, 2)" in message


def test_reduce_negative_axis_counts_from_the_end_and_is_bounded():
    @tile_kernel("last_axis")
    def last_axis(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M")]):
        m, n = axis("m", 4), axis("n", 8)
        Y(coord(0), shape(m)).store(reduce_max(X[coord(0, 0), shape(m, n)], axis=-1))

    (red,) = [op for op in last_axis.walk() if op.SPEC.name == "tile.reduce"]
    assert red.axis == 1
    with pytest.raises(PlannerError, match=r"reduce_max\(axis=-3\) on a rank-2 tile"):
        @tile_kernel("too_negative")
        def too_negative(X: TensorView[const(f32), dims("M", "N")]):
            reduce_max(X[coord(0, 0), shape(axis("m", 4), axis("n", 8))], axis=-3)


def test_view_annotation_with_a_bare_int():
    with pytest.raises(PlannerError) as exc:
        @tile_kernel("bare_int")
        def bare_int(X: TensorView[f32, 2]):
            pass

    message = _located(exc, test_view_annotation_with_a_bare_int, "TensorView[f32, 2]")
    assert 'TensorView[f32, 2]: the extents of a view are spelled dims(...)' in message
    assert 'TensorView[f32, dims("M", "N")]' in message


def test_view_annotation_with_a_bare_int_evaluated_eagerly():
    # Without ``from __future__ import annotations`` the annotation runs at def time.
    with pytest.raises(PlannerError) as exc:
        eager = TensorView[const(f32), 2, 3]  # noqa: F841

    message = _located(exc, test_view_annotation_with_a_bare_int_evaluated_eagerly,
                       "TensorView[const(f32), 2, 3]")
    assert 'TensorView[const(f32), dims("M", "N")]' in message


def test_python_exception_in_the_kernel_body():
    with pytest.raises(PlannerError) as exc:
        @tile_kernel("raises")
        def raises(X: TensorView[const(f32), dims("M", "N")]):
            sizes = {"m": 4}
            axis("n", sizes["n"])

    message = _located(exc, test_python_exception_in_the_kernel_body, 'sizes["n"]')
    assert "kernel 'raises' raised KeyError: 'n'" in message
    assert isinstance(exc.value.__cause__, KeyError)


def test_output_view_never_stored_warns():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @tile_kernel("forgets")
        def forgets(X: TensorView[const(f32), dims("M", "N")],
                    Y: TensorView[f32, dims("M", "N")],
                    Z: TensorView[f32, dims("M", "N")]):
            m, n = axis("m", 4), axis("n", 8)
            Y(coord(0, 0), shape(m, n)).store(X[coord(0, 0), shape(m, n)])

    found = [w for w in caught if issubclass(w.category, DslWarning)]
    assert [str(w.message) for w in found] == [
        "output view %Z of kernel 'forgets' is never stored: it keeps whatever it held "
        "before the kernel ran"]
    assert found[0].filename == __file__
    (diag,) = unstored_outputs(forgets)
    assert diag.severity.value == "warning" and "%Z" in diag.message
