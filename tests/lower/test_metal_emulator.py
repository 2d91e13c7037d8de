"""The MSL checker and CPU emulator: hand-written kernels against numpy and Metal's rules.

Every kernel here is plain MSL as the emitter will print it. The suite needs clang-19
(``scripts/install_clang.sh``); without it the whole module is skipped, saying so.
"""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import numpy as np
import pytest

from planner.lower.metal.emulator import (
    EmulatedKernel,
    KernelFault,
    MslCompileError,
    check_msl,
    clang_available,
    compile_msl,
)

pytestmark = pytest.mark.skipif(
    not clang_available(),
    reason="clang-19 is not installed (scripts/install_clang.sh installs it; CI does)",
)

ELEMENTWISE = """\
#include <metal_stdlib>
using namespace metal;

kernel void activate(device const float* x [[buffer(0)]],
                     device float* y [[buffer(1)]],
                     constant float& alpha [[buffer(2)]],
                     constant uint& n [[buffer(3)]],
                     uint gid [[thread_position_in_grid]]) {
  if (gid < n) {
    float v = x[gid];
    float r = exp(-fabs(v)) + log(1.0f + v * v) + sqrt(fabs(v)) + rsqrt(1.0f + v * v);
    r = fma(alpha, tanh(v), r);
    r = select(r, 0.0f, v < -2.0f);
    y[gid] = min(max(r, -1.5f), 3.0f);
  }
}
"""

GEMM = """\
#include <metal_stdlib>
using namespace metal;

// C[M,N] = A[M,K] @ B[K,N], one 8x8 tile of C per threadgroup.
kernel void gemm(device const float* A [[buffer(0)]],
                 device const float* B [[buffer(1)]],
                 device float* C [[buffer(2)]],
                 constant int& M [[buffer(3)]],
                 constant int& N [[buffer(4)]],
                 constant int& K [[buffer(5)]],
                 uint3 group [[threadgroup_position_in_grid]],
                 uint3 tid [[thread_position_in_threadgroup]]) {
  threadgroup float As[8][8];
  threadgroup float Bs[8][8];
  int row = int(group.y) * 8 + int(tid.y);
  int col = int(group.x) * 8 + int(tid.x);
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += 8) {
    int ka = k0 + int(tid.x);
    int kb = k0 + int(tid.y);
    As[tid.y][tid.x] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
    Bs[tid.y][tid.x] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);  // tiles loaded
    for (int k = 0; k < 8; ++k) {
      acc = fma(As[tid.y][k], Bs[k][tid.x], acc);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // tiles consumed
  }
  if (row < M && col < N) {
    C[row * N + col] = acc;
  }
}
"""
LOADED_BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);  // tiles loaded"
CONSUMED_BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);  // tiles consumed"

BARRIER_KERNEL = """\
#include <metal_stdlib>
using namespace metal;

[[kernel]] void exchange(device float* out [[buffer(0)]],
                         constant int& mode [[buffer(1)]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint3 group [[threadgroup_position_in_grid]]) {
  threadgroup float t[64];
  float before = t[tid];
  t[tid] = float(tid);
  if (mode == 1 && tid < 32u) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  } else if (mode == 1) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  } else if (mode == 2 && tid == 5u) {
    return;
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  out[group.x * 128u + tid] = t[63u - tid];
  out[group.x * 128u + 64u + tid] = before;
}
"""

M, N, K = 37, 29, 45


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("msl-cache")


@pytest.fixture(scope="module")
def gemm(cache: Path) -> EmulatedKernel:
    return compile_msl(GEMM, "gemm", cache_dir=cache)


@pytest.fixture(scope="module")
def exchange(cache: Path) -> EmulatedKernel:
    return compile_msl(BARRIER_KERNEL, "exchange", cache_dir=cache)


def gemm_inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    return a, b, np.zeros((M, N), np.float32)


