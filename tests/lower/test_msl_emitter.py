"""The Metal backend: emitted MSL checked, run in the emulator and compared with the oracle.

Every example kernel, under its optimal plan and the three baselines, is emitted, passes
the MSL subset check, and its emulated run matches the reference interpreter on shapes
that are not multiples of the tiles, in forward and reverse thread order.  A barrier
removed from manual_gemm is caught; the S17 refusals name the rule, the objects and the
bytes; FileCheck goldens pin the kernel signature, threadgroup arrays with padding and
barriers.  Tests that compile or run MSL need clang-19 and are skipped without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from pathlib import Path

import numpy as np
import pytest
from filecheck.finput import FInput
from filecheck.matcher import Matcher
from filecheck.options import Options
from filecheck.parser import Parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolchain import needs_clang

from planner.catalog import CatalogRegistry, Target
from planner.cli.metal_cmds import lower_msl_command, run_msl_check
from planner.errors import PlannerError
from planner.ir.core import Kernel
from planner.ir.dtypes import DType
from planner.ir.examples import list_examples, load_example
from planner.ir.frontend import (
    TensorView,
    abs_,
    axis,
    cast,
    ceil_div,
    const,
    coord,
    dims,
    f32,
    full,
    i32,
    iota,
    log,
    maximum,
    minimum,
    parallel,
    shape,
    sqrt,
    tanh,
    tile_kernel,
    transpose,
    where,
)
from planner.ir.interpreter import interpret, random_inputs
from planner.ir.load import load_kernel
from planner.lower.metal.emitter import MslKernel, emit_msl
from planner.lower.metal.emulator import KernelFault, check_msl
from planner.lower.metal.runtime import dispatch, run_msl, run_msl_kernel
from planner.plan.decisions import LayoutChoice, MaterializationPlan
from planner.solve.planner import plan_kernel

EXAMPLES = {p.stem: p for p in list_examples()}
#: Odd shapes: no extent is a multiple of its tile.
SHAPES: dict[str, dict[str, int]] = {
    "gemm": {"M": 37, "N": 29, "K": 45},
    "manual_gemm": {"M": 37, "N": 29, "K": 45},
    "async_gemm": {"M": 37, "N": 29, "K": 45},
    "softmax": {"M": 13, "N": 70},
    "layernorm": {"M": 13, "N": 70},
    "gelu": {"N": 1000},
    "attention": {"L": 19, "S": 23, "D": 8},
    "conv1d": {"B": 3, "N": 37},
}
PLANS = ("optimal", "all-materialize", "greedy-fusion", "all-virtual")
RTOL = ATOL = 1e-4


@pytest.fixture(scope="module")
def m2() -> Target:
    return CatalogRegistry().get("apple-m2")


_PLANS: dict[tuple[str, str], tuple[Kernel, MaterializationPlan]] = {}


def planned(name: str, how: str, target: Target) -> tuple[Kernel, MaterializationPlan]:
    key = (name, how)
    if key not in _PLANS:
        kernel = load_example(EXAMPLES[name]).kernel
        baseline = None if how == "optimal" else how
        _PLANS[key] = kernel, plan_kernel(kernel, target, SHAPES[name], baseline=baseline)
    return _PLANS[key]


def assert_matches(out: dict[str, np.ndarray], ref: dict[str, np.ndarray], what: str) -> None:
    for name, want in ref.items():
        got = out[name]
        assert got.shape == want.shape, what
        err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
        assert np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True), \
            f"{what}: {name} differs from the reference interpreter (max abs error {err:.3g})"


_ARENA = re.compile(r"^\s*threadgroup float4 tg_arena_\[(\d+)\];$", re.M)
_TG_ARRAY = re.compile(r"^\s*threadgroup \w+ \w+\[\d+\];$", re.M)


def arena_bytes(source: str) -> int:
    """Bytes of the emitted kernel's threadgroup arena (0: none), read from the source;
    the arena is the kernel's only threadgroup array."""
    found = _ARENA.findall(source)
    assert len(found) <= 1 and len(_TG_ARRAY.findall(source)) == len(found), source
    return int(found[0]) * 16 if found else 0


