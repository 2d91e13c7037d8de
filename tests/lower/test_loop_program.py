"""The target-neutral loop program: plan decisions made physical, in the printed form.

Each test builds a program from a kernel and a plan (the planner's, or one with some
decisions replaced) and checks what the plan means: which values are inlined,
duplicated, kept in registers or stored in which resource with which layout and how
many versions, and how pipelines and loop-carried values are scheduled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
from collections.abc import Callable

import numpy as np
import pytest
from filecheck.finput import FInput
from filecheck.matcher import Matcher
from filecheck.options import Options
from filecheck.parser import Parser

from planner.catalog import CatalogRegistry, Target
from planner.errors import PlannerError
from planner.ir.core import Kernel
from planner.ir.examples import list_examples, load_example
from planner.ir.expr import Const, Sym, mod
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
    shape,
    tile_kernel,
    zeros,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.lower import build_loop_program, compile_kernel
from planner.lower.loops.program import (
    Barrier,
    BufRead,
    BufWrite,
    FusedNest,
    Loop,
    LoopProgram,
    Mma,
    MmaView,
    Nest,
    Pipeline,
    ReduceNest,
    ViewRead,
    elem_reads,
    walk_stmts,
)
from planner.plan.decisions import Decision, EdgePlan, LayoutChoice, MaterializationPlan
from planner.solve.planner import plan_kernel

EXAMPLES = {p.stem: p for p in list_examples()}


@functools.cache
def x86() -> Target:
    return CatalogRegistry().get("x86-avx2")


@functools.cache
def example(name: str):  # -> planner.ir.examples.Example
    return load_example(EXAMPLES[name])


@functools.cache
def optimal(name: str) -> MaterializationPlan:
    ex = example(name)
    return plan_kernel(ex.kernel, x86(), ex.bindings)


def program(name: str, change: Callable[[EdgePlan], EdgePlan] | None = None) -> LoopProgram:
    plan = optimal(name)
    if change is not None:
        plan = dataclasses.replace(plan, edges=tuple(change(e) for e in plan.edges))
    return build_loop_program(example(name).kernel, plan, x86())


def decide(decision: Decision, resource: str | None = None, layout: LayoutChoice | None = None,
           only: str | None = None, **extra: object) -> Callable[[EdgePlan], EdgePlan]:
    def change(e: EdgePlan) -> EdgePlan:
        if only is not None and not e.edge_id.startswith(only):
            return e
        return dataclasses.replace(e, decision=decision, resource=resource, layout=layout,
                                   **extra)
    return change


def flat(body: tuple[object, ...]) -> list[object]:
    """Every statement, with the parts of fused nests."""
    out: list[object] = []
    for s in walk_stmts(body):  # type: ignore[arg-type]
        out.append(s)
        if isinstance(s, FusedNest):
            out.extend(s.parts)
    return out


def stmts(p: LoopProgram) -> list[object]:
    return [s for seg in p.segments for s in flat(seg.body)]


def filecheck(output: str, checks: str, tmp_path: object) -> None:
    path = tmp_path / "checks.txt"  # type: ignore[operator]
    path.write_text(checks)
    opts = Options(match_filename=str(path))
    report = io.StringIO()
    with contextlib.redirect_stderr(report), contextlib.redirect_stdout(report):
        rc = Matcher(opts, FInput("<loop program>", output), Parser.from_opts(opts)).run()
    assert rc == 0, f"{report.getvalue()}\n--- loop program ---\n{output}"


# --------------------------------------------------------------------------- format


def test_softmax_program_reads_like_the_plan(tmp_path: object) -> None:
    text = str(program("softmax"))
    filecheck(text, """
