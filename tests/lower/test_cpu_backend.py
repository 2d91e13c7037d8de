"""The llvmlite CPU backend against the reference interpreter.

Every example kernel is compiled once per plan (its optimal plan and each feasible
baseline, plus hand-made plans for the decisions the planner does not pick on x86) and
run on odd shapes, single elements and empty extents, with 1 and 2 worker threads.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from planner.catalog import CatalogRegistry, Target
from planner.errors import PlannerError
from planner.ir.core import Kernel
from planner.ir.examples import list_examples, load_example
from planner.ir.frontend import (
    TensorView,
    axis,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    layout,
    memory,
    parallel,
    shape,
    stride,
    swizzle,
    tile_kernel,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.lower import CompiledKernel, build_loop_program, compile_kernel
from planner.lower.cpu.config import CodegenConfig
from planner.lower.cpu.runtime import KernelCache
from planner.lower.loops.program import Pipeline, walk_stmts
from planner.plan.decisions import Decision, EdgePlan, LayoutChoice, MaterializationPlan
from planner.solve.planner import plan_kernel

EXAMPLES = {p.stem: p for p in list_examples()}

#: Shapes per example: odd (not multiples of the tiles), one element, empty extents.
SHAPES: dict[str, list[dict[str, int]]] = {
    "gemm": [dict(M=100, N=70, K=37), dict(M=1, N=1, K=1), dict(M=0, N=5, K=3),
             dict(M=5, N=7, K=0)],
    "async_gemm": [dict(M=100, N=70, K=37), dict(M=1, N=1, K=1), dict(M=3, N=0, K=3),
                   dict(M=5, N=7, K=0)],
    "manual_gemm": [dict(M=100, N=70, K=37), dict(M=1, N=1, K=1), dict(M=3, N=0, K=3),
                    dict(M=5, N=7, K=0)],
    "softmax": [dict(M=100, N=70), dict(M=1, N=1), dict(M=0, N=5), dict(M=3, N=0)],
    "layernorm": [dict(M=100, N=70), dict(M=1, N=1), dict(M=0, N=5), dict(M=3, N=0)],
    "gelu": [dict(N=1000), dict(N=1), dict(N=0), dict(N=257)],
    "attention": [dict(L=50, S=37, D=24), dict(L=1, S=1, D=1), dict(L=0, S=3, D=4),
                  dict(L=3, S=0, D=4), dict(L=33, S=70, D=40)],
    "conv1d": [dict(B=3, N=37), dict(B=1, N=1), dict(B=0, N=5), dict(B=2, N=0)],
}
BASELINES = (None, "all-materialize", "greedy-fusion", "all-virtual")


@functools.cache
def x86() -> Target:
    return CatalogRegistry().get("x86-avx2")


@functools.cache
def example(name: str):  # -> planner.ir.examples.Example
    return load_example(EXAMPLES[name])


@functools.cache
def planned(name: str, baseline: str | None) -> MaterializationPlan:
    ex = example(name)
    return plan_kernel(ex.kernel, x86(), ex.bindings, baseline=baseline)


@functools.cache
def compiled(name: str, baseline: str | None) -> CompiledKernel:
    return compile_kernel(example(name).kernel, planned(name, baseline), x86())


def check(kernel: Kernel, ck: CompiledKernel, bindings: Mapping[str, int], seed: int = 0,
          threads: tuple[int, ...] = (1, 2), tol: float = 2e-5) -> None:
    """Run ``ck`` and the interpreter on the same random inputs; compare every output."""
    inputs = random_inputs(kernel, bindings, seed)
    expected = interpret(kernel, inputs, bindings)
    results = []
    for th in threads:
        got = ck({k: v.copy() for k, v in inputs.items()}, bindings=bindings, threads=th)
        assert set(got) == set(expected)
        for name, want in expected.items():
            np.testing.assert_allclose(got[name], want, rtol=tol, atol=tol, equal_nan=True,
                                       err_msg=f"{name} with {th} threads at {bindings}")
        results.append(got)
    for other in results[1:]:  # every split computes each instance the same way
        for name in expected:
            np.testing.assert_array_equal(other[name], results[0][name])


def replan(plan: MaterializationPlan, fn: Callable[[EdgePlan], EdgePlan]) -> MaterializationPlan:
    return dataclasses.replace(plan, edges=tuple(fn(e) for e in plan.edges))


def every(decision: Decision, resource: str | None = None,
          layout_choice: LayoutChoice | None = None) -> Callable[[EdgePlan], EdgePlan]:
    return lambda e: dataclasses.replace(e, decision=decision, resource=resource,
                                         layout=layout_choice)


# --------------------------------------------------------------------------- examples


@pytest.mark.parametrize("baseline", BASELINES, ids=lambda b: b or "optimal")
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_example_matches_interpreter(name: str, baseline: str | None) -> None:
    plan = planned(name, baseline)
    if plan.status.value == "infeasible":
        pytest.skip(f"{baseline} is infeasible for {name} on x86-avx2")
    ck = compiled(name, baseline)
    for bindings in SHAPES[name]:
        check(example(name).kernel, ck, bindings)


def test_every_example_has_shapes() -> None:
    assert set(EXAMPLES) <= set(SHAPES)


HAND_PLANS: dict[str, Callable[[EdgePlan], EdgePlan]] = {
    "all-virtual": every(Decision.VIRTUAL, "registers"),
    "all-fused": every(Decision.FUSED),
    "all-recomputed": every(Decision.RECOMPUTED),
    "local-padded": every(Decision.MATERIALIZED, "local", LayoutChoice("padded", pad=3)),
    "local-swizzled": every(Decision.MATERIALIZED, "local",
                            LayoutChoice("swizzled", swizzle=(2, 0, 3))),
    "dram": every(Decision.MATERIALIZED, "dram", LayoutChoice("dense")),
}


@pytest.mark.parametrize("variant", sorted(HAND_PLANS))
@pytest.mark.parametrize("name", ["softmax", "attention", "manual_gemm", "layernorm"])
def test_hand_made_plans_match_interpreter(name: str, variant: str) -> None:
    """Decisions the x86 planner never picks still lower correctly (and physically)."""
    plan = replan(planned(name, None), HAND_PLANS[variant])
    ck = compile_kernel(example(name).kernel, plan, x86())
    for bindings in SHAPES[name][:2]:
        check(example(name).kernel, ck, bindings, threads=(2,))


# --------------------------------------------------------------------------- pipelines


@pytest.mark.parametrize("window", [1, 2, 3])
def test_manual_gemm_pipeline_windows(window: int) -> None:
    mod = example("manual_gemm").module
    kernel = mod.make_manual_gemm(mod.GemmConfig(16, 16, 8, window))
    bindings = dict(M=37, N=29, K=43)
    plan = plan_kernel(kernel, x86(), bindings)
    ck = compile_kernel(kernel, plan, x86())
    body = ck.loop_program.segments[0].body
    assert any(isinstance(s, Pipeline) for s in walk_stmts(body)) == (window > 1)
    for b in (bindings, dict(M=1, N=1, K=1), dict(M=4, N=4, K=0)):
        check(kernel, ck, b)


@pytest.mark.parametrize("window", [1, 2, 3])
def test_attention_pipeline_windows(window: int) -> None:
    mod = example("attention").module
    kernel = mod.make_attention(mod.AttentionConfig(8, 8, window))
    bindings = dict(L=21, S=30, D=12)
    ck = compile_kernel(kernel, plan_kernel(kernel, x86(), bindings), x86())
    for b in (bindings, dict(L=5, S=1, D=3)):
        check(kernel, ck, b)


# --------------------------------------------------------------------------- explicit Memory


def make_memory_layouts() -> Kernel:
    @tile_kernel("memory_layouts")
    def memory_layouts(X: TensorView[const(f32), dims("M", "N")],
                       Y: TensorView[f32, dims("M", "N")]):
        gm = axis("bm", ceil_div(X.extent(0), 8))
        gn = axis("bn", ceil_div(X.extent(1), 16))
        m = axis("m", 8)
        n = axis("n", 16)
        for nest in parallel(shape(gm, gn)):
            r0 = nest.index(gm) * 8
            c0 = nest.index(gn) * 16
            padded = memory[f32](layout(shape(m, n), stride(19, 1)))
            transposed = memory[f32](layout(shape(m, n), stride(1, 8)))
            swizzled = memory[f32](layout(shape(m, n), stride(16, 1), swizzle(2, 0, 4)))
            padded.store(X[coord(r0, c0), shape(m, n)])
            transposed.store(padded.load() * 2.0)
            swizzled.store(transposed.load() + 1.0)
            Y(coord(r0, c0), shape(m, n)).store(swizzled.load())

    return memory_layouts


def test_explicit_memory_layouts() -> None:
    kernel = make_memory_layouts()
    plan = plan_kernel(kernel, x86(), dict(M=21, N=35))
    ck = compile_kernel(kernel, plan, x86())
    bufs = {b.name: b for b in ck.loop_program.buffers}
    assert bufs["padded"].layout.strides[0].const_value() == 19
    assert [s.const_value() for s in bufs["transposed"].layout.strides] == [1, 8]
    assert bufs["swizzled"].layout.swizzles
    assert "llvm.masked.gather" in ck.emitted_ir or "llvm.masked.scatter" in ck.emitted_ir
    for b in (dict(M=21, N=35), dict(M=8, N=16), dict(M=1, N=1), dict(M=0, N=3)):
        check(kernel, ck, b)


# --------------------------------------------------------------------------- interface


def test_threads_give_identical_results() -> None:
    ck = compiled("softmax", None)
    x = np.random.default_rng(3).standard_normal((257, 130)).astype(np.float32)
    one = ck(X=x, threads=1)["Y"]
    for th in (2, 3, 8):
        np.testing.assert_array_equal(ck(X=x, threads=th)["Y"], one)


def test_outputs_are_written_in_place_and_allocated_when_missing() -> None:
    ck = compiled("gelu", None)
    x = np.linspace(-3, 3, 300, dtype=np.float32)
    y = np.zeros_like(x)
    out = ck({"X": x, "Y": y})
    assert out["Y"] is y
    np.testing.assert_allclose(y, example("gelu").expected({"X": x})["Y"], atol=1e-5)
    np.testing.assert_array_equal(ck(X=x)["Y"], y)


def test_strided_views_are_accepted_with_unit_inner_stride() -> None:
    ck = compiled("softmax", None)
    big = np.random.default_rng(1).standard_normal((40, 90)).astype(np.float32)
    x = big[::2, 5:75]
    want = interpret(example("softmax").kernel, {"X": np.ascontiguousarray(x),
                                                 "Y": np.zeros((20, 70), np.float32)})
    np.testing.assert_allclose(ck(X=x)["Y"], want["Y"], atol=2e-6)


@pytest.mark.parametrize(("arrays", "message"), [
    (lambda x: {"X": x.astype(np.float64)}, r"view 'X' \(f32\) needs a float32 array"),
    (lambda x: {"X": x[0]}, r"view 'X' has rank 2, but its array has rank 1"),
    (lambda x: {"X": x[:, ::2]}, r"view 'X' must have unit stride in its last dimension"),
    (lambda x: {"X": x, "Z": x}, r"no view named Z"),
    (lambda x: {"Y": x}, r"no array given for view 'X'"),
    (lambda x: {"X": [[1.0]]}, r"view 'X' needs a numpy array"),
    (lambda x: {"X": x, "Y": np.broadcast_to(x[0], x.shape)}, r"output view 'Y' is not "
                                                               "writeable"),
    (lambda x: {"X": x, "Y": np.zeros((3, 3), np.float32)}, r"view 'Y' dim 0"),
])
def test_bad_arguments_raise_naming_the_parameter(arrays: Callable, message: str) -> None:
    ck = compiled("softmax", None)
    x = np.ones((6, 10), np.float32)
    with pytest.raises(PlannerError, match=message):
        ck(arrays(x))


def test_compiled_kernels_are_cached_by_content() -> None:
    cache = KernelCache()
    kernel, plan = example("gelu").kernel, planned("gelu", None)
    a = compile_kernel(kernel, plan, x86(), cache=cache)
    b = compile_kernel(load_example(EXAMPLES["gelu"]).kernel, plan, x86(), cache=cache,
                       threads=1)
    assert len(cache) == 1 and a.llvm_ir is b.llvm_ir and b.threads == 1
    other = replan(plan, every(Decision.MATERIALIZED, "local"))
    compile_kernel(kernel, other, x86(), cache=cache)
    assert len(cache) == 2


def test_code_is_inspectable() -> None:
    ck = compiled("softmax", None)
    assert "define void @\"softmax.seg0\"" in ck.llvm_ir or "@softmax.seg0" in ck.llvm_ir
    assert re.search(r"\bv(fmadd|mul|add|max)[a-z0-9]*ps\b.*[xyz]mm", ck.asm)
    assert ck.loop_program.kernel == "softmax"
    assert ck.threads == x86().costs.concurrent_instances


def test_mismatched_plan_is_rejected() -> None:
    with pytest.raises(PlannerError, match="does not match kernel"):
        build_loop_program(example("gemm").kernel, planned("softmax", None), x86())


# --------------------------------------------------------------------------- CLI


def test_cli_run_check_passes(capsys: pytest.CaptureFixture[str]) -> None:
    from planner.cli import main

    assert main(["run", "softmax", "--check", "--bind", "M=9", "--bind", "N=33",
                 "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "check ok: matches the reference interpreter" in out


def test_cli_run_check_reports_the_max_error(capsys: pytest.CaptureFixture[str]) -> None:
    from planner.cli import main

    # Zero tolerance: the GEMM's summation order differs from numpy's in the last bits.
    assert main(["run", "gemm", "--check", "--rtol", "0", "--atol", "0", "--repeat", "1",
                 "--threads", "1"]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.out
    assert "disagrees with the reference interpreter on C: max abs error" in captured.err


def test_cli_run_with_a_saved_plan(tmp_path: object, capsys: pytest.CaptureFixture[str]
                                   ) -> None:
    import json

    from planner.cli import main
    from planner.solve import plan_to_json

    path = tmp_path / "plan.json"  # type: ignore[operator]
    path.write_text(json.dumps(plan_to_json(planned("gelu", "all-materialize"))))
    assert main(["run", "gelu", "--plan", str(path), "--check", "--repeat", "1"]) == 0
    assert "all-materialize plan" in capsys.readouterr().out


@pytest.mark.parametrize(("emit", "needle"), [("loops", "loop program layernorm"),
                                              ("llvm", "define"), ("asm", "ret")])
def test_cli_lower_prints_code(emit: str, needle: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from planner.cli import main

    assert main(["lower", "layernorm", "--emit", emit]) == 0
    assert needle in capsys.readouterr().out


@pytest.mark.parametrize("width", [4, 8, 16])
def test_vector_widths_and_transposed_copies(width: int) -> None:
    """Every vector width the backend emits (ymm on AVX2 hosts, zmm with AVX-512), with
    tile sizes that are not multiples of it (transposed-copy blocks plus remainders)."""
    config = CodegenConfig(vector_width=width)
    mod = example("manual_gemm").module
    kernels = [(mod.make_manual_gemm(mod.GemmConfig(24, 20, 12, 2)), dict(M=50, N=41, K=29)),
               (make_memory_layouts(), dict(M=21, N=35)),
               (example("attention").kernel, dict(L=19, S=23, D=13))]
    for kernel, bindings in kernels:
        ck = compile_kernel(kernel, plan_kernel(kernel, x86(), bindings), x86(),
                            config=config)
        check(kernel, ck, bindings, threads=(2,))


def test_concurrent_calls_from_python_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    ck = compiled("layernorm", None)
    rng = np.random.default_rng(5)
    cases = [{"X": rng.standard_normal((37 + i, 50)).astype(np.float32),
              "W": rng.standard_normal(50).astype(np.float32),
              "Bias": rng.standard_normal(50).astype(np.float32)} for i in range(8)]
    want = [interpret(example("layernorm").kernel,
                      {**c, "Y": np.zeros_like(c["X"])})["Y"] for c in cases]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda c: ck(dict(c), threads=1 + len(c["X"]) % 3)["Y"], cases))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["gemm", "manual_gemm", "softmax", "attention", "layernorm"])
def test_random_shapes_match_interpreter(name: str) -> None:
    """Property test over extents (0 to a few tiles, never multiples by construction)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    kernel = example(name).kernel
    symbols = kernel.symbols()
    ck = compiled(name, None)

    @settings(max_examples=12)
    @given(st.fixed_dictionaries({s: st.integers(0, 70) for s in symbols}),
           st.integers(0, 2**16))
    def prop(bindings: dict[str, int], seed: int) -> None:
        check(kernel, ck, bindings, seed=seed, threads=(2,))

    prop()


@pytest.mark.parametrize("name", ["softmax", "layernorm", "gelu"])
def test_nan_and_inf_propagate_like_the_interpreter(name: str) -> None:
    kernel = example(name).kernel
    bindings = {k: v for k, v in SHAPES[name][0].items()}
    inputs = random_inputs(kernel, bindings, 7)
    x = inputs["X"].reshape(-1)
    x[3], x[100], x[250] = np.nan, np.inf, -np.inf
    want = interpret(kernel, inputs, bindings)
    got = compiled(name, None)({k: v.copy() for k, v in inputs.items()})
    for k, w in want.items():
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(w))
        np.testing.assert_allclose(got[k], w, rtol=2e-5, atol=2e-5, equal_nan=True)
