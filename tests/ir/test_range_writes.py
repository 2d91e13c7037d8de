"""Range-aware MemorySSA (S16): windowed Memory stores from the instances of a child parallel.

Each instance of a child ``parallel`` may write a window of an ancestor's Memory
(``acc(coord(r0, 0), shape(t, n)).store(tile)``) when z3 proves that no two instances
write one element and that every window lies inside the Memory; the region then
carries the Memory's state (a block argument per instance, a yield) and joins the
instances' states into its result.  Overlapping windows are refuted with a
counterexample (the two instances and one element they both write), out-of-bounds
windows with the element range, and a z3 ``unknown`` refuses the store as not proved.
"""

from __future__ import annotations

import inspect

import jsonschema
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.catalog import CatalogRegistry
from planner.errors import PlannerError
from planner.ir import core
from planner.ir.dtypes import DType
from planner.ir.expr import Const
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
    zeros,
)
from planner.ir.graph import dataflow_graph
from planner.ir.interpreter import interpret
from planner.ir.json_form import kernel_from_json, kernel_json_schema, kernel_to_json
from planner.ir.parser import parse_kernel
from planner.ir.printer import print_kernel
from planner.ir.structural import structural_diff
from planner.ir.verify import collect_diagnostics, verify

T = 3  # the row tile: the test shapes are not multiples of it


def _line(fn, text: str, nth: int = 0) -> int:
    """The 1-based line of the ``nth`` occurrence of ``text`` in ``fn``'s source."""
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, line in enumerate(lines) if text in line]
    assert len(hits) > nth, f"{text!r} not in the source of {fn.__name__}"
    return hits[nth]


def _ops(kernel: core.Kernel, cls: type) -> list:
    return [op for op in kernel.walk() if isinstance(op, cls)]


def _errors(kernel: core.Kernel, **kw) -> list:
    return [d for d in collect_diagnostics(kernel, **kw) if d.severity.value == "error"]


# --------------------------------------------------------------------------- kernels


def build_rows(height: int = T, extra_rows: int = 0, init: bool = False):
    """Each instance of ``parallel(shape(g))`` writes rows ``g*T : g*T + height`` of a
    kernel-level Memory (stored whole with zeros first when ``init``); after the region
    the kernel loads it whole."""

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        rows = ceil_div(X.extent(0), T) * T
        n = X.extent(1)
        g = axis("g", ceil_div(X.extent(0), T))
        acc = memory[f32](shape(rows + extra_rows, n))
        if init:
            acc.store(zeros(shape(rows + extra_rows, n)))
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * T
            tile = X[coord(r0, 0), shape(height, n)] * 2.0
            acc(coord(r0, 0), shape(height, n)).store(tile)  # the window store
        Y(coord(0, 0), shape(rows + extra_rows, n)).store(acc.load())

    return tile_kernel("rows")(kernel), kernel


def build_nested():
    """The Memory belongs to an instance of the outer parallel (a column block); the
    instances of the inner parallel write its row windows, each in a serial loop of
    one-row stores."""

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        rows = ceil_div(X.extent(0), T) * T
        gc = axis("gc", ceil_div(X.extent(1), 2))
        g = axis("g", ceil_div(X.extent(0), T))
        r = axis("r", T)
        for col in parallel(shape(gc)):
            c0 = col.index(gc) * 2
            blk = memory[f32](shape(rows, 2))
            for nest in parallel(shape(g)):
                for step in serial(shape(r)):
                    row = nest.index(g) * T + step.index(r)
                    blk(coord(row, 0), shape(1, 2)).store(X[coord(row, c0), shape(1, 2)] + 1.0)
            Y(coord(0, c0), shape(rows, 2)).store(blk.load())

    return tile_kernel("nested")(kernel), kernel


SHAPES = [(0, 4), (1, 1), (1, 5), (2, 3), (5, 4), (7, 1), (10, 6)]


