"""The native fast path of a steady-state kernel call (``CompiledKernel``).

A call whose arrays have exactly the shapes, byte strides, dtype objects and
writeability of an earlier, fully checked call needs none of the Python checks again:
the *gate*, a small JIT-compiled function shared by all kernels, compares each array's
``PyArrayObject`` fields (type, ``nd``, dimensions, strides, descr, the WRITEABLE flag)
with a per-signature context block, writes the data pointers into a stack array and
calls the kernel's segment functions, inline or (a segment split across workers) through
the native work pool (:mod:`planner.lower.cpu.workpool`), all in one ctypes call
(which releases the GIL).  It returns 0 when it ran and 1 when any field differs; the
caller then takes the ordinary checked path, so every error message is the ordinary
one.

The gate reads numpy's object layout directly (``PyObject_HEAD``, then ``data``,
``nd``, ``dimensions``, ``strides``, ``base``, ``descr``, ``flags``: stable since
numpy 1.7, also in 2.x).  :func:`gate` probes that layout on a few arrays first and
returns None (no fast path) when anything differs, e.g. on a free-threaded CPython
whose object header is larger.

Context block (``int64`` words): ``[type(ndarray), nparams, nsegments, syms, strides,
bufinfo]``, then per parameter ``[nd, id(dtype), needs_writeable, *dims, *byte_strides]``,
then per segment to run ``[function address, instances, helper workers, pieces]``
(:func:`~planner.lower.cpu.workpool.piece_count`).  The gate's
other arguments are the address table of the worker arenas (worker 0's first), the
global arena and the pool block (whose word ``workpool.RUN_WORD`` holds the pool's
run function).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from planner.lower.cpu import workpool

__all__ = ["MAX_ARITY", "context_block", "gate"]

#: kernels with more view parameters than this take the ordinary path
MAX_ARITY = 16
_WRITEABLE = 0x0400  # NPY_ARRAY_WRITEABLE
_OFF = {"type": 8, "data": 16, "nd": 24, "dims": 32, "strides": 40, "descr": 56,
        "flags": 64}

_GATE = r"""
define i64 @planner_gate(i64* %ctx, i8** %objs, i64* %arenas, i8* %garena, i64* %pool) {
entry:
  %arena.i = load i64, i64* %arenas
  %arena = inttoptr i64 %arena.i to i8*
  %tp = load i64, i64* %ctx
  %p1 = getelementptr i64, i64* %ctx, i64 1
  %np = load i64, i64* %p1
  %p2 = getelementptr i64, i64* %ctx, i64 2
  %ns = load i64, i64* %p2
  %p3 = getelementptr i64, i64* %ctx, i64 3
  %syms.i = load i64, i64* %p3
  %syms = inttoptr i64 %syms.i to i64*
  %p4 = getelementptr i64, i64* %ctx, i64 4
  %str.i = load i64, i64* %p4
  %str = inttoptr i64 %str.i to i64*
  %p5 = getelementptr i64, i64* %ctx, i64 5
  %tab.i = load i64, i64* %p5
  %tab = inttoptr i64 %tab.i to i64*
  %views = alloca i8*, i64 MAXP
  br label %ploop
ploop:
  %i = phi i64 [0, %entry], [%i1, %pdone]
  %c = phi i64 [6, %entry], [%cn, %pdone]
  %pend = icmp eq i64 %i, %np
  br i1 %pend, label %sloop, label %pbody
pbody:
  %opp = getelementptr i8*, i8** %objs, i64 %i
  %o = load i8*, i8** %opp
  %otp.p = getelementptr i8, i8* %o, i64 OFF_TYPE
  %otp.q = bitcast i8* %otp.p to i64*
  %otp = load i64, i64* %otp.q
  %oktp = icmp eq i64 %otp, %tp
  br i1 %oktp, label %pchk, label %fail
pchk:
  %nd.p = getelementptr i8, i8* %o, i64 OFF_ND
  %nd.q = bitcast i8* %nd.p to i32*
  %nd32 = load i32, i32* %nd.q
  %nd = sext i32 %nd32 to i64
  %end.p = getelementptr i64, i64* %ctx, i64 %c
  %end = load i64, i64* %end.p
  %c1 = add i64 %c, 1
  %ed.p = getelementptr i64, i64* %ctx, i64 %c1
  %ed = load i64, i64* %ed.p
  %c2 = add i64 %c, 2
  %ew.p = getelementptr i64, i64* %ctx, i64 %c2
  %ew = load i64, i64* %ew.p
  %d.p = getelementptr i8, i8* %o, i64 OFF_DESCR
  %d.q = bitcast i8* %d.p to i64*
  %d = load i64, i64* %d.q
  %f.p = getelementptr i8, i8* %o, i64 OFF_FLAGS
  %f.q = bitcast i8* %f.p to i32*
  %f = load i32, i32* %f.q
  %fw = and i32 %f, WRITEABLE
  %nowrite = icmp eq i32 %fw, 0
  %needw = icmp ne i64 %ew, 0
  %badw = and i1 %nowrite, %needw
  %okw = xor i1 %badw, true
  %oknd = icmp eq i64 %nd, %end
  %okd = icmp eq i64 %d, %ed
  %ok1 = and i1 %oknd, %okd
  %ok2 = and i1 %ok1, %okw
  br i1 %ok2, label %dinit, label %fail
dinit:
  %dims.p = getelementptr i8, i8* %o, i64 OFF_DIMS
  %dims.q = bitcast i8* %dims.p to i64**
  %dims = load i64*, i64** %dims.q
  %bs.p = getelementptr i8, i8* %o, i64 OFF_STRIDES
  %bs.q = bitcast i8* %bs.p to i64**
  %bs = load i64*, i64** %bs.q
  %c3 = add i64 %c, 3
  br label %dloop
dloop:
  %k = phi i64 [0, %dinit], [%k1, %dbody]
  %dend = icmp eq i64 %k, %nd
  br i1 %dend, label %pdone, label %dbody
dbody:
  %gd.p = getelementptr i64, i64* %dims, i64 %k
  %gd = load i64, i64* %gd.p
  %wd.i = add i64 %c3, %k
  %wd.p = getelementptr i64, i64* %ctx, i64 %wd.i
  %wd = load i64, i64* %wd.p
  %gs.p = getelementptr i64, i64* %bs, i64 %k
  %gs = load i64, i64* %gs.p
  %ws.i = add i64 %wd.i, %nd
  %ws.p = getelementptr i64, i64* %ctx, i64 %ws.i
  %ws = load i64, i64* %ws.p
  %k1 = add i64 %k, 1
  %okdd = icmp eq i64 %gd, %wd
  %okss = icmp eq i64 %gs, %ws
  %okk = and i1 %okdd, %okss
  br i1 %okk, label %dloop, label %fail
pdone:
  %data.p = getelementptr i8, i8* %o, i64 OFF_DATA
  %data.q = bitcast i8* %data.p to i8**
  %data = load i8*, i8** %data.q
  %vp = getelementptr i8*, i8** %views, i64 %i
  store i8* %data, i8** %vp
  %i1 = add i64 %i, 1
  %nd2 = shl i64 %nd, 1
  %cn = add i64 %c3, %nd2
  br label %ploop
sloop:
  %j = phi i64 [0, %ploop], [%j1, %snext]
  %cs = phi i64 [%c, %ploop], [%cs4, %snext]
  %send = icmp eq i64 %j, %ns
  br i1 %send, label %done, label %sbody
sbody:
  %fn.p = getelementptr i64, i64* %ctx, i64 %cs
  %fn.i = load i64, i64* %fn.p
  %fn = inttoptr i64 %fn.i to void (i64, i64, i64*, i8**, i64*, i8*, i8*, i64*)*
  %cs1 = add i64 %cs, 1
  %n.p = getelementptr i64, i64* %ctx, i64 %cs1
  %n = load i64, i64* %n.p
  %cs2 = add i64 %cs, 2
  %h.p = getelementptr i64, i64* %ctx, i64 %cs2
  %helpers = load i64, i64* %h.p
  %split = icmp sgt i64 %helpers, 0
  br i1 %split, label %spool, label %sinline
sinline:
  call void %fn(i64 0, i64 %n, i64* %syms, i8** %views, i64* %str, i8* %arena,
                i8* %garena, i64* %tab)
  br label %snext
spool:
  %run.p = getelementptr i64, i64* %pool, i64 POOL_RUN
  %run.i = load i64, i64* %run.p
  %run = inttoptr i64 %run.i to i64 (i64*, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                                     i64)*
  %cs3p = add i64 %cs, 3
  %pieces.p = getelementptr i64, i64* %ctx, i64 %cs3p
  %pieces = load i64, i64* %pieces.p
  %syms.w = ptrtoint i64* %syms to i64
  %views.w = ptrtoint i8** %views to i64
  %str.w = ptrtoint i64* %str to i64
  %ar.w = ptrtoint i64* %arenas to i64
  %ga.w = ptrtoint i8* %garena to i64
  %tab.w = ptrtoint i64* %tab to i64
  %taken = call i64 %run(i64* %pool, i64 %fn.i, i64 %n, i64 %pieces, i64 %helpers,
                         i64 %syms.w, i64 %views.w, i64 %str.w, i64 %ar.w, i64 %ga.w,
                         i64 %tab.w)
  br label %snext
snext:
  %cs4 = add i64 %cs, 4
  %j1 = add i64 %j, 1
  br label %sloop
done:
  ret i64 0
fail:
  ret i64 1
}
"""


def _wrapper(n: int) -> str:
    """``planner_gate_<n>(ctx, arenas, garena, pool, a0 .. a<n-1>)``: the arrays as
    arguments."""
    args = ", ".join(f"i8* %a{i}" for i in range(n))
    lines = [f"define i64 @planner_gate_{n}(i64* %ctx, i64* %arenas, i8* %garena, "
             f"i64* %pool, {args}) {{",
             "entry:", f"  %objs = alloca i8*, i64 {n}"]
    for i in range(n):
        lines += [f"  %s{i} = getelementptr i8*, i8** %objs, i64 {i}",
                  f"  store i8* %a{i}, i8** %s{i}"]
    lines += ["  %r = call i64 @planner_gate(i64* %ctx, i8** %objs, i64* %arenas, "
              "i8* %garena, i64* %pool)", "  ret i64 %r", "}"]
    return "\n".join(lines)


def _module_text() -> str:
    text = (_GATE.replace("MAXP", str(MAX_ARITY)).replace("WRITEABLE", str(_WRITEABLE))
            .replace("POOL_RUN", str(workpool.RUN_WORD)))
    for key, off in _OFF.items():
        text = text.replace(f"OFF_{key.upper()}", str(off))
    return "\n".join(["; planner call gate", text,
                      *(_wrapper(n) for n in range(1, MAX_ARITY + 1))]) + "\n"


def _layout_matches() -> bool:
    """Whether numpy's ``PyArrayObject`` fields sit where the gate reads them."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    ptr, i32, i64 = (ctypes.c_void_p.from_address, ctypes.c_int32.from_address,
                     ctypes.c_int64.from_address)
    base = np.arange(60, dtype=np.float64)
    ro = np.zeros((2, 3), np.int32)
    ro.flags.writeable = False
    probes = [np.zeros((3, 5), np.float32), base[::2], base.reshape(3, 4, 5).transpose(2, 0, 1),
              ro, np.zeros((1,), np.int8)]
    for a in probes:
        at = id(a)
        if (ptr(at + _OFF["type"]).value != id(np.ndarray)
                or ptr(at + _OFF["data"]).value != a.ctypes.data
                or i32(at + _OFF["nd"]).value != a.ndim
                or ptr(at + _OFF["descr"]).value != id(a.dtype)
                or bool(i32(at + _OFF["flags"]).value & _WRITEABLE) != a.flags.writeable):
            return False
        dims, strides = ptr(at + _OFF["dims"]).value, ptr(at + _OFF["strides"]).value
        if (tuple(i64(dims + 8 * k).value for k in range(a.ndim)) != a.shape
                or tuple(i64(strides + 8 * k).value for k in range(a.ndim)) != a.strides):
            return False
    return True


