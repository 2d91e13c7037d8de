"""S10 over the symbols: a store inside a loop initializes a Memory only when the loop's
trip count is provably >= 1 for every admissible value of the symbols.

The admissible values come from the declared ``bounds`` (default ``0..2**31-1``), never
from the bindings of one run: a kernel is defined over its symbols.
"""

from __future__ import annotations

import inspect

import pytest
import z3

from planner.errors import PlannerError
from planner.ir.examples import list_examples, load_example
from planner.ir.expr import emin
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    memory,
    parallel,
    serial,
    shape,
    tile_kernel,
)
from planner.ir.verify import collect_diagnostics, verify


def line_of(marker: str) -> int:
    """The line of this file carrying ``# <marker>``."""
    src = inspect.getsource(inspect.getmodule(line_of))
    for i, text in enumerate(src.splitlines(), start=1):
        if text.rstrip().endswith(f"# {marker}"):
            return i
    raise AssertionError(marker)


def stored_in_loop(extent, label: str = "k"):
    """``buf`` is stored only inside ``for step in serial(k)``, then read after the loop.

    ``extent(X)`` gives the loop's extent from the view ``X: [M, K]``.
    """

    @tile_kernel("stored_in_loop")
    def kernel(X: TensorView[const(f32), dims("M", "K")], Y: TensorView[f32, dims("M", "K")]):
        g = axis("g", 4)
        k = axis(label, extent(X))
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 4
            buf = memory[f32](shape(4, 4))
            for step in serial(shape(k)):
                buf.store(X[coord(r0, step.index() * 16), shape(4, 4)])
            Y(coord(r0, 0), shape(4, 4)).store(buf.load())  # the-read

    return kernel


def k_tiles(X):
    return ceil_div(X.extent(1), 16)


def k_extent(X):
    return X.extent(1)


def s10_errors(kernel, bindings=None, bounds=None):
    diags = collect_diagnostics(kernel, bindings, bounds)
    assert all(d.rule == "S10" for d in diags), [d.render() for d in diags]
    return diags


def rejected(kernel, bindings=None, bounds=None):
    with pytest.raises(PlannerError) as exc:
        verify(kernel, bindings, bounds)
    diags = exc.value.diagnostics
    assert [d.rule for d in diags] == ["S10"], [d.render() for d in diags]
    return diags[0]


@pytest.mark.parametrize("extent", [k_tiles, k_extent], ids=["ceildiv(K,16)", "K"])
def test_rejected_without_bounds_even_when_bindings_make_it_positive(extent):
    kernel = stored_in_loop(extent)
    d = rejected(kernel, {"M": 16, "K": 64})
    trip = str(extent_of(kernel))
    assert d.loc.line == line_of("the-read")
    assert "%buf" in d.message and "loop 'k'" in d.message
    assert "may run zero times" in d.message
    assert f"S10 needs its trip count {trip} >= 1" in d.message
    assert "K = 0 gives 0" in d.message and "no declared bound" in d.message
    assert "--bound K=1.." in d.message and "no implicit zero fill" in d.message
    # ...and without bindings at all
    assert rejected(kernel).message == d.message


def extent_of(kernel):
    from planner.ir.core import LoopOp

    (loop,) = [op for op in kernel.walk() if isinstance(op, LoopOp)]
    (ax,) = loop.axes
    return ax.extent


@pytest.mark.parametrize("extent", [k_tiles, k_extent], ids=["ceildiv(K,16)", "K"])
def test_accepted_with_a_declared_lower_bound(extent):
    kernel = stored_in_loop(extent)
    verify(kernel, bounds={"K": (1, 4096)})
    verify(kernel, {"M": 16, "K": 64}, {"K": (1, 4096)})
    assert collect_diagnostics(kernel, bounds={"K": (1, 4096), "M": (0, 8)}) == []


@pytest.mark.parametrize("extent", [k_tiles, k_extent], ids=["ceildiv(K,16)", "K"])
def test_rejected_when_the_declared_bound_admits_zero(extent):
    kernel = stored_in_loop(extent)
    d = rejected(kernel, {"M": 16, "K": 64}, {"K": (0, 4096)})
    assert "K in 0..4096" in d.message and "no declared bound" not in d.message
    assert "K = 0 gives 0" in d.message and "--bound K=1.." in d.message


def test_constant_positive_trip_count_is_accepted():
    verify(stored_in_loop(lambda X: 3))
    verify(stored_in_loop(lambda X: 1), bounds={"K": (0, 4096)})


def test_constant_zero_trip_count_is_rejected():
    d = rejected(stored_in_loop(lambda X: 0), {"M": 16, "K": 64}, {"K": (1, 4096)})
    assert "%buf" in d.message and "loop 'k'" in d.message
    assert "runs zero times (S10" in d.message and "axis 'k' has extent 0" in d.message