def run_gemm(kernel: EmulatedKernel, order: str, seed: int = 0) -> np.ndarray:
    a, b, c = gemm_inputs()
    kernel.run([a, b, c, M, N, K], ((N + 7) // 8, (M + 7) // 8, 1), (8, 8, 1), order, seed)
    return c


# ---- running --------------------------------------------------------------------------


def test_elementwise_masks_the_edge(cache: Path) -> None:
    kernel = compile_msl(ELEMENTWISE, "activate", cache_dir=cache)
    n = 1000  # not a multiple of the group size
    x = np.linspace(-3.0, 3.0, n, dtype=np.float32)
    y = np.full(n, 7.0, np.float32)
    report = kernel.run([x, y, 0.5, n], ((n + 63) // 64, 1, 1), (64, 1, 1))
    v = x.astype(np.float64)
    r = np.exp(-np.abs(v)) + np.log1p(v * v) + np.sqrt(np.abs(v)) + 1 / np.sqrt(1 + v * v)
    r = np.where(v < -2.0, 0.0, 0.5 * np.tanh(v) + r)
    np.testing.assert_allclose(y, np.clip(r, -1.5, 3.0), rtol=2e-6, atol=2e-6)
    assert report.groups_run == 16 and report.written == (1,)


@pytest.mark.parametrize("order", ["forward", "reverse", "random"])
def test_tiled_gemm_matches_numpy(gemm: EmulatedKernel, order: str) -> None:
    a, b, _ = gemm_inputs()
    np.testing.assert_allclose(run_gemm(gemm, order, seed=7), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("barrier", [LOADED_BARRIER, CONSUMED_BARRIER])
def test_missing_barrier_is_caught(cache: Path, barrier: str) -> None:
    kernel = compile_msl(GEMM.replace(barrier, ""), "gemm", cache_dir=cache)
    a, b, _ = gemm_inputs()
    caught = []
    for order in ("forward", "reverse"):
        try:
            c = run_gemm(kernel, order)
        except KernelFault as fault:  # a divergence report also counts
            caught.append(fault.reason)
            continue
        if not np.allclose(c, a @ b, rtol=1e-5, atol=1e-5):
            caught.append(f"wrong result in {order} order")
    assert len(caught) == 2, caught  # forward and reverse order both catch it


def test_threadgroup_memory_starts_as_nan_in_every_group(exchange: EmulatedKernel) -> None:
    out = np.zeros(3 * 128, np.float32)
    exchange.run([out, 0], (3, 1, 1), (64, 1, 1), "random", seed=1)
    out = out.reshape(3, 2, 64)
    np.testing.assert_array_equal(out[:, 0], np.tile(np.arange(63, -1, -1), (3, 1)))
    assert np.isnan(out[:, 1]).all()  # never the previous group's values


def test_divergent_barrier_is_reported(exchange: EmulatedKernel) -> None:
    out = np.zeros(128, np.float32)
    with pytest.raises(KernelFault, match=r"divergent barrier .* line 12:5 .* line 14:5") as e:
        exchange.run([out, 1], (1, 1, 1), (64, 1, 1))
    assert e.value.reason == "divergent-barrier"
    assert not out.any()  # a failed run writes nothing back


def test_early_exit_while_others_wait_is_reported(exchange: EmulatedKernel) -> None:
    out = np.zeros(128, np.float32)
    with pytest.raises(KernelFault, match=r"thread \(5,0,0\) returned while thread .* line 18"):
        exchange.run([out, 2], (1, 1, 1), (64, 1, 1), "reverse")


def test_out_of_bounds_write_hits_the_guard_page(cache: Path) -> None:
    source = ELEMENTWISE.replace("if (gid < n) {", "{")
    kernel = compile_msl(source, "activate", cache_dir=cache)
    x = np.zeros(100, np.float32)
    y = np.zeros(50, np.float32)  # x is long enough: only y overflows
    with pytest.raises(KernelFault, match=r"out-of-bounds write past the end of buffer\(1\) "
                       r"`y` .* \(element 50\) by thread \(50,0,0\) of threadgroup \(0,0,0\)"):
        kernel.run([x, y, 1.0, 50], (1, 1, 1), (64, 1, 1))


def test_out_of_bounds_read_is_reported(cache: Path) -> None:
    source = ELEMENTWISE.replace("if (gid < n) {", "{")
    kernel = compile_msl(source, "activate", cache_dir=cache)
    x, y = np.zeros(60, np.float32), np.zeros(64, np.float32)
    with pytest.raises(KernelFault, match=r"out-of-bounds read past the end of buffer\(0\) `x`"):
        kernel.run([x, y, 1.0, 64], (1, 1, 1), (64, 1, 1), "reverse")


def test_write_to_const_input_faults(cache: Path) -> None:
    cast_away_const = "((device float*)x)[gid] = 0.0f;\n    y[gid] = min("
    source = ELEMENTWISE.replace("y[gid] = min(", cast_away_const)
    kernel = compile_msl(source, "activate", cache_dir=cache)
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(KernelFault, match=r"write to read-only buffer\(0\) `x`") as e:
        kernel.run([x, y, 1.0, 64], (1, 1, 1), (64, 1, 1))
    assert e.value.reason == "read-only-write" and (x == 1).all()


def test_read_only_option_protects_a_writable_buffer(exchange: EmulatedKernel) -> None:
    out = np.zeros(128, np.float32)
    with pytest.raises(KernelFault, match=r"write to read-only buffer\(0\) `out`"):
        exchange.run([out, 0], (1, 1, 1), (64, 1, 1), read_only=[0])


def test_integer_division_by_zero_is_reported(cache: Path) -> None:
    source = """\
kernel void ratio(device int* y [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
  y[t] = 100 / (int(t) - 3);
}
"""
    kernel = compile_msl(source, "ratio", cache_dir=cache)
    with pytest.raises(KernelFault, match=r"division by zero\?\) in thread \(3,0,0\)"):
        kernel.run([np.zeros(8, np.int32)], (1, 1, 1), (8, 1, 1))


def test_runaway_kernel_times_out(cache: Path) -> None:
    source = """\
kernel void spin(device float* out [[buffer(0)]], constant int& n [[buffer(1)]],
                 uint tid [[thread_index_in_threadgroup]]) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) {
    acc = metal::fma(acc, 0.999f, 1.0f);
  }
  out[tid] = acc;
}
"""
    kernel = compile_msl(source, "spin", cache_dir=cache)
    start = time.perf_counter()
    with pytest.raises(KernelFault, match=r"ran past its 0\.3 s timeout, in thread \(0,0,0\)"):
        kernel.run([np.zeros(4, np.float32), 2**31 - 1], (1, 1, 1), (4, 1, 1), timeout_s=0.3)
    assert time.perf_counter() - start < 5


def test_arguments_are_checked_before_running(gemm: EmulatedKernel) -> None:
    a, b, c = gemm_inputs()
    with pytest.raises(TypeError, match=r"buffer\(0\) `A` .* float32 elements, got a float64"):
        gemm.run([a.astype(np.float64), b, c, M, N, K], (1, 1, 1), (8, 8, 1))
    with pytest.raises(TypeError, match=r"buffer\(3\) `M` .* takes an integer"):
        gemm.run([a, b, c, 1.5, N, K], (1, 1, 1), (8, 8, 1))
    with pytest.raises(ValueError, match="takes 6 buffers"):
        gemm.run([a, b, c], (1, 1, 1), (8, 8, 1))
    with pytest.raises(ValueError, match="1024 threads"):
        gemm.run([a, b, c, M, N, K], (1, 1, 1), (64, 32, 1))


def test_compiles_and_runs_are_safe_to_race(tmp_path: Path) -> None:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        kernels = list(pool.map(lambda _: compile_msl(GEMM, "gemm", cache_dir=tmp_path), range(4)))
    assert len({k.so_path for k in kernels}) == 1
    again = compile_msl(GEMM, "gemm", cache_dir=tmp_path)
    assert again.from_cache and again.compile_s < min(k.compile_s for k in kernels)
    a, b, _ = gemm_inputs()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # runs release the GIL
        results = list(pool.map(lambda o: run_gemm(again, o, 3), ["forward", "reverse", "random"]))
    for c in results:
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


# ---- checking -------------------------------------------------------------------------


NOT_RECURSIVE = """\
template <int N> float power(float x) { return x * power<N - 1>(x); }
template <> float power<0>(float x) { return 1.0f; }
float leaf(float x) { return x + 1.0f; }
float left(float x) { return leaf(x) * 2.0f; }
float right(float x) { return leaf(x) + power<3>(x); }
kernel void diamond(device float* y [[buffer(0)]]) { y[0] = left(y[0]) + right(y[1]); }
"""


def test_valid_kernels_check_clean() -> None:
    for source in (ELEMENTWISE, GEMM, BARRIER_KERNEL, NOT_RECURSIVE):
        result = check_msl(source)
        assert result.ok and not result.warnings, result.render()


def _errors(source: str) -> list[str]:
    result = check_msl(source, filename="k.metal")
    assert not result.ok
    return [d.render() for d in result.errors]


def test_double_is_rejected() -> None:
    errors = _errors("kernel void k(device float* y [[buffer(0)]]) {\n"
                     "  double d = 2.0;\n  y[0] = float(d);\n}\n")
    assert any(e.startswith("k.metal:2:3: error") and "double" in e and "Metal has no double"
               in e for e in errors)


def test_unqualified_device_pointer_is_rejected() -> None:
    errors = _errors("kernel void k(device float* y [[buffer(0)]]) {\n"
                     "  float* p = y;\n  p[0] = 1.0f;\n}\n")
    assert any(e.startswith("k.metal:2:") and "device float *" in e
               and "no generic address space" in e for e in errors)


def test_recursion_is_rejected() -> None:
    source = """\
float down(float x, int n);
float up(float x, int n) { return n > 0 ? down(x * 2.0f, n - 1) : x; }
float down(float x, int n) { return n > 0 ? up(x - 1.0f, n - 1) : x; }
kernel void k(device float* y [[buffer(0)]]) { y[0] = up(y[0], 3); }
"""
    (error,) = _errors(source)
    assert error.startswith("k.metal:2:")
    assert "recursion is not allowed in Metal: up -> down -> up" in error


def test_direct_recursion_is_rejected() -> None:
    (error,) = _errors("int f(int n) { return n ? f(n - 1) : 0; }\n"
                       "kernel void k(device int* y [[buffer(0)]]) { y[0] = f(y[0]); }\n")
    assert error.startswith("k.metal:1:27: error [msl-recursion]") and "f -> f" in error


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        ("float g = 1.0f;\n", "program scope variable must reside in constant address space"),
        ("kernel void t(threadgroup float* s [[threadgroup(0)]]) {}\n", "outside the supported"),
        ("kernel void t(device float* y [[buffer(0)]]) { y[0] = 1.0; }\n", "f suffix"),
        ("kernel void t(device int* y [[buffer(0)]]) { float f = 2.5f; y[0] = f; }\n",
         "implicit conversion"),
        ("kernel void t(device float* y [[buffer(0)]], uint l [[thread_index_in_simdgroup]]) {}\n",
         "unknown attribute 'thread_index_in_simdgroup'"),
        ("kernel void t(device float4* y [[buffer(0)]]) {}\n", "element type `float4`"),
        # float4 is storage only (the threadgroup arena's element): no components, no math
        ("kernel void t(device float* y [[buffer(0)]]) { threadgroup float4 a[1];"
         " y[0] = a[0].x; }\n", "no member named 'x'"),
        ("kernel void t(device float* y [[buffer(0)]]) { threadgroup float4 a[2];"
         " a[0] = a[0] + a[1]; }\n", "invalid operands"),
        ("kernel void t(device float* y [[buffer(0)]], int g [[thread_position_in_grid]]) {}\n",
         "a position attribute is declared uint"),
        ("kernel void t(device float* y [[buffer(0)]], uint g [[thread_position_in_grid]]) {"
         " y[g] = g; }\n", "implicit conversion from 'uint'"),
        ("kernel void t(device float& y [[buffer(0)]]) {}\n", "parameter is `device T*`"),
        ("kernel void t(device float* y) {}\n", "`y` has no [[buffer(n)]] or position attr"),
        ("kernel void t(device float* y [[buffer(0)]], device int* z [[buffer(0)]]) {}\n",
         "binds [[buffer(0)]] twice"),
    ],
)
def test_outside_the_subset_is_rejected(snippet: str, message: str) -> None:
    source = "#include <metal_stdlib>\nusing namespace metal;\n" + snippet
    errors = _errors(source)
    assert any(e.startswith("k.metal:3:") and message in e for e in errors), errors


def test_compile_error_carries_msl_lines(cache: Path) -> None:
    with pytest.raises(MslCompileError, match=r"kernel\.metal:17:19: error"):
        compile_msl(GEMM.replace("float acc = 0.0f;", "float acc = 0.0f"), "gemm",
                    cache_dir=cache)
    with pytest.raises(MslCompileError, match=r"no kernel `nope` .*\(it defines: gemm\)"):
        compile_msl(GEMM, "nope", cache_dir=cache)


def test_check_and_compile_times_are_reported(cache: Path) -> None:
    start = time.perf_counter()
    result = check_msl(GEMM)
    assert result.ok and 0 < result.elapsed_s <= time.perf_counter() - start
    kernel = compile_msl(GEMM.replace("C[row", "C[(row)"), "gemm", cache_dir=cache)
    assert not kernel.from_cache and kernel.compile_s > result.elapsed_s / 2


def test_stack_overflow_is_reported(cache: Path) -> None:
    source = """\
kernel void deep(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  float big[40000];
  for (uint i = 0; i < 40000u; ++i) {
    big[i] = float(i ^ tid);
  }
  out[tid] = big[out[tid] > 0.0f ? 39999 : 7];
}
"""
    kernel = compile_msl(source, "deep", cache_dir=cache)
    with pytest.raises(KernelFault, match=r"stack overflow in thread \(0,0,0\)"):
        kernel.run([np.zeros(4, np.float32)], (1, 1, 1), (4, 1, 1))
    out = np.zeros(4, np.float32)
    kernel.run([out], (1, 1, 1), (4, 1, 1), stack_bytes=256 * 1024)
    assert out.tolist() == [7.0, 6.0, 5.0, 4.0]


def test_write_just_before_a_buffer_is_found_after_the_run(cache: Path) -> None:
    source = ELEMENTWISE.replace("y[gid] = min(", "y[int(gid) - 1] = min(")
    kernel = compile_msl(source, "activate", cache_dir=cache)
    x, y = np.zeros(50, np.float32), np.zeros(50, np.float32)
    with pytest.raises(KernelFault, match=r"write before the start of buffer\(1\) `y` .* -4\)"):
        kernel.run([x, y, 1.0, 50], (1, 1, 1), (64, 1, 1))