def filecheck(output: str, checks: str, tmp_path: Path) -> None:
    """Run the pure-Python FileCheck in process on ``output`` against ``checks`` (whose
    ``[[`` are MSL attributes, not FileCheck substitutions)."""
    check_file = tmp_path / "checks.metal"
    check_file.write_text(checks.replace("[[", "{{\\[\\[}}"))  # MSL attributes, literally
    opts = Options(match_filename=str(check_file))
    report = io.StringIO()
    with contextlib.redirect_stderr(report), contextlib.redirect_stdout(report):
        rc = Matcher(opts, FInput("<emitted MSL>", output), Parser.from_opts(opts)).run()
    assert rc == 0, f"{report.getvalue()}\n--- emitted MSL ---\n{output}"


# ----------------------------------------------------------------- differential


@needs_clang
@pytest.mark.parametrize("how", PLANS)
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_example_matches_reference_in_two_orders(name: str, how: str, m2: Target) -> None:
    kernel, plan = planned(name, how, m2)
    msl = emit_msl(kernel, plan, m2)
    check = check_msl(msl.source)
    assert check.ok and not check.warnings, check.render()
    # threadgroup memory is laid out as planned: one arena, never above the plan's peak
    peak = next((p.peak_bytes for p in plan.peaks if p.resource == "threadgroup_memory"), 0)
    assert arena_bytes(msl.source) == msl.threadgroup_bytes <= peak, (name, how)
    bindings = SHAPES[name]
    inputs = random_inputs(kernel, bindings, seed=7)
    ref = interpret(kernel, inputs, bindings)
    for order in ("forward", "reverse"):
        run = run_msl_kernel(kernel, msl, inputs, bindings, order=order)
        assert run.report is not None and run.report.groups_run == msl.grid(bindings)[0]
        assert_matches(run.outputs, ref, f"{name} ({how} plan, {order} order)")


def test_every_example_is_covered() -> None:
    assert set(SHAPES) == set(EXAMPLES)


@needs_clang
@pytest.mark.parametrize("name", ["softmax", "manual_gemm", "attention"])
def test_random_thread_orders(name: str, m2: Target) -> None:
    kernel, plan = planned(name, "optimal", m2)
    inputs = random_inputs(kernel, SHAPES[name], seed=3)
    ref = interpret(kernel, inputs, SHAPES[name])
    msl = emit_msl(kernel, plan, m2)
    for seed in range(3):
        out = run_msl_kernel(kernel, msl, inputs, SHAPES[name], order="random", seed=seed)
        assert_matches(out.outputs, ref, f"{name}, random order seed {seed}")


@needs_clang
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(0, 21), n=st.integers(1, 96))
def test_one_kernel_serves_every_shape_up_to_the_planned_sizes(m: int, n: int,
                                                               m2: Target) -> None:
    """Extents are run-time ``constant long&`` values: one emitted (and compiled) kernel,
    sized for the plan's bindings, runs every smaller shape, masked edge tiles included."""
    kernel = load_example(EXAMPLES["softmax"]).kernel
    plan = plan_kernel(kernel, m2, {"M": 21, "N": 96})
    msl = emit_msl(kernel, plan, m2)
    inputs = random_inputs(kernel, {"M": m, "N": n}, seed=m * 100 + n)
    out = run_msl_kernel(kernel, msl, inputs, order="reverse").outputs
    assert_matches(out, interpret(kernel, inputs), f"softmax {m}x{n}")


@needs_clang
def test_bindings_beyond_the_planned_sizes_are_refused(m2: Target) -> None:
    kernel, plan = planned("softmax", "optimal", m2)
    msl = emit_msl(kernel, plan, m2)
    inputs = random_inputs(kernel, {"M": 13, "N": 200})
    with pytest.raises(PlannerError, match=r"S17.*sized for the plan's bindings.*N=70"):
        run_msl_kernel(kernel, msl, inputs)


@needs_clang
def test_empty_grid_runs_nothing(m2: Target) -> None:
    kernel, plan = planned("gelu", "optimal", m2)
    inputs = random_inputs(kernel, {"N": 0})
    assert run_msl(kernel, plan, m2, inputs)["Y"].shape == (0,)