CHECK-LABEL: loop program softmax  target x86-avx2
CHECK: views    X: f32[M, N] const, Y: f32[M, N]
CHECK: symbols  M, N
CHECK: parallel block_m: %block_m < ceildiv(M, 4)  (instances split across workers)
CHECK: buffer %[[X:x]]: f32[4, N] in local stride [N, 1] x1  materialized
CHECK: buffer %[[E:e]]: f32[4, N] in local stride [N, 1] x1  materialized
CHECK: nest i.0 < 4, i.1 < N  (fused)  edge-masked X[4 * %block_m +: 4, 0 +: N]
CHECK-NEXT: %[[X]][i.0, i.1] = X[4 * %block_m + i.0, i.1]
CHECK-NEXT: %[[MX:mx]][i.0] = max over i.1 of %[[X]][i.0, i.1]
CHECK: %[[E]][i.0, i.1] = exp(%[[X]][i.0, i.1] - %[[MX]][i.0])
CHECK-NEXT: %[[S:s]][i.0] = sum over i.1 of %[[E]][i.0, i.1]
CHECK: nest i.0 < 4, i.1 < N  edge-masked Y[4 * %block_m +: 4, 0 +: N]
CHECK-NEXT: Y[4 * %block_m + i.0, i.1] = %[[E]][i.0, i.1] / %[[S]][i.0]
""", tmp_path)


def test_program_is_frozen_and_printing_is_deterministic() -> None:
    a, b = program("attention"), program("attention")
    assert str(a) == str(b) and a == b
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.segments[0].label = "x"  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_lowers_with_its_symbols(name: str) -> None:
    p = program(name)
    assert p.symbols == tuple(example(name).kernel.symbols())
    assert all(seg.parallel for seg in p.segments)


# --------------------------------------------------------------------------- decisions


def test_fused_edges_are_computed_inline_in_the_consumer() -> None:
    p = program("softmax", decide(Decision.FUSED))
    roles = {b.role for b in p.buffers}
    assert roles == {"reduce"}  # only the reductions need storage
    final = [s for s in stmts(p) if isinstance(s, Nest) and not isinstance(s.dest, BufWrite)]
    assert "exp(X[4 * %block_m + i.0, i.1] - %" in str(p)
    assert len(final) == 1 and any(isinstance(r, ViewRead) for r in elem_reads(final[0].value))


def test_inlined_producer_is_duplicated_per_consumer() -> None:
    """Softmax's ``x`` re-read from the view by both of its consumers (two-pass); for a
    load, recomputing is the same program (the planner offers only fused there)."""
    p = program("softmax", decide(Decision.FUSED, only="%x ->"))
    assert "x" not in {b.name for b in p.buffers}
    readers = [s for s in stmts(p) if isinstance(s, Nest | ReduceNest)
               and any(isinstance(r, ViewRead) and r.view == "X" for r in elem_reads(s.value))]
    assert len(readers) == 2
    assert p == program("softmax", decide(Decision.RECOMPUTED, only="%x ->"))


def test_recomputed_chain_ignores_how_its_intermediates_are_realized() -> None:
    """``sh = x - max`` recomputed into ``exp``: ``x`` stays in local storage for the row
    max, but the recomputation re-reads ``X`` (and reads the max, a reduction, from its
    buffer); fused, ``exp`` reads ``x``'s buffer."""
    fused = program("softmax", decide(Decision.FUSED, only="%sh ->"))
    recomputed = program("softmax", decide(Decision.RECOMPUTED, only="%sh ->"))

    def exp_nest(p: LoopProgram) -> Nest:
        return next(s for s in stmts(p) if isinstance(s, Nest) and isinstance(s.dest, BufWrite)
                    and s.dest.buffer == "e")

    def reads(p: LoopProgram) -> set[str]:
        return {r.view if isinstance(r, ViewRead) else r.buffer
                for r in elem_reads(exp_nest(p).value)}

    assert reads(fused) == {"x", "mx"}
    assert reads(recomputed) == {"X", "mx"}
    assert recomputed.buffer("x").role == "materialized"  # still kept for the max


def test_virtual_edges_stay_in_registers() -> None:
    p = program("softmax", decide(Decision.VIRTUAL, "registers"))
    assert {(b.resource, b.role) for b in p.buffers if b.role != "reduce"} == {
        ("registers", "virtual")}


@pytest.mark.parametrize(("choice", "strides", "swizzled"), [
    (LayoutChoice("dense"), ["N", "1"], False),
    (LayoutChoice("padded", pad=4), ["N + 4", "1"], False),
    (LayoutChoice("swizzled", swizzle=(2, 0, 3)), ["N", "1"], True),
])
def test_materialized_edge_gets_its_resource_and_layout(choice: LayoutChoice,
                                                        strides: list[str],
                                                        swizzled: bool) -> None:
    p = program("softmax", decide(Decision.MATERIALIZED, "dram", choice, only="%e ->"))
    buf = p.buffer("e")
    assert (buf.resource, buf.resource_class, buf.role) == ("dram", "global", "materialized")
    assert [str(s) for s in buf.layout.strides] == strides
    assert bool(buf.layout.swizzles) == swizzled
    assert buf.edges == ("%e -> %s#0", "%e -> %y#0")


