"""Asynchronous copies in the IR (issue 12, IR half): ``memory.copy_async`` / ``memory.wait``.

The DSL spelling, the text and JSON round trips, the verifier's S9.async rules (each
accepted and rejected, at the user's line computed from this file with :mod:`inspect`),
the interpreter (numpy GEMM reference, dynamic rule checks); planning and lowering are
tests/lower/test_async_copies.py.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from planner.errors import PlannerError
from planner.ir import core
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    mem,
    memory,
    mma,
    parallel,
    pipeline,
    serial,
    shape,
    tile_kernel,
    zeros,
)
from planner.ir.interpreter import interpret
from planner.ir.json_form import kernel_from_json, kernel_to_json
from planner.ir.parser import parse_kernel
from planner.ir.printer import print_kernel
from planner.ir.structural import structural_diff
from planner.ir.types import StateType, TokenType
from planner.ir.verify import collect_diagnostics, verify

BM, BN, BK = 4, 3, 5  # odd tile sizes


def _line(fn, text: str, nth: int = 0) -> int:
    """The 1-based line of the ``nth`` occurrence of ``text`` in ``fn``'s source."""
    lines, first = inspect.getsourcelines(fn)
    hits = [first + i for i, line in enumerate(lines) if text in line]
    assert len(hits) > nth, f"{text!r} not in the source of {fn.__name__}"
    return hits[nth]


def _rules(kernel: core.Kernel) -> list[tuple[str, int]]:
    return [(d.rule, d.loc.line) for d in collect_diagnostics(kernel)]


def _ops(kernel: core.Kernel, cls: type[core.Op]) -> list[core.Op]:
    return [op for op in kernel.walk() if isinstance(op, cls)]


# --------------------------------------------------------------------------- kernels


def build_gemm() -> core.Kernel:
    """A manual GEMM whose tiles are staged by asynchronous copies, the copy of k-step
    i + 1 issued while step i computes (tokens carried through the pipeline)."""

    @tile_kernel("copy_gemm")
    def copy_gemm(A: TensorView[const(f32), dims("M", "K")],
                  B: TensorView[const(f32), dims("K", "N")],
                  C: TensorView[f32, dims("M", "N")]):
        bm, bn, bk = axis("bm", BM), axis("bn", BN), axis("bk", BK)
        gm = axis("gm", ceil_div(A.extent(0), BM))
        gn = axis("gn", ceil_div(B.extent(1), BN))
        for nest in parallel(shape(gm, gn)):
            m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
            As = memory(shape(bm, bk), mem.shared)
            Bs = memory(shape(bk, bn), mem.shared)
            acc = zeros(shape(bm, bn))
            kt = axis("kt", ceil_div(A.extent(1), BK))
            ta = As.copy_async(A[coord(m0, 0), shape(bm, bk)])
            tb = Bs.copy_async(B(coord(0, n0), shape(bk, bn)))
            for step in pipeline(shape(kt), window=2):
                k0 = step.index(kt) * BK
                ta.wait()
                tb.wait()
                a, b = As.load(), Bs.load()
                ta = As.copy_async(A(coord(m0, k0 + BK), shape(bm, bk)))
                tb = Bs.copy_async(B[coord(k0 + BK, n0), shape(bk, bn)])
                acc = mma(a, b, acc)
            ta.wait()
            tb.wait()
            C(coord(m0, n0), shape(bm, bn)).store(acc)

    return copy_gemm


def build_staged_gemm() -> core.Kernel:
    """The same GEMM with same-iteration copies: issued in stage "load", waited in stage
    "compute" of the same iteration (no carried token)."""

    @tile_kernel("staged_gemm")
    def staged_gemm(A: TensorView[const(f32), dims("M", "K")],
                    B: TensorView[const(f32), dims("K", "N")],
                    C: TensorView[f32, dims("M", "N")]):
        bm, bn, bk = axis("bm", BM), axis("bn", BN), axis("bk", BK)
        gm = axis("gm", ceil_div(A.extent(0), BM))
        gn = axis("gn", ceil_div(B.extent(1), BN))
        for nest in parallel(shape(gm, gn)):
            m0, n0 = nest.index(gm) * BM, nest.index(gn) * BN
            As = memory(shape(bm, bk), mem.shared)
            Bs = memory(shape(bk, bn), mem.shared)
            acc = zeros(shape(bm, bn))
            kt = axis("kt", ceil_div(A.extent(1), BK))
            for step in nest.pipeline(shape(kt), window=2):
                k0 = step.index(kt) * BK
                step.stage("load")
                ta = As.copy_async(A(coord(m0, k0), shape(bm, bk)))
                tb = Bs.copy_async(B(coord(k0, n0), shape(bk, bn)))
                step.stage("compute")
                ta.wait()
                tb.wait()
                acc = mma(As.load(), Bs.load(), acc)
            C(coord(m0, n0), shape(bm, bn)).store(acc)

    return staged_gemm