# ----------------------------------------------------------------- synchronization


@needs_clang
def test_each_removed_barrier_is_caught_in_manual_gemm(m2: Target) -> None:
    """Delete one threadgroup_barrier line at a time: every deletion gives a wrong result
    (or a fault / divergence report) in some thread order."""
    kernel, plan = planned("manual_gemm", "optimal", m2)
    msl = emit_msl(kernel, plan, m2)
    bindings = SHAPES["manual_gemm"]
    inputs = random_inputs(kernel, bindings, seed=1)
    ref = interpret(kernel, inputs, bindings)
    lines = msl.source.splitlines()
    barriers = [i for i, line in enumerate(lines) if "threadgroup_barrier(" in line]
    assert len(barriers) >= 2
    for i in barriers:
        broken = dataclasses.replace(msl, source="\n".join(lines[:i] + lines[i + 1:]) + "\n")
        caught = []
        for order in ("forward", "reverse"):
            try:
                out = run_msl_kernel(kernel, broken, inputs, bindings, order=order).outputs
            except KernelFault:
                caught.append(order)
                continue
            if not all(np.allclose(out[k], v, rtol=RTOL, atol=ATOL) for k, v in ref.items()):
                caught.append(order)
        assert caught, f"removing line {i + 1} ({lines[i].strip()}) went unnoticed"


def test_pipeline_has_one_barrier_per_step_and_versions(m2: Target) -> None:
    """S18: the load of iteration t writes version t mod 2 while the compute of t - 1
    reads the other one, so the step needs no barrier between the stages."""
    kernel, plan = planned("manual_gemm", "optimal", m2)
    src = emit_msl(kernel, plan, m2).source
    load = src[src.index("stage load"):src.index("stage compute")]
    assert "threadgroup_barrier" not in load
    assert "(k_tiles % 2)" in load


# ----------------------------------------------------------------- S17 refusals


def _manual_gemm(**kw: object) -> Kernel:
    module = load_example(EXAMPLES["manual_gemm"]).module
    cfg = kw.pop("cfg", None)
    return module.make_manual_gemm(cfg, **kw) if cfg else module.make_manual_gemm(**kw)


def test_s17_group_owned_private_memory_is_refused(m2: Target) -> None:
    from planner.ir.frontend import mem

    kernel = _manual_gemm(resource=mem.private_)
    plan = plan_kernel(kernel, m2, SHAPES["manual_gemm"])
    with pytest.raises(PlannerError) as info:
        emit_msl(kernel, plan, m2)
    text = info.value.render()
    assert "[S17]" in text
    assert re.search(r"Memory %As \(private, 2,172 B\) is owned by block_m_block_n at scope "
                     r"threadgroup", text), text
    assert "thread_registers (per thread)" in text and "does not change the owner" in text


def test_s17_threadgroup_overflow_is_refused(m2: Target) -> None:
    from planner.ir.frontend import mem

    module = load_example(EXAMPLES["manual_gemm"]).module
    kernel = module.make_manual_gemm(module.GemmConfig(block_m=64, block_n=64, block_k=128),
                                     resource=mem.shared)
    plan = plan_kernel(kernel, m2, SHAPES["manual_gemm"])
    with pytest.raises(PlannerError) as info:
        emit_msl(kernel, plan, m2)
    text = info.value.render()
    assert "[S17]" in text
    assert "%As 33,024 B + %Bs 32,768 B = 65,792 B > threadgroup_memory capacity 32,768 B" \
        in text, text


def test_s17_memory_with_versions_and_temporaries_overflow(m2: Target) -> None:
    """Manual Memory fits alone but not with two pipeline versions each: the planner
    chooses one version of each (and prices the staging copy), so the emitter accepts
    its plan; forcing the versions back to two is refused with the bytes."""
    module = load_example(EXAMPLES["manual_gemm"]).module
    kernel = module.make_manual_gemm(module.GemmConfig(block_m=64, block_n=64, block_k=32),
                                     resource=module.mem.shared)
    plan = plan_kernel(kernel, m2, SHAPES["manual_gemm"])
    assert [(m.name, m.versions, m.max_versions) for m in plan.memories] == [
        ("%As", 1, 2), ("%Bs", 1, 2)]
    msl = emit_msl(kernel, plan, m2)
    assert msl.threadgroup_bytes <= 32_768
    forced = dataclasses.replace(plan, memories=tuple(
        dataclasses.replace(m, versions=2) for m in plan.memories))
    with pytest.raises(PlannerError) as info:
        emit_msl(kernel, forced, m2)
    text = info.value.render()
    assert "%As 2 x 8,448 B + %Bs 2 x 8,192 B = 33,280 B" in text, text
    assert "> threadgroup_memory capacity 32,768 B per threadgroup" in text


