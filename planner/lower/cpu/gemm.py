"""BLIS-style packed fp32 GEMM, emitted as LLVM IR, plus a threaded numpy driver.

What is emitted
---------------
:func:`emit_gemm_f32` adds these functions to an ``llvmlite.ir.Module`` (``name`` defaults
to ``planner_sgemm``; all matrices row-major with element strides)::

    void name(i64 M, i64 N, i64 K, float* A, i64 lda, float* B, i64 ldb,
              float* C, i64 ldc, i32 accumulate)
        C = A @ B (accumulate == 0) or C += A @ B. Self-contained: its packing scratch is
        taken with aligned_alloc and freed before returning (no shared state, so
        concurrent calls on disjoint C are safe; a failed allocation traps).

:func:`emit_gemm_f32_strided` adds instead (what ``cpu_codegen`` calls for ``mma``)::

    void name(i64 M, i64 N, i64 K, float* A, i64 rsa, i64 csa, float* B, i64 rsb,
              i64 csb, float* C, i64 ldc, i32 accumulate, float* scratch)
        The same GEMM with both element strides of A and B (a transposed A or a
        column-major B is packed directly, without a copy) and caller-provided packing
        scratch of :meth:`GemmConfig.scratch_floats` floats (64-byte aligned), so a
        caller that runs many GEMMs allocates once. Bit-identical to ``name`` above.

    void name_cached(..., float* scratch, i64* acache, i64* bcache)
        The same, with pack caches: packed A blocks and B panels are looked up by source
        address, strides and extents in two caller-owned tables (null: pack into scratch),
        so a caller running many tile products on read-only operands packs each block
        once per table lifetime (``cpu_codegen``: one table pair per segment call).
        [MEAS] Zen 5, the plan's 256³ tiles, 1 thread, interleaved: 1024³ 9.93 → 9.70
        ms, 2048³ 84.3 → 79.9 ms (p10; numpy 9.65 / 76.1).

With ``threaded_entry_points=True`` (what :class:`SgemmKernel` compiles)::

    void name_pack_b(i64 K, i64 ncols, float* B, i64 ldb, float* Bp, i64 npad, i64 s0)
    void name_prepacked(i64 M, i64 N, i64 K, float* A, i64 lda, float* Bp, i64 npad,
                        i64 s0, float* C, i64 ldc, i32 accumulate, float* Abuf)
        The same computation split in two, so that several threads can share one packed
        copy of B (see *Threading*). ``Abuf`` is caller-owned scratch of
        :attr:`GemmConfig.a_buffer_floats` floats (64-byte aligned).

    i32 name_task(i64* sync, i64 max_cycles, i32 wait_done, i64 M, i64 N, i64 K,
                  float* A, i64 lda, float* B, i64 ldb, float* Bp, i64 npad, float* C,
                  i64 ldc, i32 accumulate, float* Abuf, i64 pack_cols, i64 chunk_m,
                  i64 chunk_n)
        One thread's part of the threaded GEMM (see *Threading*).

plus ``internal`` helpers ``name.ukr`` (micro-kernel), ``name.pack_a``, ``name.pack_b``,
``name.macro``, ``name.zero`` and ``name.wait``; LLVM inlines all but the last two.

Algorithm (Goto/BLIS)
---------------------
Loops ``jc`` (NC columns of C) → ``pc`` (KC of the reduction) → pack a KC×NC panel of
B → ``ic`` (MC rows) → pack an MC×KC block of A → ``jr`` (NR columns) → ``ir`` (MR rows)
→ register micro-kernel on an MR×NR tile of C.

* The **micro-kernel** holds the MR×NR tile of C in ``MR·NR/VW`` vector registers
  (``<VW x float>``); for each k it loads NR/VW vectors of packed B, broadcasts MR
  scalars of packed A (``vbroadcastss``) and issues ``llvm.fma`` (→ ``vfmadd231ps``). On
  AVX2 (Zen 3, the project's machine kind) the tile is **6×16** with ``<8 x float>``:
  12 ymm accumulators + 2 B vectors + 1 broadcast = 15 of 16 registers. On AVX-512
  hosts it is **8×32** with ``<16 x float>`` (16 zmm accumulators); same code, other
  parameters (:meth:`GemmConfig.for_target` for the host's standalone sgemm,
  :meth:`GemmConfig.for_figures` for a plan: the target catalog's vector width and
  register budget, never the host's).
* **Packing** is what makes this fast (the project's measurements: register blocking
  without packing falls to ~0.2× numpy at n = 1024 through cache/TLB conflicts): packed
  A is stored as MR-row slivers (``Ap[i][k][r]``) and packed B as NR-column slivers
  (``Bp[s][k][j]``), so the micro-kernel streams both with unit stride, the B sliver
  (KC·NR·4 = 16 KiB on AVX2) stays in L1, the A block (MC·KC·4 ≈ 144 KiB) in L2 and the
  B panel in L3, whatever the strides are (a column-major B sliver is packed with VW×VW
  in-register transposes, a row-major A sliver with MR-row transposes). Packing zero-pads
  the edges, so the micro-kernel computes a full tile (a half-width or half-height one,
  NR/2 columns or MR/2 rows, for a last sliver that fits in it) and only the store to C
  is masked (lane-masked vector loads/stores of the valid rows; a row-major B edge
  sliver is packed with lane-masked loads too: measured on Zen 5, this took the
  300×200×130 edge bench's tile GEMMs from 1.33 to ~1.08 of the per-element time at
  tile-multiple sizes). With ``prefetch_c`` (AVX-512
  only) the micro-kernel prefetches its C tile for writing ``prefetch_c`` k steps before
  the end of its k loop (the loop is split in two there; same arithmetic, same order).
* **Blocking** (AVX2): MR=6, NR=16, KC=256, MC=144, NC=4080 (BLIS's Zen 3 choice:
  KC·NR fits L1 with room for A, MC·KC fits half of the 512 KiB L2). AVX-512: MR=8,
  NR=32, KC=512, MC=256, NC=4096, C prefetched 128 k steps ahead (measured on Zen 5:
  the 64 KiB B sliver streams from the 1 MiB L2 at no measurable cost, the 512 KiB A
  block fits in it, and fewer KC passes over C plus the prefetch are worth ~5-10 % at
  n = 2048).
* ``accumulate`` only matters for the first KC block: later blocks always add to C. With
  K == 0 and accumulate == 0, C is zero-filled; with M == 0 or N == 0 nothing is touched.
  Every C element is summed in the same order (k ascending within a KC block, blocks in
  order), whatever the thread split, so 1-thread and n-thread results are bit-identical.

Threading (:class:`SgemmKernel`)
--------------------------------
The threaded driver packs **all** of B once into a shared buffer (``K × npad`` floats,
``npad`` = N rounded up to NR, laid out KC block by KC block so each block is exactly the
panel the 1-thread path packs): each thread repacking B would cost ~30 % at n = 512 on 2
threads. The work is cut into ~4 chunks per thread (column chunks of B to pack, then row
blocks of C, or column blocks when M is short; with ``balance_rows``, the AVX-512
config's, row blocks sized so that each thread gets about as many rows) which the threads
claim with atomic fetch-adds *inside the compiled code* (``name_task``); the only
synchronization, "all of B is packed" and "all of C is done", is a spin on an atomic
counter (``pause``, then ``sched_yield`` after ~20 µs, falling back to sleep-polling in
Python after ~10 ms).
No thread ever waits for one that has not started: the calling thread works too, and a
pool worker that wakes up late (a thread hand-off costs ~50–70 µs on this VM) just finds
less or no work. So there are no Python-level barriers, no GIL hand-offs between phases,
and no waiting on futures. Compiled functions are called through ``ctypes.CFUNCTYPE``,
which releases the GIL. Problems below :attr:`SgemmKernel.min_parallel_flops` run on one
thread.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir
import numpy as np

from planner.lower.cpu.jit import (
    CompiledModule,
    JitCache,
    TargetSpec,
    compile_module,
    declare_intrinsic,
    host_target,
    masked_load_store,
)
from planner.lower.cpu.llvm_helpers import (
    F32,
    F32P,
    I1,
    I8,
    I8P,
    I32,
    I64,
    c64,
    declare_function,
    internal,
    loop,
    smax,
    smin,
    splat,
    transpose,
)

__all__ = [
    "POOL_BUDGET_BYTES",
    "POOL_DRAIN_SYMBOL",
    "BufferPool",
    "GemmConfig",
    "SgemmKernel",
    "buffer_pool",
    "default_sgemm_kernel",
    "emit_gemm_f32",
    "emit_gemm_f32_strided",
    "emit_scratch_floats",
    "sgemm",
]

@dataclass(frozen=True)
class GemmConfig:
    """Register tile (MR×NR, vectors of VW floats) and cache blocking (MC, KC, NC), plus
    the AVX-512 tuning of the C prefetch and of the threaded row split."""

    mr: int = 6
    nr: int = 16
    vw: int = 8
    mc: int = 144
    kc: int = 256
    nc: int = 4080
    #: When > 0: the micro-kernel prefetches its C tile for writing this many k steps
    #: before the end of its k loop, so that the final loads/stores of C do not stall on
    #: cache misses (C rows are ``ldc`` apart: on large matrices, a page each).
    prefetch_c: int = 0
    #: Threaded driver (:class:`SgemmKernel`): size the row chunks so that every thread
    #: gets about as many rows (:func:`_balanced_chunk`), not just MC-row chunks.
    balance_rows: bool = False

    def __post_init__(self) -> None:
        if self.vw not in (4, 8, 16) or self.nr % self.vw:
            raise ValueError(f"nr={self.nr} must be a multiple of vw={self.vw} (4, 8 or 16)")
        if self.mc % self.mr or self.nc % self.nr:
            raise ValueError("mc must be a multiple of mr and nc a multiple of nr")
        if min(self.mr, self.kc) < 1:
            raise ValueError("mr and kc must be positive")
        if self.prefetch_c < 0:
            raise ValueError("prefetch_c must be >= 0 (0: no prefetch of C)")

    @classmethod
    def avx2(cls) -> GemmConfig:
        return cls(mr=6, nr=16, vw=8, mc=144, kc=256, nc=4080)

    @classmethod
    def avx512(cls) -> GemmConfig:
        # [MEAS] Zen 5 (znver5, 48 KiB L1D, 1 MiB L2 per core; bench/gemm_kernel.py):
        # KC 384 → 512 and prefetching C 128 k steps ahead: ~0.9 → ~1.0 of OpenBLAS at
        # n = 2048 (C misses had cost ~5-10 %); 12×32, 8×48 and 6×64 tiles were no faster.
        # balance_rows: 2048 rows on 2 threads 0.95 → 0.99 of OpenBLAS (11 uneven chunks
        # of 192 rows before, 16 of 128); MC 192 → 256: 8 chunks of 256, ~+3 % there
        # (fewer passes over the packed B), neutral on 1 thread and at n = 1024.
        return cls(mr=8, nr=32, vw=16, mc=256, kc=512, nc=4096, prefetch_c=128,
                   balance_rows=True)

    @classmethod
    def for_figures(cls, vector_width: int, registers: int) -> GemmConfig:
        """The tile for ``registers`` vector registers of ``vector_width`` fp32 lanes (a
        target catalog's figures): MR·NR/VW accumulators + NR/VW B vectors + 1 broadcast
        must fit, NR = 2·VW.  The AVX2 tile for 8 lanes and ≥ 15 registers, the AVX-512
        tile for 16 lanes and ≥ 19; otherwise MR as large as fits (at most 8)."""
        if vector_width == 16 and registers >= 19:
            return cls.avx512()
        if vector_width == 8 and registers >= 15:
            return cls.avx2()
        mr, nr = max(1, min(8, (registers - 3) // 2)), 2 * vector_width
        return cls(mr=mr, nr=nr, vw=vector_width, mc=mr * max(1, 144 // mr), kc=256,
                   nc=nr * max(1, 4080 // nr))

    @classmethod
    def for_target(cls, spec: TargetSpec | None = None) -> GemmConfig:
        """AVX-512 tile when the target has ``avx512f``, else the AVX2 6×16 tile."""
        spec = spec if spec is not None else host_target()
        return cls.avx512() if spec.has_feature("avx512f") else cls.avx2()

    @property
    def a_buffer_floats(self) -> int:
        """Floats of scratch for one packed MC×KC block of A."""
        return self.mc * self.kc

    def b_buffer_floats(self, n: int) -> int:
        """Floats of scratch for one packed KC×NC panel of B (N columns)."""
        return self.kc * min(self.nc, _round_up(max(n, 1), self.nr))

    def scratch_floats(self, n: int) -> int:
        """Floats of the ``scratch`` of :func:`emit_gemm_f32_strided` for N columns: a
        packed B panel, then a packed A block (both 64-byte aligned in a 64-byte aligned
        buffer)."""
        return self.b_buffer_floats(n) + self.a_buffer_floats


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _balanced_chunk(m: int, unit: int, cap: int, threads: int) -> int:
    """The chunk size (a multiple of ``unit``, at most ``cap``, at least ``cap/2``) for
    splitting ``m`` rows among ``threads`` that claim equal chunks in turn: the largest
    whose busiest thread gets at most 1 % more rows than with the best such size. (Plain
    ``cap``-row chunks can leave one thread ~6 % more rows than its share: 2048 rows in
    192-row chunks on 2 threads are 11 chunks, 1088 vs 960 rows; 128-row ones, 1024 each.)
    """
    spans = {}
    for c in range(cap, max(unit, (cap + 1) // 2) - 1, -unit):
        n = -(-m // c)
        per, extra = divmod(n, threads)
        short = n * c - m  # the last chunk is this much short, claimed by (n-1) % threads
        spans[c] = max((per + (t < extra)) * c - (short if t == (n - 1) % threads else 0)
                       for t in range(threads))
    if not spans:
        return cap
    best = min(spans.values())
    return max(c for c, s in spans.items() if s * 100 <= best * 101)


# --------------------------------------------------------------------------------------
# IR helpers
# --------------------------------------------------------------------------------------


def _gep(b: ir.IRBuilder, p: ir.Value, idx: ir.Value | int) -> ir.Value:
    return b.gep(p, [c64(idx) if isinstance(idx, int) else idx], inbounds=True)


def _vload(b: ir.IRBuilder, p: ir.Value, vty: ir.VectorType, align: int) -> ir.Value:
    return b.load(b.bitcast(p, vty.as_pointer()), align=align)


def _vstore(b: ir.IRBuilder, v: ir.Value, p: ir.Value, align: int) -> None:
    b.store(v, b.bitcast(p, v.type.as_pointer()), align=align)


def _lane_masks(b: ir.IRBuilder, width: ir.Value, nvec: int, vw: int) -> list[ir.Value]:
    """Per vector ``v`` of a row, the ``<vw x i1>`` mask of lanes ``v*vw + l < width``."""
    lanes = ir.Constant(ir.VectorType(I64, vw), list(range(vw)))
    wv = splat(b, width, vw)
    return [b.icmp_signed("<", b.add(lanes, splat(b, c64(v * vw), vw)), wv)
            for v in range(nvec)]


# --------------------------------------------------------------------------------------
# Pieces of the GEMM
# --------------------------------------------------------------------------------------


def _emit_ukr(module: ir.Module, name: str, cfg: GemmConfig) -> ir.Function:
    """``ukr(kc, Ap, Bp, C, ldc, mr, nr, loadc)``: C[:mr,:nr] (+)= Ap-sliver @ Bp-sliver.

    A sliver whose valid columns fit in half of NR, or rows in half of MR (the last one
    of an edge panel), runs a half-width or half-height register tile: about the FMAs
    its elements need, not a full tile's."""
    mr_, nr_, vw = cfg.mr, cfg.nr, cfg.vw
    nv = nr_ // vw
    vty = ir.VectorType(F32, vw)
    fnty = ir.FunctionType(ir.VoidType(), [I64, F32P, F32P, F32P, I64, I64, I64, I1])
    fn = internal(ir.Function(module, fnty, name=f"{name}.ukr"))
    kc, ap, bp, c, ldc, mr, nr, loadc = fn.args
    for a in (ap, bp, c):
        a.add_attribute("noalias")
    fma = declare_intrinsic(module, "llvm.fma", [vty], vty, [vty, vty, vty])
    if cfg.prefetch_c:
        prefetch = declare_intrinsic(module, "llvm.prefetch", [I8P], ir.VoidType(),
                                     [I8P, I32, I32, I32])

    entry = fn.append_basic_block("entry")
    ret = fn.append_basic_block("ret")
    b = ir.IRBuilder(entry)
    zero = ir.Constant(vty, 0.0)
    mload, mstore = masked_load_store(module, vty)

    def path(nrows: int, nvec: int, tag: str) -> ir.Block:
        """The register tile of ``nrows × nvec·vw``, from its own first block."""
        width = nvec * vw
        first = fn.append_basic_block(f"{tag}.start")
        hdr = fn.append_basic_block(f"{tag}.k.hdr")
        body = fn.append_basic_block(f"{tag}.k.body")
        if cfg.prefetch_c:
            mid = fn.append_basic_block(f"{tag}.k.prefetch")
            hdr2 = fn.append_basic_block(f"{tag}.k2.hdr")
            body2 = fn.append_basic_block(f"{tag}.k2.body")
        done_k = fn.append_basic_block(f"{tag}.k.end")

        def kloop(hdr: ir.Block, body: ir.Block, pred: ir.Block, k0: ir.Value,
                  accs0: list[list[ir.Value]], bound: ir.Value, exit_blk: ir.Block
                  ) -> tuple[ir.Value, list[list[ir.Value]]]:
            """k from k0 (entered from pred) while k < bound; the (k, accumulator) phis
            of the header, i.e. their values on exit."""
            b.position_at_end(hdr)
            k = b.phi(I64, name="k")
            k.add_incoming(k0, pred)
            accs = [[b.phi(vty, name=f"acc{r}_{v}") for v in range(nvec)] for r in range(nrows)]
            for row, row0 in zip(accs, accs0, strict=True):
                for a, a0 in zip(row, row0, strict=True):
                    a.add_incoming(a0, pred)
            b.cbranch(b.icmp_signed("<", k, bound), body, exit_blk)

            b.position_at_end(body)
            bk = _gep(b, bp, b.mul(k, c64(nr_), flags=["nsw"]))
            bv = [_vload(b, _gep(b, bk, v * vw), vty, min(64, vw * 4)) for v in range(nvec)]
            ak = _gep(b, ap, b.mul(k, c64(mr_), flags=["nsw"]))
            for r in range(nrows):
                a_s = splat(b, b.load(_gep(b, ak, r), align=4), vw)
                for v in range(nvec):
                    accs[r][v].add_incoming(b.call(fma, [a_s, bv[v], accs[r][v]]), body)
            k.add_incoming(b.add(k, c64(1), flags=["nsw"]), body)
            b.branch(hdr)
            return k, accs

        b.position_at_end(first)
        zeros = [[zero] * nvec for _ in range(nrows)]
        if not cfg.prefetch_c:
            b.branch(hdr)
            _, accs = kloop(hdr, body, first, c64(0), zeros, kc, done_k)
        else:
            # The last prefetch_c iterations run after prefetching every line of the
            # nrows × width C tile (a row may straddle 64-byte lines) for writing.
            kpre = smax(b, c64(0), b.sub(kc, c64(cfg.prefetch_c)))
            b.branch(hdr)
            k1, accs1 = kloop(hdr, body, first, c64(0), zeros, kpre, mid)
            b.position_at_end(mid)
            for r in range(nrows):
                crow = _gep(b, c, b.mul(c64(r), ldc))
                for j in sorted({*range(0, width, 16), width - 1}):
                    b.call(prefetch, [b.bitcast(_gep(b, crow, j), I8P), ir.Constant(I32, 1),
                                      ir.Constant(I32, 3), ir.Constant(I32, 1)])
            b.branch(hdr2)
            _, accs = kloop(hdr2, body2, mid, k1, accs1, kc, done_k)

        b.position_at_end(done_k)
        full = b.and_(b.icmp_signed("==", mr, c64(nrows)),
                      b.icmp_signed("==", nr, c64(width)))
        fullblk = fn.append_basic_block(f"{tag}.full")
        edgeblk = fn.append_basic_block(f"{tag}.edge")
        b.cbranch(full, fullblk, edgeblk)

        # Full tile: vector stores, adding the old C first when loadc.
        b.position_at_end(fullblk)
        full_add = fn.append_basic_block(f"{tag}.full.add")
        full_set = fn.append_basic_block(f"{tag}.full.set")
        b.cbranch(loadc, full_add, full_set)
        for blk, add in ((full_add, True), (full_set, False)):
            b.position_at_end(blk)
            for r in range(nrows):
                crow = _gep(b, c, b.mul(c64(r), ldc))
                for v in range(nvec):
                    p = _gep(b, crow, v * vw)
                    val = accs[r][v]
                    if add:
                        val = b.fadd(val, _vload(b, p, vty, 4))
                    _vstore(b, val, p, 4)
            b.branch(ret)

        # Edge tile: the valid mr rows, each with lane-masked vector loads/stores of C.
        b.position_at_end(edgeblk)
        masks = _lane_masks(b, nr, nvec, vw)
        for r in range(nrows):
            with b.if_then(b.icmp_signed("<", c64(r), mr)):
                crow = _gep(b, c, b.mul(c64(r), ldc))
                for v in range(nvec):
                    p = _gep(b, crow, v * vw)
                    old = b.call(mload, [p, ir.Constant(I32, 4), masks[v], zero])
                    val = b.select(loadc, b.fadd(accs[r][v], old), accs[r][v])
                    b.call(mstore, [val, p, ir.Constant(I32, 4), masks[v]])
        b.branch(ret)
        return first

    rows = (mr_, mr_ // 2) if mr_ >= 2 else (mr_,)
    cols = (nv, nv // 2) if nv >= 2 else (nv,)
    firsts = {(r, v): path(r, v, f"t{r}x{v}") for r in rows for v in cols}

    def pick(r: int, blk_cols: tuple[int, ...]) -> ir.Block:
        if len(blk_cols) == 1:
            return firsts[r, blk_cols[0]]
        sel = fn.append_basic_block(f"pick{r}")
        b.position_at_end(sel)
        b.cbranch(b.icmp_signed("<=", nr, c64(blk_cols[1] * vw)), firsts[r, blk_cols[1]],
                  firsts[r, blk_cols[0]])
        return sel

    by_rows = [pick(r, cols) for r in rows]
    b.position_at_end(entry)
    if len(rows) == 1:
        b.branch(by_rows[0])
    else:
        b.cbranch(b.icmp_signed("<=", mr, c64(rows[1])), by_rows[1], by_rows[0])

    b.position_at_end(ret)
    b.ret_void()
    return fn


def _pack_function(module: ir.Module, name: str) -> tuple[ir.Function, ir.IRBuilder]:
    """An internal ``void name(i64, i64, float* src, i64 rs, i64 cs, float* dst)`` with
    noalias ``src`` and ``dst``, and a builder at its entry block."""
    fnty = ir.FunctionType(ir.VoidType(), [I64, I64, F32P, I64, I64, F32P])
    fn = internal(ir.Function(module, fnty, name=name))
    fn.args[2].add_attribute("noalias")
    fn.args[5].add_attribute("noalias")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _emit_pack_a(module: ir.Module, name: str, cfg: GemmConfig) -> ir.Function:
    """``pack_a(mc, kc, A, rsa, csa, Ap)``: A[i, k] at ``A[i*rsa + k*csa]`` into MR-row
    slivers, ``Ap[i*kc*MR + k*MR + r]``. Full slivers of a row-major A (``csa == 1``)
    take the fast path; every other case (edges, transposed or strided A) loads through
    both strides."""
    mr_ = cfg.mr
    fn, b = _pack_function(module, f"{name}.pack_a")
    mc, kc, a, rsa, csa, ap = fn.args
    zero = ir.Constant(F32, 0.0)
    unit = b.icmp_signed("==", csa, c64(1))
    wt = 1 << (mr_ - 1).bit_length()
    wty = ir.VectorType(F32, wt)
    kvec = b.mul(b.sdiv(kc, c64(wt)), c64(wt))
    with loop(b, c64(0), mc, mr_, "i0") as i0:
        h = smin(b, b.sub(mc, i0), c64(mr_))
        dst = _gep(b, ap, b.mul(i0, kc))  # (i0/MR)*kc*MR == i0*kc
        src = _gep(b, a, b.mul(i0, rsa))
        fast = b.and_(b.icmp_signed("==", h, c64(mr_)), unit)
        with b.if_else(fast) as (then, otherwise):
            with then:
                # W×W in-register transposes (W = MR rounded up to a power of two, the
                # extra rows repeat the last one and are dropped), then the k remainder.
                rows = [_gep(b, src, b.mul(c64(r), rsa)) for r in range(mr_)]
                with loop(b, c64(0), kvec, wt, "kat") as k0:
                    vecs = [_vload(b, _gep(b, rows[min(r, mr_ - 1)], k0), wty, 4)
                            for r in range(wt)]
                    d = _gep(b, dst, b.mul(k0, c64(mr_)))
                    for kk, col in enumerate(transpose(b, vecs)):
                        if wt != mr_:
                            col = b.shuffle_vector(col, ir.Constant(wty, ir.Undefined),
                                                   ir.Constant(ir.VectorType(I32, mr_),
                                                               list(range(mr_))))
                        _vstore(b, col, _gep(b, d, kk * mr_), 4)
                with loop(b, kvec, kc, 1, "ka") as k:
                    d = _gep(b, dst, b.mul(k, c64(mr_)))
                    for r in range(mr_):
                        b.store(b.load(_gep(b, rows[r], k), align=4), _gep(b, d, r), align=4)
            with otherwise:
                hm1 = b.sub(h, c64(1))
                rows = [
                    _gep(b, src, b.mul(smin(b, c64(r), hm1), rsa)) for r in range(mr_)
                ]
                valid = [b.icmp_signed("<", c64(r), h) for r in range(mr_)]
                with loop(b, c64(0), kc, 1, "kae") as k:
                    d = _gep(b, dst, b.mul(k, c64(mr_)))
                    kof = b.mul(k, csa)
                    for r in range(mr_):
                        x = b.load(_gep(b, rows[r], kof), align=4)
                        b.store(b.select(valid[r], x, zero), _gep(b, d, r), align=4)
    b.ret_void()
    return fn


def _emit_pack_b(module: ir.Module, name: str, cfg: GemmConfig) -> ir.Function:
    """``pack_b(kc, nc, B, rsb, csb, Bp)``: B[k, j] at ``B[k*rsb + j*csb]`` into
    NR-column slivers, ``Bp[s*kc*NR + k*NR + j]``.

    Full slivers of a row-major B (``csb == 1``) are copied with vector loads; full
    slivers of a column-major B (``rsb == 1``) with VW×VW in-register transposes (VW
    vector loads down VW columns, VW vector stores along packed rows); row-major edge
    slivers with lane-masked vector loads; other edges and strides element by element.
    """
    nr_, vw = cfg.nr, cfg.vw
    vty = ir.VectorType(F32, vw)
    pal = min(64, vw * 4)
    fn, b = _pack_function(module, f"{name}.pack_b")
    kc, nc, bm, rsb, csb, bp = fn.args
    vzero = ir.Constant(vty, 0.0)
    mload, _ = masked_load_store(module, vty)
    row_major = b.icmp_signed("==", csb, c64(1))
    col_major = b.icmp_signed("==", rsb, c64(1))
    kvec = b.mul(b.sdiv(kc, c64(vw)), c64(vw))
    with loop(b, c64(0), nc, nr_, "j0") as j0:
        w = smin(b, b.sub(nc, j0), c64(nr_))
        dst = _gep(b, bp, b.mul(j0, kc))  # (j0/NR)*kc*NR == j0*kc
        src = _gep(b, bm, b.mul(j0, csb))
        full = b.icmp_signed("==", w, c64(nr_))
        masks = _lane_masks(b, w, nr_ // vw, vw)
        with b.if_else(b.and_(full, row_major)) as (then, otherwise):
            with then, loop(b, c64(0), kc, 1, "kb") as k:
                s = _gep(b, src, b.mul(k, rsb))
                d = _gep(b, dst, b.mul(k, c64(nr_)))
                for v in range(nr_ // vw):
                    x = _vload(b, _gep(b, s, v * vw), vty, 4)
                    _vstore(b, x, _gep(b, d, v * vw), pal)
            with otherwise, b.if_else(b.and_(full, col_major)) as (tthen, tother):
                with tthen:
                    cols = [_gep(b, src, b.mul(c64(j), csb)) for j in range(nr_)]
                    with loop(b, c64(0), kvec, vw, "kt") as k0:
                        for g in range(nr_ // vw):
                            vecs = [_vload(b, _gep(b, cols[g * vw + j], k0), vty, 4)
                                    for j in range(vw)]
                            d = _gep(b, dst, b.add(b.mul(k0, c64(nr_)), c64(g * vw)))
                            for kk, row in enumerate(transpose(b, vecs)):
                                _vstore(b, row, _gep(b, d, kk * nr_), pal)
                    with loop(b, kvec, kc, 1, "ktr") as k:
                        d = _gep(b, dst, b.mul(k, c64(nr_)))
                        for j in range(nr_):
                            x = b.load(_gep(b, cols[j], k), align=4)
                            b.store(x, _gep(b, d, j), align=4)
                with tother, b.if_else(row_major) as (mthen, mother):
                    with mthen, loop(b, c64(0), kc, 1, "kbm") as k:
                        # A row-major edge sliver: lane-masked loads, zeros past w.
                        s = _gep(b, src, b.mul(k, rsb))
                        d = _gep(b, dst, b.mul(k, c64(nr_)))
                        for v in range(nr_ // vw):
                            x = b.call(mload, [_gep(b, s, v * vw), ir.Constant(I32, 4),
                                               masks[v], vzero])
                            _vstore(b, x, _gep(b, d, v * vw), pal)
                    with mother:
                        _pack_b_edge_scalar(b, kc, src, rsb, csb, dst, w, nr_)
    b.ret_void()
    return fn


def _pack_b_edge_scalar(b: ir.IRBuilder, kc: ir.Value, src: ir.Value, rsb: ir.Value,
                        csb: ir.Value, dst: ir.Value, w: ir.Value, nr_: int) -> None:
    """The first ``w`` columns of a sliver of any strides, element by element (zeros
    past ``w``)."""
    zero = ir.Constant(F32, 0.0)
    wm1 = b.sub(w, c64(1))
    cols = [b.mul(smin(b, c64(j), wm1), csb) for j in range(nr_)]
    valid = [b.icmp_signed("<", c64(j), w) for j in range(nr_)]
    with loop(b, c64(0), kc, 1, "kbe") as k:
        s = _gep(b, src, b.mul(k, rsb))
        d = _gep(b, dst, b.mul(k, c64(nr_)))
        for j in range(nr_):
            x = b.load(_gep(b, s, cols[j]), align=4)
            b.store(b.select(valid[j], x, zero), _gep(b, d, j), align=4)


def _emit_macro(module: ir.Module, name: str, cfg: GemmConfig, ukr: ir.Function) -> ir.Function:
    """``macro(mc, nc, kc, Ap, Bp, C, ldc, loadc)``: jr over NR slivers, ir over MR slivers."""
    mr_, nr_ = cfg.mr, cfg.nr
    fnty = ir.FunctionType(ir.VoidType(), [I64, I64, I64, F32P, F32P, F32P, I64, I1])
    fn = internal(ir.Function(module, fnty, name=f"{name}.macro"))
    mc, nc, kc, ap, bp, c, ldc, loadc = fn.args
    for a in (ap, bp, c):
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with loop(b, c64(0), nc, nr_, "jr") as jr:
        nr = smin(b, b.sub(nc, jr), c64(nr_))
        bsl = _gep(b, bp, b.mul(jr, kc))
        ccol = _gep(b, c, jr)
        with loop(b, c64(0), mc, mr_, "ir") as i_r:
            mr = smin(b, b.sub(mc, i_r), c64(mr_))
            asl = _gep(b, ap, b.mul(i_r, kc))
            ct = _gep(b, ccol, b.mul(i_r, ldc))
            b.call(ukr, [kc, asl, bsl, ct, ldc, mr, nr, loadc])
    b.ret_void()
    return fn


def _emit_zero(module: ir.Module, name: str) -> ir.Function:
    """``zero(M, N, C, ldc)``: C[:M, :N] = 0 row by row."""
    fnty = ir.FunctionType(ir.VoidType(), [I64, I64, F32P, I64])
    fn = internal(ir.Function(module, fnty, name=f"{name}.zero"), inline=False)
    m, n, c, ldc = fn.args
    memset = module.declare_intrinsic("llvm.memset", [I8P, I64])
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    nbytes = b.mul(n, c64(4))
    with loop(b, c64(0), m, 1, "zr") as i:
        row = b.bitcast(_gep(b, c, b.mul(i, ldc)), I8P)
        b.call(memset, [row, ir.Constant(I8, 0), nbytes, ir.Constant(I1, 0)])
    b.ret_void()
    return fn


def _early_exits(
    b: ir.IRBuilder, fn: ir.Function, m: ir.Value, n: ir.Value, k: ir.Value, c: ir.Value,
    ldc: ir.Value, acc: ir.Value, zero: ir.Function,
) -> None:
    """Return if M or N ≤ 0; if K ≤ 0 zero-fill C unless accumulating, then return."""
    empty = b.or_(b.icmp_signed("<=", m, c64(0)), b.icmp_signed("<=", n, c64(0)))
    with b.if_then(empty, likely=False):
        b.ret_void()
    with b.if_then(b.icmp_signed("<=", k, c64(0)), likely=False):
        with b.if_then(b.icmp_signed("==", acc, ir.Constant(I32, 0))):
            b.call(zero, [m, n, c, ldc])
        b.ret_void()


def _emit_pieces(
    module: ir.Module, name: str, cfg: GemmConfig
) -> tuple[ir.Function, ir.Function, ir.Function, ir.Function]:
    """The internal helpers every entry point shares: pack_a, pack_b, macro, zero."""
    ukr = _emit_ukr(module, name, cfg)
    pack_a = _emit_pack_a(module, name, cfg)
    pack_b = _emit_pack_b(module, name, cfg)
    macro = _emit_macro(module, name, cfg, ukr)
    zero = _emit_zero(module, name)
    return pack_a, pack_b, macro, zero


def emit_gemm_f32(
    module: ir.Module,
    name: str = "planner_sgemm",
    *,
    config: GemmConfig | None = None,
    threaded_entry_points: bool = False,
) -> ir.Function:
    """Add the packed GEMM ``name`` to ``module`` (plus ``name_pack_b``,
    ``name_prepacked`` and ``name_task`` with ``threaded_entry_points``, which doubles
    the compile time, ~0.25 → ~0.5 s).

    Returns the self-contained entry point
    ``void name(i64 M, i64 N, i64 K, float* A, i64 lda, float* B, i64 ldb, float* C,
    i64 ldc, i32 accumulate)``. ``config`` defaults to :meth:`GemmConfig.for_target` of the
    host.
    """
    cfg = config if config is not None else GemmConfig.for_target()
    pack_a, pack_b, macro, zero = _emit_pieces(module, name, cfg)
    core = _emit_core(module, name, cfg, pack_a, pack_b, macro)
    main = _emit_main(module, name, cfg, core, zero)
    if not threaded_entry_points:
        return main
    pack_full = _emit_pack_b_full(module, name, cfg, pack_b)
    prepacked = _emit_prepacked(module, name, cfg, pack_a, macro, zero)
    _emit_task(module, name, cfg, pack_full, prepacked)
    return main


def emit_gemm_f32_strided(
    module: ir.Module,
    name: str = "planner_sgemm_strided",
    *,
    config: GemmConfig | None = None, pack_counter: str | None = None,
) -> ir.Function:
    """Add the strided GEMM with caller-provided scratch to ``module`` and return it::

        void name(i64 M, i64 N, i64 K, float* A, i64 rsa, i64 csa, float* B, i64 rsb,
                  i64 csb, float* C, i64 ldc, i32 accumulate, float* scratch)

    ``A[i, k]`` is ``A[i*rsa + k*csa]`` and ``B[k, j]`` is ``B[k*rsb + j*csb]`` (any
    element strides, so transposed or column-major operands are packed directly, without a
    copy); C is row-major with row stride ``ldc``. ``scratch`` is 64-byte aligned and holds
    :meth:`GemmConfig.scratch_floats` ``(N)`` floats (:func:`emit_scratch_floats` computes
    it in IR); it is only used while the call runs, so one buffer serves every call of one
    thread. Same results, bit for bit, as :func:`emit_gemm_f32`'s entry point on the same
    values; with M == 0 or N == 0 nothing (scratch included) is touched.

    Also adds ``name_cached``: the same arguments plus ``i64* acache, i64* bcache``, pack
    caches (:func:`cache_table_i64` zeroed i64s each, or null) through which the packed
    blocks of A and panels of B are taken (:func:`_emit_cached_pack`): a caller that runs
    many tile products on the same read-only operands packs each block once per table
    lifetime instead of once per product. ``name`` is ``name_cached`` with null tables.
    ``pack_counter``: the name of an i64 module global that every packing adds the bytes
    of the source elements it packs to (a cache hit adds nothing).
    """
    cfg = config if config is not None else GemmConfig.for_target()
    pack_a, pack_b, macro, zero = _emit_pieces(module, name, cfg)
    core = _emit_core(module, name, cfg, pack_a, pack_b, macro, pack_counter)
    i64p = I64.as_pointer()
    base = [I64, I64, I64, F32P, I64, I64, F32P, I64, I64, F32P, I64, I32, F32P]
    names = ("M", "N", "K", "A", "rsa", "csa", "B", "rsb", "csb", "C", "ldc", "accumulate",
             "scratch", "acache", "bcache")
    cached = ir.Function(module, ir.FunctionType(ir.VoidType(), [*base, i64p, i64p]),
                         name=f"{name}_cached")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), base), name=name)
    for f in (cached, fn):
        f.attributes.add("nounwind")
        for nm, arg in zip(names, f.args, strict=False):
            arg.name = nm
    m, n, k, a, rsa, csa, bm, rsb, csb, c, ldc, acc, scratch, atab, btab = cached.args
    b = ir.IRBuilder(cached.append_basic_block("entry"))
    _early_exits(b, cached, m, n, k, c, ldc, acc, zero)
    bfl = _b_panel_floats(b, cfg, n)
    b.call(core, [m, n, k, a, rsa, csa, bm, rsb, csb, c, ldc, acc, scratch,
                  _gep(b, scratch, bfl), atab, btab])
    b.ret_void()
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(cached, [*fn.args, ir.Constant(i64p, None), ir.Constant(i64p, None)])
    b.ret_void()
    return fn


def _b_panel_floats(b: ir.IRBuilder, cfg: GemmConfig, n: ir.Value) -> ir.Value:
    """KC × min(NC, roundup(N, NR)): the packed B panel (IR twin of b_buffer_floats)."""
    npad = b.mul(b.sdiv(b.add(smax(b, n, c64(1)), c64(cfg.nr - 1)), c64(cfg.nr)),
                 c64(cfg.nr))
    return b.mul(c64(cfg.kc), smin(b, npad, c64(cfg.nc)))


def emit_scratch_floats(b: ir.IRBuilder, cfg: GemmConfig, n: ir.Value) -> ir.Value:
    """IR for :meth:`GemmConfig.scratch_floats` of the i64 ``n``."""
    return b.add(_b_panel_floats(b, cfg, n), c64(cfg.a_buffer_floats))


def _emit_core(
    module: ir.Module, name: str, cfg: GemmConfig, pack_a: ir.Function,
    pack_b: ir.Function, macro: ir.Function, pack_counter: str | None = None,
) -> ir.Function:
    """``core(M, N, K, A, rsa, csa, B, rsb, csb, C, ldc, acc, Bbuf, Abuf)``: the jc → pc →
    ic loops on M, N, K > 0 with caller-provided packing buffers (internal, inlined)."""
    i64p = I64.as_pointer()
    fnty = ir.FunctionType(
        ir.VoidType(),
        [I64, I64, I64, F32P, I64, I64, F32P, I64, I64, F32P, I64, I32, F32P, F32P, i64p,
         i64p],
    )
    fn = internal(ir.Function(module, fnty, name=f"{name}.core"))
    m, n, k, a, rsa, csa, bm, rsb, csb, c, ldc, acc, bbuf, abuf, atab, btab = fn.args
    get_a = _emit_cached_pack(module, name, cfg, pack_a, "a", pack_counter)
    get_b = _emit_cached_pack(module, name, cfg, pack_b, "b", pack_counter)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    acc_nz = b.icmp_signed("!=", acc, ir.Constant(I32, 0))
    with loop(b, c64(0), n, cfg.nc, "jc") as jc:
        nc = smin(b, b.sub(n, jc), c64(cfg.nc))
        bcol = _gep(b, bm, b.mul(jc, csb))
        with loop(b, c64(0), k, cfg.kc, "pc") as pc:
            kc = smin(b, b.sub(k, pc), c64(cfg.kc))
            bpan = b.call(get_b, [btab, kc, nc, _gep(b, bcol, b.mul(pc, rsb)), rsb, csb,
                                  bbuf])
            loadc = b.or_(acc_nz, b.icmp_signed(">", pc, c64(0)))
            acol = _gep(b, a, b.mul(pc, csa))
            with loop(b, c64(0), m, cfg.mc, "ic") as ic:
                mc = smin(b, b.sub(m, ic), c64(cfg.mc))
                ablk = b.call(get_a, [atab, mc, kc, _gep(b, acol, b.mul(ic, rsa)), rsa, csa,
                                      abuf])
                cblk = _gep(b, _gep(b, c, b.mul(ic, ldc)), jc)
                b.call(macro, [mc, nc, kc, ablk, bpan, cblk, ldc, loadc])
    b.ret_void()
    return fn


def _emit_cached_pack(module: ir.Module, name: str, cfg: GemmConfig, pack: ir.Function,
                      which: str, counter: str | None = None) -> ir.Function:
    """``float* get(i64* table, i64 d0, i64 d1, float* src, i64 rs, i64 cs,
    float* fallback)``: the packed block ``pack(d0, d1, src, rs, cs, ·)`` (``pack_a``:
    d0 × d1 = mc × kc; ``pack_b``: kc × nc).

    With a null ``table`` it packs into ``fallback`` and returns it. Otherwise ``table`` is
    a pack cache (:func:`cache_table_i64` i64s, zeroed before first use; see
    :data:`CACHE_SLOTS`): a slot whose key (src, rs, cs, d0, d1) matches returns its
    buffer without packing; else an empty slot, or the least (A) / most (B) recently used
    one of the slots in use (as many as :data:`CACHE_BUDGET_FLOATS` allows at this block
    size, at least one) is repacked,
    its buffer grown when too small (the old one given to, the new one taken from the
    module's :func:`buffer_pool`, which allocates when it has none large enough; a failure
    traps). Only for sources that no one writes while the table lives (the caller's
    promise): the key stands for the contents. :func:`emit_free_cache` gives the buffers
    back to the pool (``counter`` set: the pool counts its allocations). ``counter``: an i64 module
    global (made when missing) that each packing adds ``4 * d0 * d1`` to."""
    i64p = I64.as_pointer()
    fnty = ir.FunctionType(F32P, [i64p, I64, I64, F32P, I64, I64, F32P])
    fn = internal(ir.Function(module, fnty, name=f"{name}.cached_{which}"), inline=False)
    table, d0, d1, src, rs, cs, fallback = fn.args
    unit = cfg.mr if which == "a" else cfg.nr
    entry = fn.append_basic_block("entry")
    look = fn.append_basic_block("lookup")
    hit_blk = fn.append_basic_block("hit")
    miss_blk = fn.append_basic_block("miss")
    do_pack = fn.append_basic_block("pack")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_unsigned("==", table, ir.Constant(i64p, None)), do_pack, look)

    b.position_at_end(look)
    rows, cols = (d0, d1) if which == "a" else (d1, d0)  # slivers of `unit` along rows
    need = b.mul(b.mul(b.sdiv(b.add(rows, c64(unit - 1)), c64(unit)), c64(unit)), cols)
    need = b.and_(b.add(need, c64(15)), c64(-16))  # whole 64-byte lines
    slots = smin(b, c64(CACHE_SLOTS[which]),
                 smax(b, c64(1), b.sdiv(c64(CACHE_BUDGET_FLOATS[which]), need)))
    key = [b.ptrtoint(src, I64), rs, cs, d0, d1]
    clock = b.add(b.load(table), c64(1))
    b.store(clock, table)
    hit = b.alloca(I64, name="hit")
    victim = b.alloca(I64, name="victim")
    oldest = b.alloca(I64, name="oldest")
    b.store(c64(-1), hit)
    b.store(c64(0), victim)
    b.store(c64(-1 & ((1 << 63) - 1)), oldest)
    newest = b.alloca(I64, name="newest")  # (B) the most recently used slot
    latest = b.alloca(I64, name="latest")
    b.store(c64(0), newest)
    b.store(c64(-1), latest)

    def field(slot: ir.Value, f: int) -> ir.Value:
        return _gep(b, table, b.add(c64(_CACHE_HEADER), b.add(b.mul(slot, c64(_CACHE_SLOT)),
                                                               c64(f))))

    with loop(b, c64(0), slots, 1, "slot") as s:
        same = b.icmp_unsigned("!=", b.load(field(s, _BUF)), c64(0))
        for f, v in enumerate(key):
            same = b.and_(same, b.icmp_signed("==", b.load(field(s, f)), v))
        with b.if_then(same):
            b.store(s, hit)
        stamp = b.load(field(s, _STAMP))
        with b.if_then(b.icmp_signed("<", stamp, b.load(oldest))):
            b.store(stamp, oldest)
            b.store(s, victim)
        with b.if_then(b.icmp_signed(">", stamp, b.load(latest))):
            b.store(stamp, latest)
            b.store(s, newest)
    h = b.load(hit)
    b.cbranch(b.icmp_signed(">=", h, c64(0)), hit_blk, miss_blk)

    b.position_at_end(hit_blk)
    b.store(clock, field(h, _STAMP))
    b.ret(b.inttoptr(b.load(field(h, _BUF)), F32P))

    b.position_at_end(miss_blk)
    v = b.load(victim)
    if which == "b":  # full: replace the most recently used panel (see CACHE_SLOTS)
        v = b.select(b.icmp_signed("==", b.load(oldest), c64(0)), v, b.load(newest))
    with b.if_then(b.icmp_signed("<", b.load(field(v, _CAP)), need)):
        pool = buffer_pool(module, count_allocs=counter is not None)
        cap = field(v, _CAP)
        b.call(pool.give, [b.inttoptr(b.load(field(v, _BUF)), I8P),
                           b.mul(b.load(cap), c64(4))])
        b.store(c64(0), field(v, _BUF))
        raw = b.call(pool.take, [b.mul(need, c64(4)), cap])  # stores the bytes in cap
        b.store(b.ptrtoint(raw, I64), field(v, _BUF))
        b.store(b.sdiv(b.load(cap), c64(4)), cap)
    for f, x in enumerate(key):
        b.store(x, field(v, f))
    b.store(clock, field(v, _STAMP))
    dst_miss = b.inttoptr(b.load(field(v, _BUF)), F32P)
    miss_end = b.block
    b.branch(do_pack)

    b.position_at_end(do_pack)
    dst = b.phi(F32P)
    dst.add_incoming(fallback, entry)
    dst.add_incoming(dst_miss, miss_end)
    if counter is not None:
        if counter not in module.globals:
            g = ir.GlobalVariable(module, I64, counter)
            g.initializer = c64(0)
        b.atomic_rmw("add", module.globals[counter], b.mul(b.mul(d0, d1), c64(4)),
                     "monotonic")
    b.call(pack, [d0, d1, src, rs, cs, dst])
    b.ret(dst)
    return fn


#: Pack cache tables (``table`` of the ``_cached`` strided entry point): slots per table
#: (A blocks, B panels) and the floats of packed data a table keeps at most (at one block
#: size; the slots in use shrink as blocks grow). A 2048³ GEMM in 256³ tiles (instances
#: row by row on one worker) reuses 8 A blocks, each within one row of instances, and 64
#: B panels of 256 KiB, each once per row: A slots are replaced least recently used
#: first, B slots, once all are taken, most recently used first, since LRU would miss on
#: every panel of a cycle longer than the table (4096³: 256 panels, ~1/4 of them hit).
CACHE_SLOTS = {"a": 16, "b": 64}
CACHE_BUDGET_FLOATS = {"a": 2 << 20, "b": 6 << 20}
_CACHE_HEADER = 8  # i64s: [0] the access clock
_CACHE_SLOT = 8  # i64s per slot: src, rs, cs, d0, d1 (the key), stamp, cap, buf
_STAMP, _CAP, _BUF = 5, 6, 7


def cache_table_i64(which: str) -> int:
    """i64s of a pack cache table for ``which`` ("a" or "b")."""
    return _CACHE_HEADER + _CACHE_SLOT * CACHE_SLOTS[which]


def emit_free_cache(b: ir.IRBuilder, table: ir.Value, which: str) -> None:
    """Give every buffer of the pack cache ``table`` (i64*) back to the module's
    :func:`buffer_pool` (which keeps or frees it) and empty the table."""
    pool = buffer_pool(b.module)
    with loop(b, c64(0), c64(CACHE_SLOTS[which]), 1, f"free.{which}") as s:
        base = b.add(c64(_CACHE_HEADER), b.mul(s, c64(_CACHE_SLOT)))
        buf = _gep(b, table, b.add(base, c64(_BUF)))
        cap = _gep(b, table, b.add(base, c64(_CAP)))
        b.call(pool.give, [b.inttoptr(b.load(buf), I8P), b.mul(b.load(cap), c64(4))])
        b.store(c64(0), buf)
        b.store(c64(0), cap)


#: The per-module buffer pool (:func:`buffer_pool`): slots, and the bytes it retains at
#: most. A 2048³ GEMM in 256³ tiles takes ~20 MiB of pack-cache and scratch buffers per
#: worker and segment call, so 64 MiB keeps them for 2-3 workers; the rest are freed.
POOL_SLOTS = 256
POOL_BUDGET_BYTES = 64 << 20
#: Module globals of the pool: [2 * POOL_SLOTS] i64 (pointer, capacity in bytes; a null
#: pointer is a free slot), the bytes held (i64), the lock (i32, 0 free), and (only with
#: ``count_allocs``) the number of aligned_alloc calls ``take`` made (i64).
POOL_SLOTS_SYMBOL = "planner.pool.slots"
POOL_BYTES_SYMBOL = "planner.pool.bytes"
POOL_LOCK_SYMBOL = "planner.pool.lock"
POOL_ALLOCS_SYMBOL = "planner.pool.allocs"
#: ``void planner_pool_drain()``: frees every buffer the pool holds (exported).
POOL_DRAIN_SYMBOL = "planner_pool_drain"


@dataclass(frozen=True)
class BufferPool:
    """The functions of a module's buffer pool (:func:`buffer_pool`)."""

    take: ir.Function  # i8* take(i64 need_bytes, i64* cap_bytes_out)
    give: ir.Function  # void give(i8* ptr, i64 cap_bytes); a null ptr is ignored
    drain: ir.Function  # void planner_pool_drain()


def buffer_pool(module: ir.Module, count_allocs: bool | None = None) -> BufferPool:
    """The buffer pool of ``module`` (emitted on first use): large scratch buffers kept
    across calls, so that a segment call does not page-fault and zero ~20 MiB that glibc
    returned to the OS when the previous call freed them.

    ``take(need, cap_out)`` removes the smallest pooled buffer of at least ``need`` bytes
    (or allocates one with ``aligned_alloc(64, need)``; a failure traps) and stores its
    capacity in ``*cap_out``; ``give(ptr, cap)`` pools a buffer taken so, or frees it
    when every slot is taken or the pool would hold more than :data:`POOL_BUDGET_BYTES`;
    ``planner_pool_drain()`` frees all it holds (``compile_kernel`` calls it when the
    compiled code is discarded). Pool operations are rare (a few per segment call), so
    one spin lock (cmpxchg, ``sched_yield`` while taken) makes them thread-safe; the
    allocations and frees of ``take`` and ``give`` run outside it.
    ``count_allocs``: count ``take``'s allocations in :data:`POOL_ALLOCS_SYMBOL` (fixed
    when the pool is first emitted; None: as emitted, or not)."""
    names = (f"{POOL_SLOTS_SYMBOL}.take", f"{POOL_SLOTS_SYMBOL}.give", POOL_DRAIN_SYMBOL)
    if POOL_DRAIN_SYMBOL in module.globals:
        if count_allocs is not None and count_allocs != (POOL_ALLOCS_SYMBOL in module.globals):
            raise ValueError(f"buffer pool emitted with count_allocs={not count_allocs}")
        return BufferPool(*(module.get_global(n) for n in names))
    slots = ir.GlobalVariable(module, ir.ArrayType(I64, 2 * POOL_SLOTS), POOL_SLOTS_SYMBOL)
    slots.initializer = ir.Constant(ir.ArrayType(I64, 2 * POOL_SLOTS), None)
    slots.align = 64
    held = ir.GlobalVariable(module, I64, POOL_BYTES_SYMBOL)
    held.initializer = c64(0)
    lock = ir.GlobalVariable(module, I32, POOL_LOCK_SYMBOL)
    lock.initializer = ir.Constant(I32, 0)
    allocs = None
    if count_allocs:
        allocs = ir.GlobalVariable(module, I64, POOL_ALLOCS_SYMBOL)
        allocs.initializer = c64(0)
    free = declare_function(module, "free", ir.FunctionType(ir.VoidType(), [I8P]))
    alloc = declare_function(module, "aligned_alloc", ir.FunctionType(I8P, [I64, I64]))
    sched_yield = declare_function(module, "sched_yield", ir.FunctionType(I32, []))
    trap = module.declare_intrinsic("llvm.trap", fnty=ir.FunctionType(ir.VoidType(), []))
    i64p = I64.as_pointer()
    take = internal(ir.Function(module, ir.FunctionType(I8P, [I64, i64p]), names[0]),
                    inline=False)
    give = internal(ir.Function(module, ir.FunctionType(ir.VoidType(), [I8P, I64]), names[1]),
                    inline=False)
    drain = ir.Function(module, ir.FunctionType(ir.VoidType(), []), names[2])
    drain.attributes.add("nounwind")

    def slot(b: ir.IRBuilder, i: ir.Value, f: int) -> ir.Value:  # f: 0 pointer, 1 capacity
        return b.gep(slots, [c64(0), b.add(b.mul(i, c64(2)), c64(f))], inbounds=True)

    def acquire(b: ir.IRBuilder) -> None:
        spin = b.function.append_basic_block("lock.spin")
        wait = b.function.append_basic_block("lock.wait")
        held_blk = b.function.append_basic_block("lock.held")
        b.branch(spin)
        b.position_at_end(spin)
        got = b.extract_value(b.cmpxchg(lock, ir.Constant(I32, 0), ir.Constant(I32, 1),
                                        "acquire", "monotonic"), 1)
        b.cbranch(got, held_blk, wait)
        b.position_at_end(wait)
        b.call(sched_yield, [])
        b.branch(spin)
        b.position_at_end(held_blk)

    def release(b: ir.IRBuilder) -> None:
        b.store_atomic(ir.Constant(I32, 0), lock, "release", 4)

    # take: the best fit under the lock, else aligned_alloc outside it
    need, cap_out = take.args
    need.name, cap_out.name = "need", "cap_out"
    b = ir.IRBuilder(take.append_basic_block("entry"))
    best = b.alloca(I64, name="best")
    best_cap = b.alloca(I64, name="best_cap")
    b.store(c64(-1), best)
    b.store(c64(-1 & ((1 << 63) - 1)), best_cap)
    acquire(b)
    with loop(b, c64(0), c64(POOL_SLOTS), 1, "take") as i:
        cap = b.load(slot(b, i, 1))
        fits = b.and_(b.icmp_unsigned("!=", b.load(slot(b, i, 0)), c64(0)),
                      b.and_(b.icmp_signed(">=", cap, need),
                             b.icmp_signed("<", cap, b.load(best_cap))))
        with b.if_then(fits):
            b.store(i, best)
            b.store(cap, best_cap)
    hit = b.load(best)
    with b.if_else(b.icmp_signed(">=", hit, c64(0))) as (then, other):
        with then:
            ptr = b.load(slot(b, hit, 0))
            cap = b.load(slot(b, hit, 1))
            b.store(c64(0), slot(b, hit, 0))
            b.store(c64(0), slot(b, hit, 1))
            b.store(b.sub(b.load(held), cap), held)
            release(b)
            b.store(cap, cap_out)
            b.ret(b.inttoptr(ptr, I8P))
        with other:
            release(b)
    raw = b.call(alloc, [c64(64), need])
    with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(I8P, None)), likely=False):
        b.call(trap, [])
    if allocs is not None:
        b.atomic_rmw("add", allocs, c64(1), "monotonic")
    b.store(need, cap_out)
    b.ret(raw)

    # give: the first free slot if the budget allows, else free outside the lock
    ptr, cap = give.args
    ptr.name, cap.name = "ptr", "cap"
    b = ir.IRBuilder(give.append_basic_block("entry"))
    free_slot = b.alloca(I64, name="free_slot")
    b.store(c64(-1), free_slot)
    with b.if_then(b.icmp_unsigned("==", ptr, ir.Constant(I8P, None)), likely=False):
        b.ret_void()
    acquire(b)
    total = b.add(b.load(held), cap)
    with (b.if_then(b.icmp_signed("<=", total, c64(POOL_BUDGET_BYTES))),
          loop(b, c64(0), c64(POOL_SLOTS), 1, "give") as i):
        empty = b.and_(b.icmp_unsigned("==", b.load(slot(b, i, 0)), c64(0)),
                       b.icmp_signed("<", b.load(free_slot), c64(0)))
        with b.if_then(empty):
            b.store(i, free_slot)
    s = b.load(free_slot)
    with b.if_then(b.icmp_signed(">=", s, c64(0))):
        b.store(b.ptrtoint(ptr, I64), slot(b, s, 0))
        b.store(cap, slot(b, s, 1))
        b.store(total, held)
        release(b)
        b.ret_void()
    release(b)
    b.call(free, [ptr])
    b.ret_void()

    # drain: free everything (rare; under the lock)
    b = ir.IRBuilder(drain.append_basic_block("entry"))
    acquire(b)
    with loop(b, c64(0), c64(POOL_SLOTS), 1, "drain") as i:
        b.call(free, [b.inttoptr(b.load(slot(b, i, 0)), I8P)])
        b.store(c64(0), slot(b, i, 0))
        b.store(c64(0), slot(b, i, 1))
    b.store(c64(0), held)
    release(b)
    b.ret_void()
    return BufferPool(take, give, drain)


def _emit_main(
    module: ir.Module, name: str, cfg: GemmConfig, core: ir.Function, zero: ir.Function,
) -> ir.Function:
    fnty = ir.FunctionType(
        ir.VoidType(), [I64, I64, I64, F32P, I64, F32P, I64, F32P, I64, I32]
    )
    fn = ir.Function(module, fnty, name=name)
    fn.attributes.add("nounwind")
    m, n, k, a, lda, bm, ldb, c, ldc, acc = fn.args
    for nm, arg in zip(("M", "N", "K", "A", "lda", "B", "ldb", "C", "ldc", "accumulate"),
                       fn.args, strict=True):
        arg.name = nm
    aligned_alloc = declare_function(module, "aligned_alloc", ir.FunctionType(I8P, [I64, I64]))
    free = declare_function(module, "free", ir.FunctionType(ir.VoidType(), [I8P]))
    trap = module.declare_intrinsic("llvm.trap", fnty=ir.FunctionType(ir.VoidType(), []))

    b = ir.IRBuilder(fn.append_basic_block("entry"))
    _early_exits(b, fn, m, n, k, c, ldc, acc, zero)

    # Scratch: one KC×min(NC, roundup(N, NR)) panel of B and one MC×KC block of A.
    bfl = _b_panel_floats(b, cfg, n)
    nbytes = b.mul(b.add(bfl, c64(cfg.a_buffer_floats)), c64(4))
    raw = b.call(aligned_alloc, [c64(64), nbytes])
    with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(I8P, None)), likely=False):
        b.call(trap, [])
        b.unreachable()
    bbuf = b.bitcast(raw, F32P)
    b.call(core, [m, n, k, a, lda, c64(1), bm, ldb, c64(1), c, ldc, acc, bbuf,
                  _gep(b, bbuf, bfl), *[ir.Constant(I64.as_pointer(), None)] * 2])
    b.call(free, [raw])
    b.ret_void()
    return fn


