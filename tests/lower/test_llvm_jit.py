"""Tests for planner.lower.cpu.jit: compile, call, cache, threads, GIL release."""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import replace

import llvmlite.ir as ir
import numpy as np
import pytest

from planner.lower.cpu.jit import (
    CompiledModule,
    JitCache,
    JitModule,
    compile_module,
    declare_intrinsic,
    default_jit_cache,
    host_target,
    intrinsic_suffix,
)

I64 = ir.IntType(64)
F32 = ir.FloatType()


def _add_module(name: str = "add3") -> ir.Module:
    m = ir.Module(name="t")
    fn = ir.Function(m, ir.FunctionType(I64, [I64, I64]), name=name)
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(b.add(b.add(fn.args[0], fn.args[1]), ir.Constant(I64, 3)))
    return m


def _spin_module() -> ir.Module:
    """``i64 spin(i64* flag, i64 max)``: iterations until *flag != 0, or -1 after max."""
    m = ir.Module(name="spin")
    fn = ir.Function(m, ir.FunctionType(I64, [I64.as_pointer(), I64]), name="spin")
    flag, limit = fn.args
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("loop")
    cont = fn.append_basic_block("cont")
    done = fn.append_basic_block("done")
    give_up = fn.append_basic_block("give_up")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0), entry)
    v = b.load_atomic(flag, "acquire", 8)
    b.cbranch(b.icmp_signed("!=", v, ir.Constant(I64, 0)), done, cont)
    b.position_at_end(cont)
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, cont)
    b.cbranch(b.icmp_signed(">=", nxt, limit), give_up, loop)
    b.position_at_end(done)
    b.ret(i)
    b.position_at_end(give_up)
    b.ret(ir.Constant(I64, -1))
    return m


def test_host_target_has_cpu_and_features() -> None:
    spec = host_target()
    assert spec.cpu and spec.triple.startswith(("x86_64", "aarch64", "arm64", "ppc", "s390"))
    assert spec.features
    assert host_target() is spec  # memoized


def test_compile_and_call() -> None:
    cm = compile_module(_add_module(), cache=JitCache())
    assert isinstance(cm, CompiledModule) and JitModule is CompiledModule
    f = cm.ctypes_function("add3", ctypes.c_int64, [ctypes.c_int64, ctypes.c_int64])
    assert f(2, 5) == 10
    assert cm.address("add3") != 0
    assert "define" in cm.llvm_ir and "add3" in cm.llvm_ir
    assert "add3" in cm.asm
    with pytest.raises(KeyError):
        cm.address("nope")


def test_compile_ir_text() -> None:
    cache = JitCache()
    cm = compile_module(str(_add_module("from_text")), cache=cache)
    f = cm.ctypes_function("from_text", ctypes.c_int64, [ctypes.c_int64, ctypes.c_int64])
    assert f(-3, 0) == 0


def test_cache_hit_and_key() -> None:
    cache = JitCache()
    a = compile_module(_add_module(), cache=cache)
    b = compile_module(_add_module(), cache=cache)  # equal IR text, new Module object
    assert a is b
    assert (cache.hits, cache.misses, len(cache)) == (1, 1, 1)
    # Same IR at another opt level, or for another target, is a different entry.
    c = compile_module(_add_module(), cache=cache, opt_level=2)
    assert c is not a and cache.misses == 2
    spec = host_target()
    key1 = JitCache.make_key(str(_add_module()), spec, 3)
    assert key1 != JitCache.make_key(str(_add_module()), replace(spec, cpu="generic"), 3)
    assert key1 != JitCache.make_key(str(_add_module()), replace(spec, features="+sse2"), 3)
    assert a.key == key1


def test_default_cache_is_lazy_singleton() -> None:
    assert default_jit_cache() is default_jit_cache()
    cm = compile_module(_add_module("dflt"))
    assert compile_module(_add_module("dflt")) is cm


def test_concurrent_compiles_compile_once() -> None:
    cache = JitCache()
    results: list[CompiledModule] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(compile_module(_add_module("conc"), cache=cache))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 6 and all(r is results[0] for r in results)
    assert cache.misses == 1 and cache.hits == 5


def test_ctypes_call_releases_gil() -> None:
    """The JIT function spins until another *Python* thread sets a flag: only possible
    when the call released the GIL."""
    cm = compile_module(_spin_module(), cache=JitCache())
    spin = cm.ctypes_function("spin", ctypes.c_int64, [ctypes.c_void_p, ctypes.c_int64])
    flag = np.zeros(1, dtype=np.int64)

    def setter() -> None:
        time.sleep(0.02)
        flag[0] = 1

    t = threading.Thread(target=setter)
    t.start()
    iters = spin(flag.ctypes.data, 20_000_000_000)
    t.join()
    assert iters > 0, "the flag was never seen: the ctypes call held the GIL"


def test_intrinsic_helpers() -> None:
    assert intrinsic_suffix(ir.VectorType(F32, 8)) == "v8f32"
    assert intrinsic_suffix(F32) == "f32"
    assert intrinsic_suffix(ir.IntType(32)) == "i32"
    m = ir.Module()
    v8 = ir.VectorType(F32, 8)
    f1 = declare_intrinsic(m, "llvm.fma", [v8], v8, [v8, v8, v8])
    f2 = declare_intrinsic(m, "llvm.fma", [v8], v8, [v8, v8, v8])
    assert f1 is f2 and f1.name == "llvm.fma.v8f32"