def test_non_metal_target_is_refused() -> None:
    x86 = CatalogRegistry().get("x86-avx2")
    kernel = load_example(EXAMPLES["gelu"]).kernel
    with pytest.raises(PlannerError, match="backend: metal"):
        emit_msl(kernel, plan_kernel(kernel, x86, {"N": 100}), x86)


# ----------------------------------------------------------------- placement


def test_virtual_tiles_are_per_thread_slices_with_exchanges(m2: Target) -> None:
    """Softmax's virtual x and e stay per-thread slices (thread arrays); the row
    reductions read them through a threadgroup exchange area after a barrier."""
    kernel, plan = planned("softmax", "optimal", m2)
    msl = emit_msl(kernel, plan, m2)
    assert re.search(r"^  float r_x\[5\];$", msl.source, re.M)  # 4 x 70 over 64 threads
    assert "exchange area for the per-thread slices of %x" in msl.source
    assert msl.thread_bytes == 48  # r_x[5] + r_mx[1] + r_e[5] + r_s[1]
    # the plan's peak is one exchange area (%x's 1,120 B): the four exchange areas share
    # those bytes, so each exchange but the first waits for the readers of the previous
    # one (3 write-after-read barriers) besides the barrier after each exchange (4)
    peak = next(p.peak_bytes for p in plan.peaks if p.resource == "threadgroup_memory")
    assert msl.threadgroup_bytes == peak == 1120
    assert msl.source.count("exchange: every thread publishes") == 4
    assert msl.source.count("threadgroup_barrier(") == 7


@needs_clang
def test_device_memory_placement_runs(m2: Target) -> None:
    """At N = 4096 the plan puts x and e in device memory: per-group scratch regions."""
    kernel = load_example(EXAMPLES["softmax"]).kernel
    bindings = {"M": 9, "N": 4096}
    plan = plan_kernel(kernel, m2, bindings)
    run = dispatch(kernel, plan, m2, random_inputs(kernel, bindings), bindings)
    assert "device float* scratch_f32 [[buffer(2)]]" in run.kernel.source
    assert "mem_flags::mem_device" in run.kernel.source
    inputs = random_inputs(kernel, bindings)
    assert_matches(run_msl(kernel, plan, m2, inputs), interpret(kernel, inputs), "softmax")


@needs_clang
def test_temporaries_share_storage_when_they_would_not_fit_apart(m2: Target) -> None:
    """All-materialize attention at D = 24 keeps ~35 KB of temporaries (f32, i32 and i1),
    more than the 32 KiB of threadgroup memory side by side; the plan counts only what
    is live at once, so the arena shares bytes by lifetime, across element types, within
    the plan's peak (and the barriers follow)."""
    kernel = load_example(EXAMPLES["attention"]).kernel
    bindings = {"L": 19, "S": 23, "D": 24}
    plan = plan_kernel(kernel, m2, bindings, baseline="all-materialize")
    msl = emit_msl(kernel, plan, m2)
    assert "sharing bytes when their lifetimes do not overlap" in msl.source
    assert "threadgroup int* " in msl.source and "threadgroup bool* " in msl.source
    peak = next(p.peak_bytes for p in plan.peaks if p.resource == "threadgroup_memory")
    assert msl.threadgroup_bytes <= peak <= 32768
    inputs = random_inputs(kernel, bindings, seed=4)
    ref = interpret(kernel, inputs, bindings)
    for order in ("forward", "reverse"):
        assert_matches(run_msl_kernel(kernel, msl, inputs, bindings, order=order).outputs,
                       ref, f"attention D=24, {order}")