def _emit_pack_b_full(
    module: ir.Module, name: str, cfg: GemmConfig, pack_b: ir.Function
) -> ir.Function:
    """``name_pack_b(K, ncols, B, ldb, Bp, npad, s0)``.

    Packs columns ``B[:, :ncols]`` (B already offset to the first column of the slice,
    which is sliver ``s0``) into the full packed layout: KC block ``p`` starts at
    ``Bp + p*KC*npad`` and its sliver ``s`` at ``+ s*kc_p*NR``.
    """
    fnty = ir.FunctionType(ir.VoidType(), [I64, I64, F32P, I64, F32P, I64, I64])
    fn = ir.Function(module, fnty, name=f"{name}_pack_b")
    fn.attributes.add("nounwind")
    k, ncols, bm, ldb, bp, npad, s0 = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with b.if_then(b.icmp_signed("<=", ncols, c64(0)), likely=False):
        b.ret_void()
    with loop(b, c64(0), k, cfg.kc, "pc") as pc:
        kc = smin(b, b.sub(k, pc), c64(cfg.kc))
        blk = _gep(b, bp, b.mul(pc, npad))
        dst = _gep(b, blk, b.mul(b.mul(s0, kc), c64(cfg.nr)))
        b.call(pack_b, [kc, ncols, _gep(b, bm, b.mul(pc, ldb)), ldb, c64(1), dst])
    b.ret_void()
    return fn


