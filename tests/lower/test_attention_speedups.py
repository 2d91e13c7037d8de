"""The register-blocked small mma kernel (``planner.lower.cpu.small_gemm``) and the
attention tiles it now runs: values against numpy, and that the path is taken."""

from __future__ import annotations

import ctypes
import functools
import re

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from planner.catalog import CatalogRegistry
from planner.ir.examples import list_examples, load_example
from planner.lower import compile_kernel
from planner.lower.cpu import small_gemm
from planner.lower.cpu.config import CodegenConfig
from planner.lower.cpu.jit import host_target
from planner.lower.cpu.runtime import host_refusal
from planner.solve.planner import plan_kernel


@functools.cache
def _kernel_fn():  # the emitted kernel, made external and JIT-compiled alone
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = ir.Module("small_gemm_test")
    mod.triple = llvm.get_process_triple()
    fn = small_gemm._emit_small_gemm(mod, "sg", 8)
    fn.linkage = "external"
    host = host_target()  # LLVM legalizes the 8-wide vectors on any host
    tm = llvm.Target.from_triple(host.triple).create_target_machine(
        cpu=host.cpu, features=host.features)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), tm)
    engine.finalize_object()
    f32p, i64 = ctypes.POINTER(ctypes.c_float), ctypes.c_int64
    proto = ctypes.CFUNCTYPE(None, i64, i64, i64, f32p, i64, f32p, i64, f32p, i64, ctypes.c_int32)
    f = proto(engine.get_function_address("sg"))
    f._engine = engine
    return f, str(mod)


#: Why this machine cannot run x86-avx2 code (the runtime's own check), or None.
AVX2_REFUSAL = host_refusal("x86-avx2")


def _run(m: int, n: int, k: int, acc: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k + 3)).astype(np.float32)[:, :k]  # row stride k + 3
    b = rng.standard_normal((k, n + 5)).astype(np.float32)  # columns past n: untouched
    c = rng.standard_normal((m, n + 2)).astype(np.float32)
    want = c.astype(np.float64)
    want[:, :n] = (want[:, :n] if acc else 0.0) + a.astype(np.float64) @ b[:, :n]
    f, _ = _kernel_fn()
    p = ctypes.POINTER(ctypes.c_float)
    base = a.base if a.base is not None else a
    f(m, n, k, base.ctypes.data_as(p), k + 3, b.ctypes.data_as(p), n + 5,
      c.ctypes.data_as(p), n + 2, int(acc))
    return c, want


@pytest.mark.parametrize("m", [0, 1, 2, 3, 4, 5, 6, 7, 11, 16, 64])
@pytest.mark.parametrize("n,k", [(64, 64), (1, 1), (7, 3), (16, 0), (24, 13), (77, 5)])
@pytest.mark.parametrize("acc", [False, True])
def test_small_gemm_matches_numpy(m: int, n: int, k: int, acc: bool) -> None:
    got, want = _run(m, n, k, acc)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_small_gemm_keeps_a_register_block() -> None:
    """One k step of a full block is ROWS × VECS fmas on the same B vectors: the
    block's C lives in registers across k (the old kernel had one fma per row step)."""
    _, text = _kernel_fn()
    bodies = re.findall(r"^p\.body(?:\.\d+)?:\n(.*?)(?=^\S+:$)", text, re.S | re.M)
    per_step = max(b.count("llvm.fma") for b in bodies)
    assert per_step == small_gemm.ROWS * small_gemm.VECS


@functools.cache
def _attention(block: int):
    mod = next(load_example(e) for e in list_examples() if e.stem == "attention").module
    return mod, mod.make_attention(mod.AttentionConfig(block, block, 2))


def _compile(block: int, bindings: dict[str, int]):
    target = CatalogRegistry().get("x86-avx2")
    _, kern = _attention(block)
    return compile_kernel(kern, plan_kernel(kern, target, bindings), target)


def test_attention_64_tiles_take_the_small_kernel() -> None:
    """A 64 × 64 × 64 mma (attention's bench tile) runs the small kernel, not the
    packed GEMM: the emitted work test admits it."""
    assert CodegenConfig().small_mma >= 64 * 64 * 64
    ck = _compile(64, {"L": 100, "S": 77, "D": 64})
    limits = {int(x) for x in re.findall(r'icmp sle i64 %"?[\w.]+"?, (\d+)', ck.emitted_ir)}
    assert CodegenConfig().small_mma in limits  # the mma's small-kernel branch


@pytest.mark.skipif(AVX2_REFUSAL is not None, reason=str(AVX2_REFUSAL))
@pytest.mark.parametrize("block", [16, 64])
@pytest.mark.parametrize("L,S,D", [(100, 77, 64), (64, 64, 64), (70, 1, 24), (0, 5, 8),
                                   (33, 130, 13), (1, 65, 64)])
def test_attention_matches_numpy(block: int, L: int, S: int, D: int) -> None:
    mod, _ = _attention(block)
    rng = np.random.default_rng(L * 1000 + S)
    q, k, v = (rng.standard_normal((r, D)).astype(np.float32) for r in (L, S, S))
    ck = _compile(block, {"L": L, "S": S, "D": D})
    out = ck({"Q": q, "K": k, "V": v}, threads=2)["O"]
    np.testing.assert_allclose(out, mod.reference(q, k, v)["O"], rtol=2e-5, atol=2e-5)