def build_memory_source() -> core.Kernel:
    """A copy from a Memory: X's window into As (fill 0 outside X), then As into Bs."""

    @tile_kernel("mem_to_mem")
    def mem_to_mem(X: TensorView[const(f32), dims("M", "N")],
                   Y: TensorView[f32, dims("M", "N")]):
        m, n = axis("m", 3), axis("n", 4)
        As = memory(shape(m, n), mem.global_)
        Bs = memory(shape(m, n), mem.global_)
        t = As.copy_async(X(coord(1, 0), shape(m, n)), fill=-1.0)
        t.wait()
        u = Bs.copy_async(As)
        u.wait()
        Y(coord(0, 0), shape(m, n)).store(Bs.load())

    return mem_to_mem


def _gemm_inputs(M: int, N: int, K: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"A": rng.standard_normal((M, K)).astype(np.float32),
            "B": rng.standard_normal((K, N)).astype(np.float32),
            "C": np.full((M, N), 7.0, np.float32)}


# --------------------------------------------------------------------------- DSL


def test_dsl_spelling_produces_copy_and_wait_ops():
    k = build_gemm()
    copies = _ops(k, core.CopyAsyncOp)
    assert len(copies) == 4 and len(_ops(k, core.WaitOp)) == 4
    # A[coord, shape] is folded into the copy: no tile.load is left anywhere
    assert not _ops(k, core.LoadOp)
    first = copies[0]
    assert first.source == (k.param("A"),)
    assert [str(e) for e in first.offsets] == ["4 * %gm", "0"]
    assert [str(e) for e in first.shape] == [str(BM), str(BK)]
    assert first.new_state.type == StateType(f32, first.shape)
    assert first.token.type == TokenType(f32, first.shape)
    loop = _ops(k, core.LoopOp)[0]
    # acc, both tokens and both memory states are carried through the pipeline
    kinds = sorted(type(v.type).__name__ for v in loop.inits)
    assert kinds == ["StateType", "StateType", "TileType", "TokenType", "TokenType"]
    verify(k)


def test_dsl_memory_source_and_fill():
    k = build_memory_source()
    a_copy, b_copy = _ops(k, core.CopyAsyncOp)
    assert a_copy.source_view is k.param("X") and a_copy.fill == -1.0
    alloc_a = _ops(k, core.AllocOp)[0]
    assert b_copy.source[0] is alloc_a.memory and b_copy.source_view is None
    assert b_copy.source[1] is a_copy.new_state
    verify(k)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = interpret(k, {"X": x, "Y": np.zeros((3, 4), np.float32)})["Y"]
    want = np.full((3, 4), -1.0, np.float32)
    want[:2] = x[1:]
    np.testing.assert_array_equal(got, want)


def test_dsl_refuses_a_bound_or_computed_tile():
    def build():
        @tile_kernel("bad_source")
        def bad_source(X: TensorView[const(f32), dims("M", "N")]):
            m, n = axis("m", 2), axis("n", 2)
            As = memory(shape(m, n), mem.global_)
            t = X[coord(0, 0), shape(m, n)]
            As.copy_async(t)

    with pytest.raises(PlannerError) as exc:
        build()
    d = exc.value.diagnostics[0]
    assert d.rule == "S9.async" and "view window or a Memory" in d.message
    assert d.loc.line == _line(build, "As.copy_async(t)")


def test_dsl_refuses_a_window_of_another_shape():
    def build():
        @tile_kernel("bad_shape")
        def bad_shape(X: TensorView[const(f32), dims("M", "N")]):
            m, n = axis("m", 2), axis("n", 3)
            As = memory(shape(m, n), mem.global_)
            As.copy_async(X(coord(0, 0), shape(n, m)))

    with pytest.raises(PlannerError) as exc:
        build()
    d = exc.value.diagnostics[0]
    assert d.rule == "S10" and d.loc.line == _line(build, "As.copy_async(")


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("build", [build_gemm, build_staged_gemm, build_memory_source])
def test_text_and_json_round_trip(build):
    k = build()
    text = print_kernel(k)
    assert '"memory.copy_async"' in text and '"memory.wait"' in text and "token<[" in text
    back = parse_kernel(text)
    assert structural_diff(k, back, locs=True) is None
    assert print_kernel(back) == text
    from_json = kernel_from_json(kernel_to_json(k))
    assert structural_diff(k, from_json, locs=True) is None
    verify(back)
    verify(from_json)