def test_barrier_where_the_plan_synchronizes() -> None:
    p = program("softmax", decide(Decision.MATERIALIZED, "dram", LayoutChoice("dense"),
                                  only="%e ->", sync="worker_barrier"))
    body = p.segments[0].body
    i = next(i for i, s in enumerate(body) if isinstance(s, Barrier))
    assert body[i] == Barrier("worker_barrier", "process", "%e written, then read")
    assert any(isinstance(p_, Nest) and isinstance(p_.dest, BufWrite) and p_.dest.buffer == "e"
               for s in body[:i] for p_ in (s.parts if isinstance(s, FusedNest) else (s,)))


def test_mma_reads_view_windows_in_place_or_staged() -> None:
    p = program("gemm")
    mma = next(s for s in stmts(p) if isinstance(s, Mma))
    assert isinstance(mma.a, MmaView) and isinstance(mma.b, MmaView)
    assert mma.accumulate and p.buffer(mma.a.staging).role == "stage"


# --------------------------------------------------------------------------- memory


def test_explicit_memory_keeps_its_declared_layout() -> None:
    p = program("manual_gemm")
    a_s, b_s = p.buffer("As"), p.buffer("Bs")
    assert [s.const_value() for s in a_s.layout.strides] == [17, 1]  # padded rows
    assert [s.const_value() for s in b_s.layout.strides] == [1, 16]  # column-major
    assert a_s.role == b_s.role == "memory" and a_s.resource == "local"


def make_running_sum() -> Kernel:
    """A recurrence through outer Memory: each step reads the previous step's state."""

    @tile_kernel("running_sum")
    def running_sum(X: TensorView[const(f32), dims("M", "N")], Y: TensorView[f32, dims("M", "N")]):
        gm = axis("bm", ceil_div(X.extent(0), 4))
        kt = axis("kt", ceil_div(X.extent(1), 8))
        m = axis("m", 4)
        n = axis("n", 8)
        for nest in parallel(shape(gm)):
            r0 = nest.index(gm) * 4
            acc = memory[f32](shape(m, n))
            acc.store(zeros[f32](shape(m, n)))
            for step in nest.pipeline(shape(kt), window=2):
                step.stage("load")
                t = X[coord(r0, step.index() * 8), shape(m, n)]
                step.stage("compute")
                acc.store(acc.load() + t)
            Y(coord(r0, 0), shape(m, n)).store(acc.load())

    return running_sum