def _relayout(plan: MaterializationPlan, layouts: dict[str, LayoutChoice]
              ) -> MaterializationPlan:
    """A plan with some materialized edges' layouts replaced (as a user may edit one)."""
    edges = tuple(dataclasses.replace(e, layout=layouts[e.value]) if e.value in layouts
                  else e for e in plan.edges)
    return dataclasses.replace(plan, edges=edges)


def padded_softmax(target: Target) -> tuple[Kernel, MaterializationPlan]:
    kernel, plan = planned("softmax", "greedy-fusion", target)
    return kernel, _relayout(plan, {"%x": LayoutChoice("padded", pad=1),
                                    "%e": LayoutChoice("swizzled", swizzle=(3, 0, 4))})


@needs_clang
def test_padded_and_swizzled_layouts_match(m2: Target) -> None:
    kernel, plan = padded_softmax(m2)
    bindings = SHAPES["softmax"]
    inputs = random_inputs(kernel, bindings, seed=5)
    ref = interpret(kernel, inputs, bindings)
    for order in ("forward", "reverse"):
        assert_matches(run_msl(kernel, plan, m2, inputs, bindings, order), ref, order)


def _mixed_kernel() -> Kernel:
    @tile_kernel("mixed")
    def mixed(X: TensorView[const(f32), dims("M", "N")], I: TensorView[const(i32), dims("M", "N")],
              Y: TensorView[f32, dims("M", "N")], J: TensorView[i32, dims("M", "N")],
              R: TensorView[f32, dims("N", "M")]):
        g = axis("blocks", ceil_div(X.extent(0), 8))
        m, n = axis("m", 8), axis("n", X.extent(1))
        for nest in parallel(shape(g)):
            o = nest.index(g) * 8
            x = X[coord(o, 0), shape(m, n)]
            i = I[coord(o, 0), shape(m, n)]
            xi = cast(x * 3.0, i32)
            k = maximum(i, xi) - minimum(i, xi) + abs_(-i)
            one = full(shape(m, n), 1, i32)
            q = where(i > one, (xi - i) / (abs_(i) + 1), k * 2)
            y = where(cast(i, DType.BOOL), log(abs_(x) + 1.0) + sqrt(abs_(x)), tanh(-x))
            y = maximum(y + cast(k, f32), minimum(x, 0.5))
            J(coord(o, 0), shape(m, n)).store(q + iota(shape(m, n), 1))
            Y(coord(o, 0), shape(m, n)).store(y)
            R(coord(0, o), shape(n, m)).store(transpose(x * 0.25))

    return mixed


@needs_clang
@pytest.mark.parametrize("how", ["optimal", "all-materialize"])
def test_int_bool_casts_and_transposes_match(how: str, m2: Target) -> None:
    """The operator tables: i32 max/min/abs/truncating division, i1 casts, selects,
    float math, and a transposed store."""
    kernel = _mixed_kernel()
    bindings = {"M": 13, "N": 7}
    plan = plan_kernel(kernel, m2, bindings, baseline=None if how == "optimal" else how)
    inputs = random_inputs(kernel, bindings, seed=2)
    ref = interpret(kernel, inputs, bindings)
    assert_matches(run_msl(kernel, plan, m2, inputs, bindings, "reverse"), ref, how)


# ----------------------------------------------------------------- goldens