def test_parser_rejects_a_token_where_a_state_is_expected():
    text = print_kernel(build_memory_source(), locations=False)
    bad = text.replace('"memory.wait"(%t)', '"memory.wait"(%As_0)', 1)
    assert bad != text
    with pytest.raises(PlannerError):
        verify(parse_kernel(bad))


# --------------------------------------------------------------------------- verifier


def test_verifier_accepts_carried_and_same_iteration_copies():
    for build in (build_gemm, build_staged_gemm, build_memory_source):
        assert _rules(build()) == []


def test_read_before_wait():
    def build():
        @tile_kernel("early_read")
        def early_read(X: TensorView[const(f32), dims("M", "N")],
                       Y: TensorView[f32, dims("M", "N")]):
            m, n = axis("m", 2), axis("n", 2)
            As = memory(shape(m, n), mem.global_)
            tok = As.copy_async(X(coord(0, 0), shape(m, n)))
            early = As.load()
            tok.wait()
            Y(coord(0, 0), shape(m, n)).store(early)
        return early_read

    k = build()
    assert _rules(k) == [("S9.async-read", _line(build, "early = As.load()"))]
    with pytest.raises(PlannerError) as exc:  # the interpreter's dynamic check agrees
        interpret(k, {"X": np.ones((2, 2), np.float32), "Y": np.zeros((2, 2), np.float32)})
    d = exc.value.diagnostics[0]
    assert (d.rule, d.loc.line) == ("S9.async-read", _line(build, "early = As.load()"))


def test_read_of_a_later_state_before_the_wait():
    """The state after a loop that carries the copy is still in flight."""

    def build():
        @tile_kernel("after_loop")
        def after_loop(X: TensorView[const(f32), dims("M", "N")],
                       Y: TensorView[f32, dims("M", "N")]):
            m, n, s = axis("m", 2), axis("n", 2), axis("s", 3)
            As = memory(shape(m, n), mem.global_)
            tok = As.copy_async(X(coord(0, 0), shape(m, n)))
            for it in serial(shape(s)):
                tok.wait()
                tok = As.copy_async(X(coord(0, it.index(s)), shape(m, n)))
            Y(coord(0, 0), shape(m, n)).store(As.load())
            tok.wait()
        return after_loop

    k = build()
    assert _rules(k) == [("S9.async-read", _line(build, "store(As.load())"))]
    with pytest.raises(PlannerError) as exc:
        interpret(k, {"X": np.ones((2, 4), np.float32), "Y": np.zeros((2, 4), np.float32)})
    assert exc.value.diagnostics[0].rule == "S9.async-read"


def test_copy_from_a_memory_in_flight():
    def build():
        @tile_kernel("src_in_flight")
        def src_in_flight(X: TensorView[const(f32), dims("M", "N")],
                          Y: TensorView[f32, dims("M", "N")]):
            m, n = axis("m", 2), axis("n", 2)
            As = memory(shape(m, n), mem.global_)
            Bs = memory(shape(m, n), mem.global_)
            t = As.copy_async(X(coord(0, 0), shape(m, n)))
            u = Bs.copy_async(As)
            t.wait()
            u.wait()
            Y(coord(0, 0), shape(m, n)).store(Bs.load())
        return src_in_flight

    assert _rules(build()) == [("S9.async-read", _line(build, "u = Bs.copy_async(As)"))]


def test_wait_twice():
    def build():
        @tile_kernel("twice")
        def twice(X: TensorView[const(f32), dims("M", "N")],
                  Y: TensorView[f32, dims("M", "N")]):
            m, n = axis("m", 2), axis("n", 2)
            As = memory(shape(m, n), mem.global_)
            tok = As.copy_async(X(coord(0, 0), shape(m, n)))
            tok.wait()
            tok.wait()  # second
            Y(coord(0, 0), shape(m, n)).store(As.load())
        return twice

    k = build()
    diags = collect_diagnostics(k)
    assert [(d.rule, d.loc.line) for d in diags] == [("S9.async-wait",
                                                      _line(build, "tok.wait()  # second"))]
    assert diags[0].notes[0][0].line == _line(build, "tok.wait()")
    with pytest.raises(PlannerError) as exc:
        interpret(k, {"X": np.ones((2, 2), np.float32), "Y": np.zeros((2, 2), np.float32)})
    d = exc.value.diagnostics[0]
    assert (d.rule, d.loc.line) == ("S9.async-wait", _line(build, "tok.wait()  # second"))