def _emit_prepacked(
    module: ir.Module, name: str, cfg: GemmConfig, pack_a: ir.Function,
    macro: ir.Function, zero: ir.Function,
) -> ir.Function:
    """``name_prepacked(M, N, K, A, lda, Bp, npad, s0, C, ldc, accumulate, Abuf)``.

    C[:M, :N] (+)= A[:M, :K] @ B[:, cols], where the N columns are slivers ``s0…`` of the
    fully packed B (see ``name_pack_b``); ``Abuf`` holds MC×KC floats.
    """
    fnty = ir.FunctionType(
        ir.VoidType(), [I64, I64, I64, F32P, I64, F32P, I64, I64, F32P, I64, I32, F32P]
    )
    fn = ir.Function(module, fnty, name=f"{name}_prepacked")
    fn.attributes.add("nounwind")
    m, n, k, a, lda, bp, npad, s0, c, ldc, acc, abuf = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    _early_exits(b, fn, m, n, k, c, ldc, acc, zero)
    acc_nz = b.icmp_signed("!=", acc, ir.Constant(I32, 0))
    with loop(b, c64(0), n, cfg.nc, "jc") as jc:
        nc = smin(b, b.sub(n, jc), c64(cfg.nc))
        sj = b.add(s0, b.sdiv(jc, c64(cfg.nr)))
        with loop(b, c64(0), k, cfg.kc, "pc") as pc:
            kc = smin(b, b.sub(k, pc), c64(cfg.kc))
            blk = _gep(b, bp, b.mul(pc, npad))
            bsl = _gep(b, blk, b.mul(b.mul(sj, kc), c64(cfg.nr)))
            loadc = b.or_(acc_nz, b.icmp_signed(">", pc, c64(0)))
            with loop(b, c64(0), m, cfg.mc, "ic") as ic:
                mc = smin(b, b.sub(m, ic), c64(cfg.mc))
                b.call(pack_a, [mc, kc, _gep(b, _gep(b, a, b.mul(ic, lda)), pc), lda, c64(1),
                                abuf])
                cblk = _gep(b, _gep(b, c, b.mul(ic, ldc)), jc)
                b.call(macro, [mc, nc, kc, abuf, bsl, cblk, ldc, loadc])
    b.ret_void()
    return fn