SOFTMAX_CHECKS = """\
CHECK-LABEL: kernel void softmax(device const float* X [[buffer(0)]],
CHECK-NEXT:  device float* Y [[buffer(1)]],
CHECK-NEXT:  constant long& M [[buffer(2)]],
CHECK-NEXT:  constant long& N [[buffer(3)]],
CHECK-NEXT:  uint tg_pos_ [[threadgroup_position_in_grid]],
CHECK-NEXT:  uint tid_pos_ [[thread_index_in_threadgroup]]) {
CHECK:       const long block_m = gid_;
CHECK:       // threadgroup memory: one arena of 2,688 B (the plan's peak: 2,256 B), buffers at
CHECK-NEXT:  //   [0, 1536) %e: f32[4, N] stride [N, 1] xor(3, 0, 4), materialized in
CHECK-NEXT:  //   [1536, 1552) %s: f32[4], materialized in threadgroup_memory
CHECK-NEXT:  //   [1536, 2668) %x: f32[4, N] stride [N + 1, 1], materialized in threadgroup_memory
CHECK:       threadgroup float4 tg_arena_[168];
CHECK-NEXT:  threadgroup uchar* tg_bytes_ = reinterpret_cast<threadgroup uchar*>(tg_arena_);
CHECK-NEXT:  threadgroup float* tg_e = reinterpret_cast<threadgroup float*>(tg_bytes_ + 0);
CHECK-NEXT:  threadgroup float* tg_s = reinterpret_cast<threadgroup float*>(tg_bytes_ + 1536);
CHECK-NEXT:  threadgroup float* tg_x = reinterpret_cast<threadgroup float*>(tg_bytes_ + 1536);
CHECK:       // %x (materialized)
CHECK-NEXT:  for (long l_ = tid_; l_ < 4 * N; l_ += 64) {
CHECK:       tg_x[(i_0 * (N + 1)) + i_1] = (ulong((4 * block_m) + i_0) < ulong(M) ?
CHECK:       threadgroup_barrier(mem_flags::mem_threadgroup);  // plan: {{.*}} %x written, then read
CHECK:       acc_ = pl_max(acc_, tg_x[(i_0 * (N + 1)) + i_1]);
CHECK:       threadgroup_barrier(mem_flags::mem_threadgroup);
CHECK:       tg_e[pl_swizzle((i_0 * N) + i_1, 112, 4)] = metal::exp(
CHECK:       threadgroup_barrier(mem_flags::mem_threadgroup);
CHECK:       if (ulong((4 * block_m) + i_0) < ulong(M)) {
CHECK-NEXT:  Y[{{.*}}] = (tg_e[pl_swizzle((i_0 * N) + i_1, 112, 4)] / tg_{{.*}}]);
"""

MANUAL_GEMM_CHECKS = """\
CHECK-LABEL: kernel void manual_gemm(device const float* A [[buffer(0)]],
CHECK-NEXT:  device const float* B [[buffer(1)]],
CHECK-NEXT:  device float* C [[buffer(2)]],
CHECK-NEXT:  constant long& M [[buffer(3)]],
CHECK-NEXT:  constant long& K [[buffer(4)]],
CHECK-NEXT:  constant long& N [[buffer(5)]],
CHECK-NEXT:  uint tg_pos_ [[threadgroup_position_in_grid]],
CHECK-NEXT:  uint tid_pos_ [[thread_index_in_threadgroup]]) {
CHECK:       const long block_m = gid_ / ((N + 32 - 1) / 32);
CHECK-NEXT:  const long block_n = gid_ % ((N + 32 - 1) / 32);
CHECK:       float r_acc_1[16];
CHECK-NEXT:  // threadgroup memory: one arena of 10,496 B (the plan's peak: 10,496 B), buffers at
CHECK-SAME:  byte offsets, side by side:
CHECK-NEXT:  //   [0, 4352) %As: f32[32, 16] stride [17, 1] x2, memory in threadgroup_memory
CHECK-NEXT:  //   [4352, 8448) %Bs: f32[16, 32] stride [1, 16] x2, memory in threadgroup_memory
CHECK-NEXT:  //   [8448, 10496) %3.stage.t1: f32[16, 32], stage in threadgroup_memory
CHECK-NEXT:  threadgroup float4 tg_arena_[656];
CHECK-NEXT:  threadgroup uchar* tg_bytes_ = reinterpret_cast<threadgroup uchar*>(tg_arena_);
CHECK-NEXT:  threadgroup float* tg_As = reinterpret_cast<threadgroup float*>(tg_bytes_ + 0);
CHECK-NEXT:  threadgroup float* tg_Bs = reinterpret_cast<threadgroup float*>(tg_bytes_ + 4352);
CHECK-NEXT:  threadgroup float* tg_3_stage_t1 = reinterpret_cast<threadgroup float*>(
CHECK-SAME:  tg_bytes_ + 8448);
CHECK:       for (long t0_ = 0; t0_ < (K + 16 - 1) / 16 + 1; ++t0_) {
CHECK-NEXT:  threadgroup_barrier(mem_flags::mem_threadgroup);  // other threads' accesses to %As
CHECK-NEXT:  {  // stage load: iteration t - 0
CHECK:       tg_As[544 * (k_tiles % 2) + (17 * i_0) + i_1] = (ulong((32 * block_m) + i_0) < ulong(M)
CHECK-SAME:  && ulong((16 * k_tiles) + i_1) < ulong(K) ? A[{{.*}}] : 0.0f);
CHECK:       tg_Bs[512 * (k_tiles % 2) + i_0 + (16 * i_1)] =
CHECK:       {  // stage compute: iteration t - 1
CHECK-NEXT:  const long it0_ = t0_ - 1;
CHECK-NEXT:  if (it0_ >= 0 && it0_ < (K + 16 - 1) / 16) {
CHECK:       tg_3_stage_t1[(32 * i_0) + i_1] = tg_Bs[512 * (k_tiles % 2) + i_0 + (16 * i_1)];
CHECK:       threadgroup_barrier(mem_flags::mem_threadgroup);  // {{.*}} to %3.stage.t1
CHECK-NEXT:  // mma [32 x 16] @ [16 x 32] into %acc_1
CHECK:       float acc_ = r_acc_1[l_ / 64];
CHECK-NEXT:  for (long i_2 = 0; i_2 < 16; ++i_2) {
CHECK-NEXT:  acc_ = acc_ + (tg_As[544 * (k_tiles % 2) + (17 * i_0) + i_2] *
CHECK-SAME:  tg_3_stage_t1[(32 * i_2) + i_1]);
CHECK:       r_acc_1[l_ / 64] = acc_;
CHECK:       // store C[32 * %block_m +: 32, 32 * %block_n +: 32]
CHECK-NOT:   threadgroup_barrier
CHECK:       C[{{.*}}] = r_acc_1[l_ / 64];
"""