def test_never_waited_before_the_kernel_ends():
    def build():
        @tile_kernel("unwaited")
        def unwaited(X: TensorView[const(f32), dims("M", "N")],
                     Y: TensorView[f32, dims("M", "N")]):
            m, n = axis("m", 2), axis("n", 2)
            As = memory(shape(m, n), mem.global_)
            As.copy_async(X(coord(0, 0), shape(m, n)))
            Y(coord(0, 0), shape(m, n)).store(X[coord(0, 0), shape(m, n)])
        return unwaited

    k = build()
    line = _line(build, "As.copy_async(")
    assert _rules(k) == [("S9.async-unwaited", line)]
    with pytest.raises(PlannerError) as exc:
        interpret(k, {"X": np.ones((2, 2), np.float32), "Y": np.zeros((2, 2), np.float32)})
    assert (exc.value.diagnostics[0].rule, exc.value.diagnostics[0].loc.line) == (
        "S9.async-unwaited", line)


def test_never_waited_before_the_iteration_ends():
    def build():
        @tile_kernel("unwaited_in_loop")
        def unwaited_in_loop(X: TensorView[const(f32), dims("M", "N")],
                             Y: TensorView[f32, dims("M", "N")]):
            m, n, s = axis("m", 2), axis("n", 2), axis("s", 2)
            for it in pipeline(shape(s), window=2):
                As = memory(shape(m, n), mem.global_)
                As.copy_async(X(coord(0, it.index(s)), shape(m, n)))
            Y(coord(0, 0), shape(m, n)).store(X[coord(0, 0), shape(m, n)])
        return unwaited_in_loop

    assert _rules(build()) == [("S9.async-unwaited", _line(build, "As.copy_async("))]


def test_store_or_copy_into_a_version_in_flight():
    def build():
        @tile_kernel("overwrite")
        def overwrite(X: TensorView[const(f32), dims("M", "N")],
                      Y: TensorView[f32, dims("M", "N")]):
            m, n = axis("m", 2), axis("n", 2)
            As = memory(shape(m, n), mem.global_)
            tok = As.copy_async(X(coord(0, 0), shape(m, n)))
            again = As.copy_async(X(coord(0, 1), shape(m, n)))
            tok.wait()
            As.store(zeros(shape(m, n)))
            again.wait()
            Y(coord(0, 0), shape(m, n)).store(As.load())
        return overwrite

    k = build()
    assert _rules(k) == [("S9.async-overwrite", _line(build, "again = As.copy_async(")),
                         ("S9.async-overwrite", _line(build, "As.store(zeros"))]
    with pytest.raises(PlannerError) as exc:
        interpret(k, {"X": np.ones((2, 3), np.float32), "Y": np.zeros((2, 3), np.float32)})
    d = exc.value.diagnostics[0]
    assert (d.rule, d.loc.line) == ("S9.async-overwrite", _line(build, "again = As.copy_async("))


def test_wait_inside_a_loop_on_a_token_from_outside():
    def build():
        @tile_kernel("outer_token")
        def outer_token(X: TensorView[const(f32), dims("M", "N")],
                        Y: TensorView[f32, dims("M", "N")]):
            m, n, s = axis("m", 2), axis("n", 2), axis("s", 3)
            As = memory(shape(m, n), mem.global_)
            tok = As.copy_async(X(coord(0, 0), shape(m, n)))
            for _ in serial(shape(s)):
                tok.wait()
            Y(coord(0, 0), shape(m, n)).store(X[coord(0, 0), shape(m, n)])
        return outer_token

    rules = _rules(build())
    assert rules[0] == ("S9.async-wait", _line(build, "tok.wait()"))
    # the copy is then never waited outside the loop either
    assert rules[1:] == [("S9.async-unwaited", _line(build, "tok = As.copy_async("))]


def test_carried_token_waited_in_the_body_is_not_in_flight_at_the_yield():
    def build():
        @tile_kernel("carry_waited")
        def carry_waited(X: TensorView[const(f32), dims("M", "N")],
                         Y: TensorView[f32, dims("M", "N")]):
            m, n, s = axis("m", 2), axis("n", 2), axis("s", 3)
            As = memory(shape(m, n), mem.global_)
            tok = As.copy_async(X(coord(0, 0), shape(m, n)))
            for it in serial(shape(s)):
                tok.wait()
                tok = As.copy_async(X(coord(0, it.index(s)), shape(m, n)))
                tok.wait()
            tok.wait()
            Y(coord(0, 0), shape(m, n)).store(As.load())
        return carry_waited

    k = build()
    assert [r for r, _ in _rules(k)] == ["S9.async-carry"]
    assert _rules(k)[0][1] == _line(build, "for it in serial(")