def test_z3_proves_what_interval_arithmetic_cannot():
    # K + 1 - K: the interval of the sum is [1 - 2**31 + 1, ...], z3 sees it is 1
    verify(stored_in_loop(lambda X: X.extent(1) + 1 - X.extent(1)))
    # min(K, 5) - K + 1 is 1 - max(K - 5, 0): z3 refutes it with some K >= 6
    d = rejected(stored_in_loop(lambda X: emin(X.extent(1), 5) - X.extent(1) + 1),
                 bounds={"K": (1, 4096)})
    assert "can be < 1 (K = " in d.message and "K in 1..4096" in d.message
    verify(stored_in_loop(lambda X: emin(X.extent(1), 5) - X.extent(1) + 1),
           bounds={"K": (1, 5)})


def test_z3_giving_up_counts_as_not_provable(monkeypatch):
    import planner.prove.z3_exprs as z3_exprs

    monkeypatch.setattr(z3_exprs, "check", lambda solver, ms: z3.unknown)
    kernel = stored_in_loop(lambda X: X.extent(1) + 1 - X.extent(1))
    d = rejected(kernel, {"M": 16, "K": 64})
    assert "could not be shown >= 1" in d.message and "z3 gave up" in d.message
    assert "--bound K=1.." in d.message
    # the interval proof needs no z3
    verify(stored_in_loop(k_tiles), bounds={"K": (1, 4096)})


def test_every_axis_of_a_loop_nest_must_be_at_least_one():
    @tile_kernel("nest")
    def kernel(X: TensorView[const(f32), dims("M", "K")], Y: TensorView[f32, dims("M", "K")]):
        g = axis("g", 4)
        kt = axis("kt", ceil_div(X.extent(1), 16))
        mt = axis("mt", X.extent(0))
        for _nest in parallel(shape(g)):
            buf = memory[f32](shape(4, 4))
            for step in serial(shape(kt, mt)):
                buf.store(X[coord(step.index(mt), step.index(kt) * 16), shape(4, 4)])
            Y(coord(0, 0), shape(4, 4)).store(buf.load())

    d = rejected(kernel, {"M": 16, "K": 64}, {"K": (1, 4096)})
    assert "loop 'kt_mt'" in d.message and "trip count ceildiv(K, 16) * M >= 1" in d.message
    assert "axis 'mt' extent M" in d.message and "axis 'kt'" not in d.message
    assert "--bound M=1.." in d.message and "--bound K=" not in d.message
    d = rejected(kernel, {"M": 16, "K": 64})
    assert "--bound K=1.. --bound M=1.." in d.message
    verify(kernel, bounds={"K": (1, 4096), "M": (1, 4096)})


def test_region_indices_range_over_their_region():
    # Inside instance %gb of ceildiv(K, 16) blocks, K - 16 * %gb >= 1: when K = 0 the
    # region has no instance and nothing is read.
    @tile_kernel("tail")
    def kernel(X: TensorView[const(f32), dims("M", "K")], Y: TensorView[f32, dims("M", "K")]):
        gb = axis("gb", ceil_div(X.extent(1), 16))
        for nest in parallel(shape(gb)):
            tail = axis("tail", X.extent(1) - nest.index(gb) * 16)
            buf = memory[f32](shape(4, 4))
            for step in serial(shape(tail)):
                buf.store(X[coord(0, step.index()), shape(4, 4)])
            Y(coord(0, 0), shape(4, 4)).store(buf.load())

    verify(kernel)
    verify(kernel, bounds={"K": (0, 100)})


def test_store_before_the_loop_needs_no_bound():
    @tile_kernel("pre")
    def kernel(X: TensorView[const(f32), dims("M", "K")], Y: TensorView[f32, dims("M", "K")]):
        g = axis("g", 4)
        k = axis("k", X.extent(1))
        for _nest in parallel(shape(g)):
            buf = memory[f32](shape(4, 4))
            buf.store(X[coord(0, 0), shape(4, 4)])
            for step in serial(shape(k)):
                buf.store(X[coord(0, step.index()), shape(4, 4)])
            Y(coord(0, 0), shape(4, 4)).store(buf.load())

    verify(kernel)


def test_an_empty_declared_bound_is_reported():
    diags = collect_diagnostics(stored_in_loop(k_tiles), bounds={"K": (5, 1)})
    assert any("declared bound K = 5..1 is empty" in d.message for d in diags)


@pytest.mark.parametrize("path", list_examples(), ids=lambda p: p.stem)
def test_builtin_examples_verify_without_bounds(path):
    ex = load_example(path)
    verify(ex.kernel)
    verify(ex.kernel, ex.bindings)


def test_a_binding_outside_its_declared_bound_is_refused() -> None:
    from planner.ir.verify import verify

    ex = load_example({p.stem: p for p in list_examples()}["softmax"])
    verify(ex.kernel, {"M": 15, "N": 70}, {"M": (10, 20)})
    with pytest.raises(PlannerError) as exc:
        verify(ex.kernel, {"M": 5, "N": 70}, {"M": (10, 20)})
    (d,) = exc.value.diagnostics
    assert d.rule == "bounds" and "binding M=5 is outside its declared bound M = 10..20" in \
        d.message