def _emit_spin_wait(module: ir.Module, name: str) -> ir.Function:
    """``i1 wait(i64* ctr, i64 target, i64 max_cycles)``: wait until ``*ctr >= target``
    (acquire load); false when ``max_cycles`` TSC cycles passed first.

    Spins with ``pause`` for the first ``_SPIN_ONLY_CYCLES``, then calls ``sched_yield``
    between checks, so that on an oversubscribed machine the thread we wait for can run
    on this core instead of us burning it.
    """
    fnty = ir.FunctionType(I1, [I64.as_pointer(), I64, I64])
    fn = internal(ir.Function(module, fnty, name=f"{name}.wait"), inline=False)
    ctr, target, max_cycles = fn.args
    rdtsc = declare_intrinsic(module, "llvm.readcyclecounter", [], I64, [])
    sched_yield = declare_function(module, "sched_yield", ir.FunctionType(I32, []))
    entry = fn.append_basic_block("entry")
    poll = fn.append_basic_block("loop")
    spin = fn.append_basic_block("spin")
    do_yield = fn.append_basic_block("yield")
    check = fn.append_basic_block("check")
    yes = fn.append_basic_block("yes")
    no = fn.append_basic_block("no")
    b = ir.IRBuilder(entry)
    t0 = b.call(rdtsc, [])
    b.branch(poll)
    b.position_at_end(poll)
    v = b.load_atomic(ctr, "acquire", 8)
    b.cbranch(b.icmp_signed(">=", v, target), yes, spin)
    b.position_at_end(spin)
    elapsed = b.sub(b.call(rdtsc, []), t0)
    b.cbranch(b.icmp_signed(">", elapsed, c64(_SPIN_ONLY_CYCLES)), do_yield, check)
    b.position_at_end(do_yield)
    b.call(sched_yield, [])
    b.branch(check)
    b.position_at_end(check)
    if host_target().x86:
        pause = declare_function(module, "llvm.x86.sse2.pause", ir.FunctionType(ir.VoidType(), []))
        b.call(pause, [])
    b.cbranch(b.icmp_signed(">", elapsed, max_cycles), no, poll)
    b.position_at_end(yes)
    b.ret(ir.Constant(I1, 1))
    b.position_at_end(no)
    b.ret(ir.Constant(I1, 0))
    return fn