def test_softmax_golden(m2: Target, tmp_path: Path) -> None:
    kernel, plan = padded_softmax(m2)
    filecheck(emit_msl(kernel, plan, m2).source, SOFTMAX_CHECKS, tmp_path)


def test_manual_gemm_golden(m2: Target, tmp_path: Path) -> None:
    kernel, plan = planned("manual_gemm", "optimal", m2)
    filecheck(emit_msl(kernel, plan, m2).source, MANUAL_GEMM_CHECKS, tmp_path)


def test_emission_is_deterministic(m2: Target) -> None:
    kernel, plan = planned("attention", "optimal", m2)
    assert emit_msl(kernel, plan, m2).source == emit_msl(kernel, plan, m2).source


# ----------------------------------------------------------------- CLI functions


def test_lower_msl_command_prints_the_kernel(m2: Target) -> None:
    kernel, plan = planned("gelu", "optimal", m2)
    text = lower_msl_command(kernel, plan, m2)
    assert text.startswith("// gelu for apple-m2") and "kernel void gelu(" in text


@needs_clang
def test_run_msl_check_reports_both_references(m2: Target) -> None:
    loaded = load_kernel("layernorm")
    bindings = SHAPES["layernorm"]
    plan = plan_kernel(loaded.kernel, m2, bindings)
    report = run_msl_check(loaded, plan, m2, bindings, ("forward", "reverse"))
    assert "vs the reference interpreter" in report
    assert "vs the example's numpy reference" in report
    assert report.splitlines()[-1].startswith("check ok")


@needs_clang
def test_run_msl_check_raises_on_mismatch(m2: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    import planner.cli.metal_cmds as cmds

    def broken(kernel: Kernel, plan: object, target: Target) -> MslKernel:
        msl = emit_msl(kernel, plan, target)  # type: ignore[arg-type]
        return dataclasses.replace(msl, source=msl.source.replace("metal::exp(", "(1.0f+"))

    monkeypatch.setattr(cmds, "emit_msl", broken)
    loaded = load_kernel("softmax")
    bindings = SHAPES["softmax"]
    with pytest.raises(PlannerError, match="check FAILED"):
        run_msl_check(loaded, plan_kernel(loaded.kernel, m2, bindings), m2, bindings)