def test_a_wait_on_a_token_carried_out_of_its_loop_is_fine_after_the_loop():
    k = build_gemm()
    loop = _ops(k, core.LoopOp)[0]
    after = [op for op in loop.parent.ops if isinstance(op, core.WaitOp)]
    assert {op.token for op in after} == {r for r in loop.results
                                          if isinstance(r.type, TokenType)}


# --------------------------------------------------------------------------- interpreter


@pytest.mark.parametrize("M,N,K", [(9, 7, 11), (1, 1, 1), (4, 3, 5), (0, 5, 3),
                                   (6, 0, 2), (5, 4, 0), (13, 2, 16)])
@pytest.mark.parametrize("build", [build_gemm, build_staged_gemm])
def test_interpreter_gemm_equals_numpy(build, M, N, K):
    k = build()
    inputs = _gemm_inputs(M, N, K)
    got = interpret(k, inputs)["C"]
    want = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    assert got.shape == (M, N)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


TEXT_READ_BEFORE_WAIT = """\
"tile.kernel"() <{sym_name = "k"}> ({
^bb0(%X: view<[N], f32, const>, %Y: view<[N], f32>):
  %m, %m_init = "memory.alloc"() <{dtype = f32, layout = #layout<[4] stride [1] planned>, \
resource = #resource<global>, owner = "kernel"}> : () -> (memory<[4], f32>, state<[4], f32>)
  %m_0, %t = "memory.copy_async"(%m, %m_init, %X) <{offsets = [0], shape = [4], fill = 0.0}> \
: (memory<[4], f32>, state<[4], f32>, view<[N], f32, const>) -> (state<[4], f32>, token<[4], f32>)
  %x = "memory.load"(%m, %m_0) : (memory<[4], f32>, state<[4], f32>) -> (tile<[4], f32>)
  "memory.wait"(%t) : (token<[4], f32>) -> ()
  "tile.store"(%Y, %x) <{offsets = [0]}> : (view<[N], f32>, tile<[4], f32>) -> ()
}) : () -> ()
"""


def test_text_ir_read_before_wait_is_located_in_the_text():
    k = parse_kernel(TEXT_READ_BEFORE_WAIT, "k.mlir")
    line = 1 + next(i for i, text in enumerate(TEXT_READ_BEFORE_WAIT.splitlines())
                    if '"memory.load"' in text)
    diags = collect_diagnostics(k)
    assert [(d.rule, d.loc.file, d.loc.line) for d in diags] == [("S9.async-read", "k.mlir",
                                                                  line)]
    # moving the wait before the read makes it valid
    lines = TEXT_READ_BEFORE_WAIT.splitlines(keepends=True)
    load = next(i for i, text in enumerate(lines) if '"memory.load"' in text)
    lines[load], lines[load + 1] = lines[load + 1], lines[load]
    verify(parse_kernel("".join(lines), "k.mlir"))


def test_never_waited_before_the_parallel_instance_ends():
    def build():
        @tile_kernel("unwaited_in_parallel")
        def unwaited_in_parallel(X: TensorView[const(f32), dims("M", "N")],
                                 Y: TensorView[f32, dims("M", "N")]):
            m, n, g = axis("m", 2), axis("n", 2), axis("g", 3)
            for nest in parallel(shape(g)):
                As = memory(shape(m, n), mem.shared)
                As.copy_async(X(coord(nest.index(g) * 2, 0), shape(m, n)))
            Y(coord(0, 0), shape(m, n)).store(X[coord(0, 0), shape(m, n)])
        return unwaited_in_parallel

    assert _rules(build()) == [("S9.async-unwaited", _line(build, "As.copy_async("))]


def test_copy_into_an_ancestors_memory_inside_a_child_parallel_is_s16():
    def build():
        @tile_kernel("ancestor_copy")
        def ancestor_copy(X: TensorView[const(f32), dims("M", "N")],
                          Y: TensorView[f32, dims("M", "N")]):
            m, n, g = axis("m", 2), axis("n", 2), axis("g", 3)
            As = memory(shape(m, n), mem.global_)
            for nest in parallel(shape(g)):
                tok = As.copy_async(X(coord(nest.index(g) * 2, 0), shape(m, n)))
                tok.wait()
            Y(coord(0, 0), shape(m, n)).store(X[coord(0, 0), shape(m, n)])
        return ancestor_copy

    rules = _rules(build())
    assert ("S16", _line(build, "As.copy_async(")) in rules, rules