def _inputs(m: int, n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(m * 31 + n)
    x = rng.standard_normal((m, n)).astype(np.float32)
    return {"X": x, "Y": np.full((m, n), np.nan, np.float32)}


# --------------------------------------------------------------------------- accepted


@pytest.mark.parametrize("m,n", SHAPES)
def test_disjoint_row_windows_match_numpy(m, n):
    k, _ = build_rows()
    verify(k)  # symbolic: every M, N
    if m * n:  # an empty Memory with uses is S14 at bindings that make it empty
        verify(k, {"M": m, "N": n})
    np.testing.assert_array_equal(interpret(k, _inputs(m, n))["Y"], _inputs(m, n)["X"] * 2)


@pytest.mark.parametrize("m,n", SHAPES)
def test_windows_of_an_outer_instance_memory_written_in_a_loop_match_numpy(m, n):
    k, _ = build_nested()
    verify(k)
    np.testing.assert_array_equal(interpret(k, _inputs(m, n))["Y"], _inputs(m, n)["X"] + 1)


def test_the_parallel_carries_the_state_and_joins_it():
    k, _ = build_rows()
    (region,) = _ops(k, core.ParallelOp)
    (alloc,) = _ops(k, core.AllocOp)
    (store,) = _ops(k, core.MemStoreOp)
    (load,) = _ops(k, core.MemLoadOp)
    assert region.inits == (alloc.initial_state,)
    assert store.state is region.body.args[0] and store.windowed
    assert region.body.ops[-1].values == (store.result,)
    assert load.state is region.results[0]  # the joined state


def test_nested_parallels_carry_the_state_through_the_loop():
    k, _ = build_nested()
    outer, inner = _ops(k, core.ParallelOp)
    assert not outer.inits  # the Memory is its own
    (loop,) = _ops(k, core.LoopOp)
    assert inner.inits and loop.inits == (inner.body.args[0],)
    assert inner.body.ops[-1].values == (loop.results[0],)


# --------------------------------------------------------------------------- refused


def test_overlapping_windows_are_refuted_with_a_counterexample():
    k, fn = build_rows(height=T + 1, extra_rows=1, init=True)  # g*T : g*T + T + 1 overlap
    (d,) = _errors(k)
    assert d.rule == "S16"
    assert d.loc.line == _line(fn, "# the window store")
    assert "two instances write overlapping windows" in d.message
    assert ("instance %g = 0 and instance %g = 1 both write element [3, 0] at M = 4, N = 1"
            in d.message), d.message
    assert "%acc" in d.message and "parallel region 'g'" in d.message
    # the counterexample is real: instances 0 and 1 write rows [0, 4) and [3, 7)
    assert all(g * T <= 3 < g * T + T + 1 for g in (0, 1))


def test_out_of_bounds_window_is_refused():
    k, fn = build_rows(height=T + 1)  # the last instance writes one row past the Memory
    errors = _errors(k)
    bounds = [d for d in errors if "is not inside the memory" in d.message]
    assert len(bounds) == 1 and bounds[0].rule == "S16"
    assert bounds[0].loc.line == _line(fn, "# the window store")
    assert "it covers [0, 4) x [0, 1) of [0, 3) x [0, 1) at %g = 0, M = 1, N = 1" in (
        bounds[0].message), bounds[0].message


def test_z3_unknown_refuses_the_store_as_not_proved(monkeypatch):
    import z3

    from planner.prove import z3_exprs

    k, fn = build_rows()
    monkeypatch.setattr(z3_exprs, "check", lambda solver, ms: z3.unknown)
    errors = _errors(k)
    assert errors and all(d.rule == "S16" for d in errors if "could not prove" in d.message)
    texts = [d.message for d in errors]
    assert any("could not prove" in t and "disjoint" in t and "refused as not proved" in t
               for t in texts), texts
    assert any("could not prove" in t and "inside the memory" in t for t in texts), texts
    assert all(d.loc.line == _line(fn, "# the window store")
               for d in errors if d.rule == "S16")


def test_a_read_inside_the_writing_parallel_races():
    def racing(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 4)
        acc = memory[f32](shape(8, 4))
        acc.store(X[coord(0, 0), shape(8, 4)])
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 2
            acc(coord(r0, 0), shape(2, 4)).store(X[coord(r0, 0), shape(2, 4)])
            Y(coord(r0, 0), shape(8, 4)).store(acc.load())  # racing read

    (d,) = _errors(tile_kernel("k")(racing))
    assert d.rule == "S16" and d.loc.line == _line(racing, "# racing read")
    assert "reads memory %acc inside parallel region 'g'" in d.message


def test_whole_memory_store_in_a_child_parallel_stays_refused():
    @tile_kernel("k")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        acc = memory[f32](shape(4, 4))
        for _nest in parallel(shape(g)):
            acc.store(X[coord(0, 0), shape(4, 4)])  # whole store
        Y(coord(0, 0), shape(4, 4)).store(acc.load())

    (d,) = _errors(k)
    assert d.rule == "S16" and "writes the whole memory from every instance" in d.message


def test_windows_that_do_not_cover_the_memory_leave_it_uninitialized():
    k, fn = build_rows(extra_rows=2)  # two rows no instance writes
    (d,) = _errors(k)
    assert d.rule == "S10" and d.loc.line == _line(fn, "acc.load()")
    assert "not proved to cover it" in d.message


def test_windows_over_an_initialized_memory_need_not_cover_it():
    @tile_kernel("k")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        g = axis("g", 2)
        acc = memory[f32](shape(6, 4))
        acc.store(X[coord(0, 0), shape(6, 4)])
        for nest in parallel(shape(g)):
            r0 = nest.index(g) * 2
            acc(coord(r0, 0), shape(2, 4)).store(X[coord(r0, 0), shape(2, 4)] * 0.0)
        Y(coord(0, 0), shape(6, 4)).store(acc.load())

    verify(k)
    x = _inputs(6, 4)["X"]
    want = x.copy()
    want[:4] = 0.0
    np.testing.assert_array_equal(interpret(k, _inputs(6, 4))["Y"], want)


def test_a_window_of_the_wrong_shape_is_refused_at_capture():
    with pytest.raises(PlannerError) as exc:
        @tile_kernel("k")
        def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
            acc = memory[f32](shape(4, 4))
            acc(coord(0, 0), shape(2, 4)).store(X[coord(0, 0), shape(3, 4)])

    assert exc.value.diagnostics[0].rule == "S10"
    assert "the window's declared shape" in exc.value.diagnostics[0].message


def build_tiles(tile_cols: int):
    """A two-axis parallel: instance (a, b) writes the 2 x ``tile_cols`` tile at (2a, 2b)."""

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        a, b = axis("a", 2), axis("b", 3)
        acc = memory[f32](shape(4, 7))
        acc.store(zeros(shape(4, 7)))
        for nest in parallel(shape(a, b)):
            r, c = nest.index(a) * 2, nest.index(b) * 2
            acc(coord(r, c), shape(2, tile_cols)).store(X[coord(r, c), shape(2, tile_cols)])
        Y(coord(0, 0), shape(4, 7)).store(acc.load())

    return tile_kernel("tiles")(kernel)


def test_two_axis_instances_differ_in_any_axis():
    verify(build_tiles(2))
    (d,) = _errors(build_tiles(3))
    assert d.rule == "S16"
    assert ("instance (%a = 0, %b = 0) and instance (%a = 0, %b = 1) both write element "
            "[0, 2]" in d.message), d.message


def test_sibling_child_parallels_of_one_instance_are_ordered():
    """Within one outer instance the second inner region rewrites the rows the first wrote
    (program order), while the outer instances keep to their own rows."""

    def kernel(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        a, b, w = axis("a", 2), axis("b", 3), axis("w", 2)
        acc = memory[f32](shape(4, 6))
        for outer in parallel(shape(a)):
            ra = outer.index(a) * 2
            for inner in parallel(shape(b)):
                cb = inner.index(b) * 2
                acc(coord(ra, cb), shape(2, 2)).store(X[coord(ra, cb), shape(2, 2)])
            for again in parallel(shape(w)):
                row = ra + again.index(w)
                acc(coord(row, 1), shape(1, 5)).store(X[coord(row, 0), shape(1, 5)] * 3.0)
        Y(coord(0, 0), shape(4, 6)).store(acc.load())

    k = tile_kernel("siblings")(kernel)
    verify(k)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    want = x.copy()
    want[:, 1:] = x[:, :5] * 3.0
    got = interpret(k, {"X": x, "Y": np.zeros_like(x)})["Y"]
    np.testing.assert_array_equal(got, want)


def test_a_memory_window_is_a_copy_async_source():
    @tile_kernel("k")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        big = memory[f32](shape(4, 4))
        big.store(X[coord(0, 0), shape(4, 4)])
        small = memory[f32](shape(2, 4))
        tok = small.copy_async(big(coord(2, 0), shape(2, 4)))
        tok.wait()
        Y(coord(0, 0), shape(2, 4)).store(small.load())

    verify(k)
    (copy,) = _ops(k, core.CopyAsyncOp)
    assert [str(o) for o in copy.offsets] == ["2", "0"] and copy.source_view is None
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    want = np.zeros_like(x)
    want[:2] = x[2:]
    np.testing.assert_array_equal(interpret(k, {"X": x, "Y": np.zeros_like(x)})["Y"], want)


# --------------------------------------------------------------------------- text and JSON


@pytest.mark.parametrize("build", [build_rows, build_nested])
def test_text_and_json_round_trip(build):
    k, _ = build()
    text = print_kernel(k, locations=False)
    assert "offsets = [" in text.split('"memory.store"')[1].split("\n")[0]
    parsed = parse_kernel(text)
    assert print_kernel(parsed, locations=False) == text
    assert structural_diff(k, parsed) is None
    doc = kernel_to_json(k)
    jsonschema.validate(doc, kernel_json_schema())
    again = kernel_from_json(doc)
    assert structural_diff(k, again) is None
    verify(parsed)
    m, n = 5, 3
    np.testing.assert_array_equal(interpret(parsed, _inputs(m, n))["Y"],
                                  interpret(k, _inputs(m, n))["Y"])


def test_a_whole_memory_store_prints_without_a_window():
    @tile_kernel("k")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        acc = memory[f32](shape(4, 4))
        acc.store(X[coord(0, 0), shape(4, 4)])
        Y(coord(0, 0), shape(4, 4)).store(acc.load())

    text = print_kernel(k, locations=False)
    line = next(x for x in text.splitlines() if '"memory.store"' in x)
    assert "<{" not in line
    (store,) = _ops(k, core.MemStoreOp)
    (op_json,) = [o for o in kernel_to_json(k)["body"]["ops"] if o["op"] == "memory.store"]
    assert op_json["attrs"] == {} and not store.windowed


def test_parsed_overlap_is_refuted_at_the_text_line():
    k, _ = build_rows(height=T + 1, extra_rows=1, init=True)
    text = print_kernel(k, locations=False)
    parsed = parse_kernel(text)
    (d,) = _errors(parsed)
    store_line = next(i for i, x in enumerate(text.splitlines(), 1)
                      if '"memory.store"' in x and "offsets" in x)
    assert d.rule == "S16" and d.loc.line == store_line


# --------------------------------------------------------------------------- planning


def test_planning_and_lowering_refuse_overlapping_window_stores():
    """Disjoint windows plan (tests/lower/test_range_writes_lowered.py runs them); windows
    the verifier refutes are refused by the planning graph, the planner and the loop
    program with the verifier's S16 counterexample."""
    from planner.lower import build_loop_program
    from planner.solve import plan_kernel

    dataflow_graph(build_rows()[0])  # accepted
    k, fn = build_rows(height=T + 1, extra_rows=1, init=True)
    for call in (lambda: dataflow_graph(k),
                 lambda: plan_kernel(k, CatalogRegistry().get("x86-avx2"), {"M": 7, "N": 4}),
                 lambda: build_loop_program(k, None)):
        with pytest.raises(PlannerError) as exc:
            call()
        err = exc.value
        assert err.kind == "invalid-ir"
        (d,) = err.diagnostics
        assert d.rule == "S16" and d.loc.line == _line(fn, "# the window store")
        assert "instance %g = 0 and instance %g = 1 both write element [3, 0]" in d.message


# --------------------------------------------------------------------------- property


def _brute_force(g: int, step: int, base: int, height: int, rows: int) -> tuple[bool, bool]:
    """(some window is outside the memory, two instances' windows overlap)."""
    spans = [(base + step * i, base + step * i + height) for i in range(g)]
    outside = height > 0 and any(lo < 0 or hi > rows for lo, hi in spans)
    overlap = height > 0 and any(spans[i][1] > spans[j][0] and spans[j][1] > spans[i][0]
                                 for i in range(g) for j in range(i + 1, g))
    return outside, overlap


@given(g=st.integers(1, 4), step=st.integers(0, 4), base=st.integers(0, 2),
       height=st.integers(0, 4), rows=st.integers(1, 12))
def test_verifier_agrees_with_brute_force(g, step, base, height, rows):
    @tile_kernel("prop")
    def k(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        ax = axis("g", g)
        acc = memory[f32](shape(rows, 2))
        acc.store(X[coord(0, 0), shape(rows, 2)])
        for nest in parallel(shape(ax)):
            r0 = nest.index(ax) * step + base
            acc(coord(r0, 0), shape(height, 2)).store(X[coord(r0, 0), shape(height, 2)] + 1.0)
        Y(coord(0, 0), shape(rows, 2)).store(acc.load())

    outside, overlap = _brute_force(g, step, base, height, rows)
    messages = [d.message for d in _errors(k)]
    assert any("not inside the memory" in m for m in messages) == outside, messages
    assert any("overlapping windows" in m for m in messages) == overlap, messages
    assert len(messages) == outside + overlap, messages
    if not (outside or overlap):
        x = _inputs(rows, 2)["X"]
        want = x.copy()
        for i in range(g):
            lo = base + step * i
            want[lo:lo + height] = x[lo:lo + height] + 1.0
        np.testing.assert_array_equal(interpret(k, _inputs(rows, 2))["Y"], want)


# --------------------------------------------------------------------------- corrupted IR


def test_a_parallel_that_yields_an_old_state_is_refused():
    k, _ = build_rows()
    (region,) = _ops(k, core.ParallelOp)
    term = region.body.ops[-1]
    term.values = (region.body.args[0],)  # the state before the instance's store
    rules = [(d.rule, d.message) for d in _errors(k)]
    assert any(r == "S15" and "yields an old state" in m for r, m in rules), rules


def test_a_window_store_of_an_uncarried_ancestor_state_is_refused():
    k, _ = build_rows(init=True)
    (region,) = _ops(k, core.ParallelOp)
    _, window_store = _ops(k, core.MemStoreOp)
    (load,) = _ops(k, core.MemLoadOp)
    outer = region.inits[0]
    window_store.state = load.state = outer  # the outer state, used directly
    region.inits, region.body.args, region.results = (), [], []
    region.body.ops.pop()  # the yield
    rules = [(d.rule, d.message) for d in _errors(k)]
    assert any(r == "S9" and "is not carried out of it" in m for r, m in rules), rules


def test_a_parallel_carrying_a_tile_is_refused():
    k, _ = build_rows()
    (region,) = _ops(k, core.ParallelOp)
    outside = core.FullOp((Const(1),), DType.F32, 0.0)
    k.body.ops.insert(0, outside)
    outside.parent = k.body
    arg = core.Value(outside.result.type)
    arg.owner = region.body
    region.inits = (*region.inits, outside.result)
    region.body.args.append(arg)
    region.body.ops[-1].values = (*region.body.ops[-1].values, arg)
    region.results.append(core.Value(outside.result.type))
    rules = [(d.rule, d.message) for d in _errors(k)]
    assert any(r == "S1" and "carry only the MemoryStates" in m for r, m in rules), rules