def test_recurrence_through_outer_memory_stays_ordered() -> None:
    kernel = make_running_sum()
    plan = plan_kernel(kernel, x86(), dict(M=10, N=29))
    p = build_loop_program(kernel, plan, x86())
    loop = next(s for s in stmts(p) if isinstance(s, Loop))
    assert loop.kind == "pipeline" and "recurrence through outer Memory" in loop.note
    assert not any(isinstance(s, Pipeline) for s in stmts(p))
    ck = compile_kernel(kernel, plan, x86())
    for b in (dict(M=10, N=29), dict(M=3, N=0)):
        inputs = random_inputs(kernel, b, 0)
        want = interpret(kernel, inputs, b)["Y"]
        np.testing.assert_allclose(ck(dict(inputs))["Y"], want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- pipelines


@pytest.mark.parametrize(("window", "lags", "versions"), [(1, None, 1), (2, (0, 1), 2),
                                                         (3, (0, 1), 2)])
def test_pipeline_cut_gets_iteration_local_versions(window: int, lags: tuple[int, ...] | None,
                                                    versions: int) -> None:
    mod_ = example("manual_gemm").module
    kernel = mod_.make_manual_gemm(mod_.GemmConfig(32, 32, 16, window))
    p = build_loop_program(kernel, plan_kernel(kernel, x86(), example("manual_gemm").bindings),
                           x86())
    assert p.buffer("As").versions == versions == p.buffer("Bs").versions
    pipes = [s for s in stmts(p) if isinstance(s, Pipeline)]
    if lags is None:
        assert not pipes and "pipeline k_tiles ordered: window 1" in p.notes
        return
    (pipe,) = pipes
    assert tuple(st.lag for st in pipe.stages) == lags
    assert [st.name for st in pipe.stages] == ["load", "compute"]
    store = next(s for s in flat(pipe.stages[0].body) if isinstance(s, Nest))
    assert store.dest == BufWrite("As", store.dest.index, mod(Sym("%k_tiles"), versions))
    mma = next(s for s in walk_stmts(pipe.stages[1].body) if isinstance(s, Mma))
    assert mma.a.version == mod(Sym("%k_tiles"), versions)  # type: ignore[union-attr]


def test_attention_pipeline_and_carries() -> None:
    p = program("attention")
    (pipe,) = [s for s in stmts(p) if isinstance(s, Pipeline)]
    loads = {w.dest.buffer for w in flat(pipe.stages[0].body) if isinstance(w, Nest)}
    assert all(p.buffer(b).versions == 2 for b in loads) and loads
    # acc = mma(p, v, acc * alpha) and l_i = l_i * alpha + sum update in place; m_i is
    # read after its update (alpha = exp(m_i - m_new)) so it rotates two versions.
    assert p.buffer("acc_1").versions == 1 and p.buffer("l_i_1").versions == 1
    m = p.buffer("m_i_1")
    assert m.versions == 2 and m.role == "carry"
    reads = [r for s in stmts(p) if isinstance(s, Nest | ReduceNest)
             for r in elem_reads(s.value) if isinstance(r, BufRead) and r.buffer == "m_i_1"]
    assert {str(r.version) for r in reads} >= {"mod(%kv_tiles, 2)", "mod(%kv_tiles + 1, 2)"}
    final = [s for s in p.segments[0].body if isinstance(s, Nest)][-1]
    assert any(isinstance(r, BufRead) and r.buffer == "acc_1" and r.version == Const(0)
               for r in elem_reads(final.value))


# --------------------------------------------------------------------------- errors


def test_infeasible_plan_is_not_lowered() -> None:
    mod_ = example("manual_gemm").module
    kernel = mod_.make_manual_gemm(mod_.GemmConfig(256, 256, 256, 2), resource=mod_.mem.shared)
    plan = plan_kernel(kernel, x86(), dict(M=512, N=512, K=512))
    assert plan.status.value == "infeasible"
    with pytest.raises(PlannerError, match="cannot lower an infeasible plan"):
        build_loop_program(kernel, plan, x86())


def test_plan_for_another_kernel_is_rejected() -> None:
    with pytest.raises(PlannerError, match="does not match kernel 'gelu'"):
        build_loop_program(example("gelu").kernel, optimal("layernorm"), x86())


def test_without_a_plan_every_edge_is_virtual() -> None:
    p = build_loop_program(example("gelu").kernel)
    assert p.target == "host"
    assert {b.role for b in p.buffers} == {"virtual"}


def test_an_mma_accumulator_fused_by_the_plan_is_evaluated_into_the_output() -> None:
    """attention's s = q @ k^T + zeros and acc = p @ v + acc * alpha: the plan fuses both
    accumulators (cheaper than a buffer of their own and a copy), so the first mma
    overwrites its output and the rescale runs in place in the carry before the second."""
    plan = optimal("attention")
    into_acc = [e for e in plan.edges
                if e.consumer_kind == "tile.mma" and e.edge_id.endswith("#2")]
    assert {e.producer_kind for e in into_acc} == {"tile.full", "tile.binary.mul"}
    assert all(e.decision is Decision.FUSED for e in into_acc), into_acc
    p = build_loop_program(example("attention").kernel, plan, x86())
    body = [s for seg in p.segments for s in flat(seg.body)]
    mmas = [s for s in body if isinstance(s, Mma)]
    assert [m.accumulate for m in mmas] == [False, True]
    rescale = body[body.index(mmas[1]) - 1]
    assert isinstance(rescale, Nest) and isinstance(rescale.dest, BufWrite)
    assert rescale.dest.buffer == mmas[1].c.buffer  # in place: %acc_1 = %acc_1 * alpha
    assert any(isinstance(r, BufRead) and r.buffer == mmas[1].c.buffer
               for r in elem_reads(rescale.value))
    ex = example("attention")
    inputs = random_inputs(ex.kernel, ex.bindings, 5)
    want = interpret(ex.kernel, inputs, ex.bindings)
    got = compile_kernel(ex.kernel, plan, x86())({k: v.copy() for k, v in inputs.items()})
    np.testing.assert_allclose(got["O"], want["O"], rtol=1e-4, atol=1e-5)