def _emit_task(
    module: ir.Module, name: str, cfg: GemmConfig, pack_full: ir.Function,
    prepacked: ir.Function,
) -> ir.Function:
    """One thread's part of a threaded GEMM: dynamic chunks, synchronized without the GIL.

    ``i32 name_task(i64* sync, i64 max_cycles, i32 wait_done, i64 M, i64 N, i64 K,
    float* A, i64 lda, float* B, i64 ldb, float* Bp, i64 npad, float* C, i64 ldc,
    i32 accumulate, float* Abuf, i64 pack_cols, i64 chunk_m, i64 chunk_n)``

    ``sync`` is five zero-initialized i64 counters shared by all threads of one call:
    [0] next B-pack chunk, [1] B-pack chunks done, [2] next C chunk, [3] (unused),
    [4] C chunks done. A task claims chunks of ``pack_cols`` columns of B with an atomic
    fetch-add and packs them (``name_pack_b``) until none are left, spins until every
    chunk is packed, then claims ``chunk_m × chunk_n`` blocks of C and computes them
    (``name_prepacked``) until none are left. With ``wait_done`` it finally spins until
    every block is done. A thread that starts late simply finds less (or no) work, so no
    thread ever waits for one that has not started. Re-entrant: calling it again after a
    timeout resumes. Returns 0 when done, 1 when the pack spin timed out
    (``max_cycles`` TSC cycles), 2 when the final spin timed out.
    """
    i64p = I64.as_pointer()
    fnty = ir.FunctionType(
        I32,
        [i64p, I64, I32, I64, I64, I64, F32P, I64, F32P, I64, F32P, I64, F32P, I64, I32,
         F32P, I64, I64, I64],
    )
    fn = ir.Function(module, fnty, name=f"{name}_task")
    fn.attributes.add("nounwind")
    (sync, max_cycles, wait_done, m, n, k, a, lda, bm, ldb, bp, npad, c, ldc, acc, abuf,
     pack_cols, chunk_m, chunk_n) = fn.args
    spin_wait = _emit_spin_wait(module, name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctr = [_gep(b, sync, i) for i in range(5)]

    def ceil_div(x: ir.Value, y: ir.Value) -> ir.Value:
        return b.sdiv(b.add(x, b.sub(y, c64(1))), y)

    def claim_loop(counter: ir.Value, count: ir.Value, tag: str) -> Iterator[ir.Value]:
        """Yield claimed chunk indices q (< count) inside a loop body."""
        fn_ = b.function
        hdr = fn_.append_basic_block(f"{tag}.claim")
        body = fn_.append_basic_block(f"{tag}.body")
        end = fn_.append_basic_block(f"{tag}.end")
        b.branch(hdr)
        b.position_at_end(hdr)
        q = b.atomic_rmw("add", counter, c64(1), "monotonic")
        b.cbranch(b.icmp_signed("<", q, count), body, end)
        b.position_at_end(body)
        yield q
        b.branch(hdr)
        b.position_at_end(end)

    npack = ceil_div(n, pack_cols)
    for q in claim_loop(ctr[0], npack, "pack"):
        j0 = b.mul(q, pack_cols)
        ncols = smin(b, pack_cols, b.sub(n, j0))
        b.call(pack_full, [k, ncols, _gep(b, bm, j0), ldb, bp, npad, b.sdiv(j0, c64(cfg.nr))])
        b.atomic_rmw("add", ctr[1], c64(1), "release")
    with b.if_then(b.not_(b.call(spin_wait, [ctr[1], npack, max_cycles])), likely=False):
        b.ret(ir.Constant(I32, 1))

    cn = ceil_div(n, chunk_n)
    nchunks = b.mul(ceil_div(m, chunk_m), cn)
    for q in claim_loop(ctr[2], nchunks, "comp"):
        i0 = b.mul(b.sdiv(q, cn), chunk_m)
        j0 = b.mul(b.srem(q, cn), chunk_n)
        mc = smin(b, chunk_m, b.sub(m, i0))
        nc = smin(b, chunk_n, b.sub(n, j0))
        b.call(prepacked, [
            mc, nc, k, _gep(b, a, b.mul(i0, lda)), lda, bp, npad,
            b.sdiv(j0, c64(cfg.nr)), _gep(b, c, b.add(b.mul(i0, ldc), j0)), ldc, acc, abuf,
        ])
        b.atomic_rmw("add", ctr[4], c64(1), "release")
    # (the second condition is emitted inside the first block)
    with b.if_then(b.icmp_signed("!=", wait_done, ir.Constant(I32, 0))), b.if_then(
        b.not_(b.call(spin_wait, [ctr[4], nchunks, max_cycles])), likely=False
    ):
        b.ret(ir.Constant(I32, 2))
    b.ret(ir.Constant(I32, 0))
    return fn


# --------------------------------------------------------------------------------------
# numpy driver
# --------------------------------------------------------------------------------------

#: Budget (TSC cycles, ~10 ms) of the in-kernel waits of the threaded path, after which
#: the driver falls back to sleep-polling; the first ~20 us are pure spinning.
_SPIN_CYCLES = 1 << 25
_SPIN_ONLY_CYCLES = 1 << 16
_POLL_S = 50e-6
_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_I32 = ctypes.c_int32


def _ptr(x: np.ndarray) -> int:
    return int(x.__array_interface__["data"][0])


def _aligned_empty(nfloats: int) -> np.ndarray:
    """A 64-byte aligned float32 buffer of ``nfloats`` elements."""
    raw = np.empty(nfloats + 16, dtype=np.float32)
    off = (-_ptr(raw) % 64) // 4
    return raw[off : off + nfloats]


def _check_operand(x: Any, what: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise ValueError(f"sgemm: {what} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise ValueError(f"sgemm: {what} must have dtype float32, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"sgemm: {what} must be 2-D, got shape {x.shape}")
    if x.size == 0:  # never dereferenced; numpy may give such arrays any strides
        return x
    if x.shape[1] > 1 and x.strides[1] != 4:
        raise ValueError(
            f"sgemm: {what} must have unit inner stride (row-major rows), got strides "
            f"{x.strides}; pass np.ascontiguousarray({what}) instead"
        )
    if x.shape[0] > 1 and x.strides[0] % 4:
        raise ValueError(f"sgemm: {what} row stride {x.strides[0]} is not a multiple of 4")
    return x


def _poll_until(sync: np.ndarray, idx: int, target: int) -> None:
    """Sleep-poll until ``sync[idx] >= target`` (fallback after a spin timed out)."""
    while sync[idx] < target:
        time.sleep(_POLL_S)


class SgemmKernel:
    """A compiled :func:`emit_gemm_f32` module (through a :class:`JitCache`) + driver.

    ``kernel.sgemm(A, B, C=None, *, threads=1, accumulate=False)`` computes ``A @ B`` into
    ``C`` (allocated when ``None``) on float32 arrays with unit inner stride (any row
    strides, negative included). ``threads`` is an upper bound: problems under
    :attr:`min_parallel_flops` run on the calling thread, since a hand-off to a pool
    thread costs ~50–70 µs here. Thread-safe; the worker pool is created on the first
    multi-threaded call and reused.
    """

    #: Below this many flops (2·M·N·K) a multi-threaded call runs on one thread.
    min_parallel_flops: int = 2 * 320 * 320 * 320
    #: Work pieces per thread for the dynamic split of the threaded path.
    chunks_per_thread: int = 4

    def __init__(
        self,
        cache: JitCache | None = None,
        *,
        config: GemmConfig | None = None,
        target: TargetSpec | None = None,
        name: str = "planner_sgemm",
    ) -> None:
        self.config = config if config is not None else GemmConfig.for_target(target)
        module = ir.Module(name=f"{name}_module")
        emit_gemm_f32(module, name, config=self.config, threaded_entry_points=True)
        self.compiled: CompiledModule = compile_module(module, cache=cache, target=target)
        self._gemm = self.compiled.ctypes_function(
            name, None, [_I64, _I64, _I64, _P, _I64, _P, _I64, _P, _I64, _I32]
        )
        self._pack_b = self.compiled.ctypes_function(
            f"{name}_pack_b", None, [_I64, _I64, _P, _I64, _P, _I64, _I64]
        )
        self._task = self.compiled.ctypes_function(
            f"{name}_task",
            _I32,
            [_P, _I64, _I32, _I64, _I64, _I64, _P, _I64, _P, _I64, _P, _I64, _P, _I64, _I32,
             _P, _I64, _I64, _I64],
        )
        self._prepacked = self.compiled.ctypes_function(
            f"{name}_prepacked",
            None,
            [_I64, _I64, _I64, _P, _I64, _P, _I64, _I64, _P, _I64, _I32, _P],
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._pool_lock = threading.Lock()

    # -- pool -------------------------------------------------------------------------

    def _executor(self, workers: int) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None or self._pool_size < workers:
                old = self._pool
                self._pool = ThreadPoolExecutor(workers, thread_name_prefix="planner-sgemm")
                self._pool_size = workers
                if old is not None:
                    old.shutdown(wait=False)
            return self._pool

    def close(self) -> None:
        """Shut the worker pool down (the compiled code stays in the cache)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._pool = None
            self._pool_size = 0

    # -- entry point ------------------------------------------------------------------

    def sgemm(
        self,
        a: np.ndarray,
        b: np.ndarray,
        c: np.ndarray | None = None,
        *,
        threads: int = 1,
        accumulate: bool = False,
    ) -> np.ndarray:
        a = _check_operand(a, "A")
        b = _check_operand(b, "B")
        m, k = a.shape
        k2, n = b.shape
        if k != k2:
            raise ValueError(f"sgemm: shapes {a.shape} and {b.shape} are not aligned (K differs)")
        if c is None:
            if accumulate:
                raise ValueError("sgemm: accumulate=True needs an output array C")
            c = np.empty((m, n), dtype=np.float32)
        else:
            c = _check_operand(c, "C")
            if c.shape != (m, n):
                raise ValueError(f"sgemm: C has shape {c.shape}, expected {(m, n)}")
            if not c.flags.writeable:
                raise ValueError("sgemm: C is read-only")
            if m > 1 and abs(c.strides[0]) < 4 * n:
                raise ValueError(f"sgemm: rows of C overlap (row stride {c.strides[0]})")
            if m and n and (np.may_share_memory(c, a) or np.may_share_memory(c, b)):
                raise ValueError("sgemm: C must not overlap A or B")
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"sgemm: threads must be a positive int, got {threads!r}")
        if m == 0 or n == 0:
            return c
        lda, ldb, ldc = a.strides[0] // 4, b.strides[0] // 4, c.strides[0] // 4
        acc = 1 if accumulate else 0
        if threads == 1 or k == 0 or 2 * m * n * k < self.min_parallel_flops:
            self._gemm(m, n, k, _ptr(a), lda, _ptr(b), ldb, _ptr(c), ldc, acc)
            return c
        self._sgemm_threaded(a, b, c, m, n, k, lda, ldb, ldc, acc, threads)
        return c

    __call__ = sgemm

    def _sgemm_threaded(
        self, a: np.ndarray, b: np.ndarray, c: np.ndarray, m: int, n: int, k: int,
        lda: int, ldb: int, ldc: int, acc: int, threads: int,
    ) -> None:
        cfg = self.config
        nr, mr = cfg.nr, cfg.mr
        npad = _round_up(n, nr)
        bp = _aligned_empty(k * npad)
        # Work is cut into ~4 chunks per thread and claimed dynamically inside the
        # compiled code (name_task): B in column chunks, then C in row blocks (column
        # blocks when M is short). Chunks are whole MR/NR multiples, and every C element
        # is computed exactly as in the 1-thread path, so results are bit-identical.
        pieces = self.chunks_per_thread * threads
        pack_cols = _round_up(-(-n // pieces), nr)
        if m >= pieces * mr or m >= n:
            chunk_m, chunk_n = min(cfg.mc, _round_up(-(-m // pieces), mr)), npad
            if cfg.balance_rows:
                chunk_m = _balanced_chunk(m, mr, chunk_m, threads)
        else:
            chunk_m, chunk_n = m, _round_up(-(-n // pieces), nr)
        sync = np.zeros(5, dtype=np.int64)
        abufs = [_aligned_empty(cfg.a_buffer_floats) for _ in range(threads)]
        common = (m, n, k, _ptr(a), lda, _ptr(b), ldb, _ptr(bp), npad, _ptr(c), ldc, acc)
        npack = -(-n // pack_cols)
        nchunks = -(-m // chunk_m) * -(-n // chunk_n)
        psync = _ptr(sync)

        def task(t: int) -> None:
            # The closure keeps bp, abufs and sync alive until every task has returned.
            main = t == 0
            while True:
                status = self._task(psync, _SPIN_CYCLES, 1 if main else 0, *common,
                                    _ptr(abufs[t]), pack_cols, chunk_m, chunk_n)
                if status == 0:
                    return
                if status == 1:  # B chunks still being packed elsewhere: block, resume
                    _poll_until(sync, 1, npack)
                    continue
                _poll_until(sync, 4, nchunks)  # status 2: blocks still being computed
                return

        if threads > 1:
            pool = self._executor(threads - 1)
            for t in range(1, threads):
                pool.submit(task, t)
        # The caller works too and returns once every block of C is done; workers that
        # start late find no work left and return at once (nothing waits for them).
        task(0)

_default_kernel_state: dict[str, SgemmKernel] = {}
_default_kernel_lock = threading.Lock()


def default_sgemm_kernel() -> SgemmKernel:
    """The lazily created process-wide :class:`SgemmKernel` (default JIT cache, host)."""
    kern = _default_kernel_state.get("k")
    if kern is None:
        with _default_kernel_lock:
            kern = _default_kernel_state.get("k")
            if kern is None:
                kern = SgemmKernel()
                _default_kernel_state["k"] = kern
    return kern


def sgemm(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None = None,
    *,
    threads: int = 1,
    accumulate: bool = False,
) -> np.ndarray:
    """``C = A @ B`` (or ``C += A @ B``) for float32 arrays, via the default kernel."""
    return default_sgemm_kernel().sgemm(a, b, c, threads=threads, accumulate=accumulate)