_state: dict[str, Any] = {}
_lock = threading.Lock()


def gate(arity: int) -> Any | None:
    """The ctypes gate for kernels of ``arity`` view parameters, or None when there is
    no fast path (too many parameters, an unexpected numpy layout, or
    ``PLANNER_FAST_CALL=0``)."""
    if not 1 <= arity <= MAX_ARITY:
        return None
    with _lock:
        if "module" not in _state:
            _state["module"] = _build()
        module = _state["module"]
        if module is None:
            return None
        fns: dict[int, Any] = _state.setdefault("fns", {})
        fn = fns.get(arity)
        if fn is None:
            p = ctypes.c_void_p
            fn = fns[arity] = module.ctypes_function(f"planner_gate_{arity}", ctypes.c_int64,
                                                     [p] * (4 + arity))
        return fn


def _build() -> Any | None:
    import os

    if os.environ.get("PLANNER_FAST_CALL", "1").strip().lower() in ("0", "off", "no"):
        return None
    if not _layout_matches():
        return None
    from planner.lower.cpu.jit import compile_module

    return compile_module(_module_text(), disk=False)  # tiny: never in the disk cache


def context_block(arrays: Sequence[np.ndarray], writes: Sequence[bool], syms: int,
                  strides: int, table: int, segments: Sequence[tuple[int, int, int, int]]
                  ) -> np.ndarray:
    """The gate's context block for a call with exactly these arrays (see the module
    docstring); ``segments`` are (function address, instances, helper workers, pieces
    per worker) of the segments to run (0 helpers: inline on the calling thread)."""
    words = [id(np.ndarray), len(arrays), len(segments), syms, strides, table]
    for a, w in zip(arrays, writes, strict=True):
        words += [a.ndim, id(a.dtype), int(w), *a.shape, *a.strides]
    for fn, n, helpers, per in segments:
        words += [fn, n, helpers, workpool.piece_count(n, helpers + 1, per)]
    return np.array(words, dtype=np.int64)
