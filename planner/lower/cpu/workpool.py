"""The native worker pool that runs a parallel segment's instances on several threads.

A split segment used to hand its pieces to a ``ThreadPoolExecutor``: waking a parked
Python thread and collecting its future cost ~150-200 µs per call on this VM, more than
a 0.5 ms kernel gains from its second core.  Here the hand-off is native: the workers
are Python threads parked inside a JIT-compiled loop (a ctypes call, so without the
GIL) that spins on a shared *generation* word, and the caller publishes a job and takes
pieces itself in one ctypes call, so a call whose workers are spinning starts them in
well under a microsecond.  A worker that saw no job for ``PLANNER_SPIN_US`` (default
1,000 µs) returns to Python and sleeps on a condition variable until the next job; that
first job after an idle spell pays the old wake-up, and its caller does not wait for
sleepers: it takes whatever pieces are left itself.

The pool block (``int64`` words, each counter on its own cache line)::

    0  generation   even: the job in the fields is published; odd: the caller rewrites it
    8  active       workers that entered the current job
    16 next         the next piece to take (fetch-add)
    24 done         pieces finished
    32 stop         1: workers return
    40 fn, n, pieces, helpers, syms, views, strides, arenas, garena, table
    56 the address of planner_pool_run (so native callers need only the block)

A worker enters a job by incrementing ``active`` and re-reading the generation (both
sequentially consistent); the caller makes the generation odd before it waits for
``active`` to drain and rewrites the fields, so no worker reads a job half-written
(Dekker's argument: either the caller sees the worker's increment or the worker sees
the odd generation).  Piece ``j`` of ``pieces`` covers instances
``[n*j // pieces, n*(j+1) // pieces)``; workers with index above ``helpers`` stay out, so
a call never uses more threads than it asked for.  Only one job runs at a time: a call
that finds the pool busy (another Python thread's kernel) runs its segment alone.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
import time
from typing import Any

import numpy as np

__all__ = ["WorkPool", "piece_count", "shared_pool", "shutdown", "started_threads"]

_WORDS = 64
_GEN, _STOP = 0, 32
#: the pool block's word that holds the address of ``planner_pool_run`` (for the gate)
RUN_WORD = 56
#: pieces per worker of a split segment (dynamic assignment; a piece costs one call)
PIECES_PER_WORKER = 4

_IR = r"""
; planner native work pool
RELAX_DECL

define internal void @relax() {
  RELAX_CALL
  ret void
}

define internal i64* @word(i64* %pool, i64 %i) alwaysinline {
  %p = getelementptr i64, i64* %pool, i64 %i
  ret i64* %p
}

define internal i64 @field(i64* %pool, i64 %i) alwaysinline {
  %p = getelementptr i64, i64* %pool, i64 %i
  %v = load i64, i64* %p
  ret i64 %v
}

; take pieces of the published job until none is left, with worker %idx's arena;
; returns how many it took
define internal i64 @take(i64* %pool, i64 %idx) {
entry:
  %fn.i = call i64 @field(i64* %pool, i64 40)
  %fn = inttoptr i64 %fn.i to void (i64, i64, i8*, i8*, i8*, i8*, i8*, i8*)*
  %n = call i64 @field(i64* %pool, i64 41)
  %pieces = call i64 @field(i64* %pool, i64 42)
  %syms.i = call i64 @field(i64* %pool, i64 44)
  %syms = inttoptr i64 %syms.i to i8*
  %views.i = call i64 @field(i64* %pool, i64 45)
  %views = inttoptr i64 %views.i to i8*
  %str.i = call i64 @field(i64* %pool, i64 46)
  %str = inttoptr i64 %str.i to i8*
  %ar.i = call i64 @field(i64* %pool, i64 47)
  %ar = inttoptr i64 %ar.i to i64*
  %ga.i = call i64 @field(i64* %pool, i64 48)
  %ga = inttoptr i64 %ga.i to i8*
  %tab.i = call i64 @field(i64* %pool, i64 49)
  %tab = inttoptr i64 %tab.i to i8*
  %myar.p = getelementptr i64, i64* %ar, i64 %idx
  %myar.i = load i64, i64* %myar.p
  %myar = inttoptr i64 %myar.i to i8*
  %next = call i64* @word(i64* %pool, i64 16)
  %done = call i64* @word(i64* %pool, i64 24)
  br label %loop
loop:
  %taken = phi i64 [0, %entry], [%taken1, %run]
  %j = atomicrmw add i64* %next, i64 1 seq_cst
  %more = icmp slt i64 %j, %pieces
  br i1 %more, label %run, label %out
run:
  %nj = mul i64 %n, %j
  %lo = udiv i64 %nj, %pieces
  %nj1 = add i64 %nj, %n
  %hi = udiv i64 %nj1, %pieces
  call void %fn(i64 %lo, i64 %hi, i8* %syms, i8* %views, i8* %str, i8* %myar, i8* %ga,
                i8* %tab)
  %d = atomicrmw add i64* %done, i64 1 seq_cst
  %taken1 = add i64 %taken, 1
  br label %loop
out:
  ret i64 %taken
}

; a worker's loop: returns the last generation it saw after %spins idle checks, -1 on stop
define i64 @planner_pool_work(i64* %pool, i64 %idx, i64 %seen0, i64 %spins) {
entry:
  %genp = call i64* @word(i64* %pool, i64 0)
  %actp = call i64* @word(i64* %pool, i64 8)
  %stopp = call i64* @word(i64* %pool, i64 32)
  br label %wait
wait:
  %seen = phi i64 [%seen0, %entry], [%seen, %idle], [%seen, %raced], [%g, %left]
  %k = phi i64 [0, %entry], [%k1, %idle], [%k, %raced], [0, %left]
  %stop = load atomic i64, i64* %stopp seq_cst, align 8
  %stopped = icmp ne i64 %stop, 0
  br i1 %stopped, label %quit, label %look
look:
  %g = load atomic i64, i64* %genp seq_cst, align 8
  %odd.b = and i64 %g, 1
  %even = icmp eq i64 %odd.b, 0
  %new = icmp ne i64 %g, %seen
  %go = and i1 %even, %new
  br i1 %go, label %enter, label %idle
idle:
  %k1 = add i64 %k, 1
  %tired = icmp sge i64 %k1, %spins
  call void @relax()
  br i1 %tired, label %sleep, label %wait
sleep:
  ret i64 %seen
enter:
  %a0 = atomicrmw add i64* %actp, i64 1 seq_cst
  %g2 = load atomic i64, i64* %genp seq_cst, align 8
  %same = icmp eq i64 %g2, %g
  br i1 %same, label %inside, label %raced
raced:
  %a1 = atomicrmw sub i64* %actp, i64 1 seq_cst
  br label %wait
inside:
  %helpers = call i64 @field(i64* %pool, i64 43)
  %wanted = icmp sle i64 %idx, %helpers
  br i1 %wanted, label %work, label %left
work:
  %mine = call i64 @take(i64* %pool, i64 %idx)
  br label %left
left:
  %a2 = atomicrmw sub i64* %actp, i64 1 seq_cst
  br label %wait
quit:
  ret i64 -1
}

; the caller: publish a job, take pieces as worker 0, wait until every piece is done;
; returns how many pieces the caller took itself
define i64 @planner_pool_run(i64* %pool, i64 %fn, i64 %n, i64 %pieces, i64 %helpers,
                              i64 %syms, i64 %views, i64 %str, i64 %arenas, i64 %garena,
                              i64 %table) {
entry:
  %genp = call i64* @word(i64* %pool, i64 0)
  %actp = call i64* @word(i64* %pool, i64 8)
  %nextp = call i64* @word(i64* %pool, i64 16)
  %donep = call i64* @word(i64* %pool, i64 24)
  %g = load atomic i64, i64* %genp monotonic, align 8
  %godd = add i64 %g, 1
  store atomic i64 %godd, i64* %genp seq_cst, align 8
  br label %drain
drain:
  %a = load atomic i64, i64* %actp seq_cst, align 8
  %idle = icmp eq i64 %a, 0
  br i1 %idle, label %publish, label %drainwait
drainwait:
  call void @relax()
  br label %drain
publish:
PUBLISH
  store atomic i64 0, i64* %nextp seq_cst, align 8
  store atomic i64 0, i64* %donep seq_cst, align 8
  %geven = add i64 %g, 2
  store atomic i64 %geven, i64* %genp seq_cst, align 8
  %taken = call i64 @take(i64* %pool, i64 0)
  br label %finish
finish:
  %d = load atomic i64, i64* %donep seq_cst, align 8
  %all = icmp eq i64 %d, %pieces
  br i1 %all, label %out, label %finishwait
finishwait:
  call void @relax()
  br label %finish
out:
  ret i64 %taken
}
"""


def piece_count(n: int, chunks: int, per_worker: int = PIECES_PER_WORKER) -> int:
    """How many pieces ``n`` instances split on ``chunks`` threads are cut into: up to
    ``per_worker`` per thread.  A segment asking for one contiguous piece per thread (it
    keeps packed GEMM blocks across consecutive instances) still gets one piece per
    instance when it has at most :data:`PIECES_PER_WORKER` instances per thread: a few
    instances of unequal work (edge tiles) balance only when taken one at a time (a
    300x200 GEMM's six 128x128 tiles cut 70/30 into two halves), and a few instances
    reuse few packs."""
    if chunks <= 1 or n <= 0:
        return max(0, min(n, 1))
    per = max(1, per_worker)
    if per == 1 and n <= chunks * PIECES_PER_WORKER:
        return n
    return min(n, chunks * per)


def _relax() -> tuple[str, str]:
    """The spin-wait hint of the host: x86 ``pause``, AArch64 ``yield``, else nothing."""
    import llvmlite.binding as llvm

    triple = llvm.get_process_triple()
    if triple.startswith(("x86_64", "i386", "i686")):
        return "declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"
    if triple.startswith(("aarch64", "arm64")):
        return "declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)"
    return "", ""


#: the job's fields, in the pool block from word 40 (the caller's arguments of that name)
_JOB = ("fn", "n", "pieces", "helpers", "syms", "views", "str", "arenas", "garena", "table")


def _module_text() -> str:
    decl, call = _relax()
    publish = "\n".join(f"  %f.{name} = call i64* @word(i64* %pool, i64 {40 + k})\n"
                         f"  store i64 %{name}, i64* %f.{name}"
                         for k, name in enumerate(_JOB))
    return (_IR.replace("RELAX_DECL", decl).replace("RELAX_CALL", call)
            .replace("PUBLISH", publish))


def _spin_us() -> float:
    try:
        return max(0.0, float(os.environ.get("PLANNER_SPIN_US", "1000")))
    except ValueError:
        return 1000.0


class WorkPool:
    """Worker threads that run a segment's pieces with the caller (see the module doc)."""

    def __init__(self) -> None:
        from planner.lower.cpu.jit import compile_module

        self._module = compile_module(_module_text(), disk=False)
        p, i64 = ctypes.c_void_p, ctypes.c_int64
        self._run = self._module.ctypes_function("planner_pool_run", i64,
                                                 [p, p, i64, i64, i64, p, p, p, p, p, p])
        self._work = self._module.ctypes_function("planner_pool_work", i64, [p, i64, i64, i64])
        raw = np.zeros(_WORDS + 8, dtype=np.int64)
        shift = (-raw.ctypes.data % 64) // 8
        self._block = raw[shift:shift + _WORDS]
        self._addr = self._block.ctypes.data
        self._block[RUN_WORD] = self._module.address("planner_pool_run")
        self._busy = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._wakes = 0  # bumped (under _cond) before every job: parked workers rejoin
        self._parked = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._spins = self._calibrate(_spin_us())

    def _calibrate(self, micros: float) -> int:
        """How many idle checks of a worker's loop take ``micros`` on this machine."""
        if micros <= 0:
            return 1
        probe = np.zeros(_WORDS + 8, dtype=np.int64)
        at = probe.ctypes.data + (-probe.ctypes.data % 64)
        n = 20_000
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            self._work(at, 1, 0, n)
            best = min(best, time.perf_counter() - t0)
        per = max(best / n, 1e-9)
        return max(1, int(micros * 1e-6 / per))

    @property
    def threads(self) -> int:
        """How many worker threads are running (the caller of a job is not one)."""
        return sum(t.is_alive() for t in self._threads)

    def _ensure(self, helpers: int) -> None:
        while len(self._threads) < helpers:
            idx = len(self._threads) + 1
            t = threading.Thread(target=self._serve, args=(idx,), daemon=True,
                                 name=f"planner-cpu-{idx}")
            self._threads.append(t)
            t.start()

    def _serve(self, idx: int) -> None:
        seen = int(self._block[_GEN]) & ~1
        woken = self._wakes
        while True:
            seen = self._work(self._addr, idx, seen, self._spins)
            if seen < 0:
                return
            with self._cond:
                self._parked += 1
                while self._wakes == woken and not self._stopping:
                    self._cond.wait()
                self._parked -= 1
                woken = self._wakes
                if self._stopping:
                    return

    @property
    def address(self) -> int:
        """The pool block's address (what native callers of a job pass)."""
        return self._addr

    def enter(self, helpers: int) -> bool:
        """Reserve the pool for one call whose jobs use up to ``helpers`` workers and
        wake them; False (nothing reserved) when another call holds it.  Pair with
        :meth:`leave`."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            self._ensure(helpers)
            with self._cond:
                self._wakes += 1
                if self._parked:
                    self._cond.notify_all()
        except BaseException:
            self._busy.release()
            raise
        return True

    def leave(self) -> None:
        self._busy.release()

    def run(self, fn: int, n: int, chunks: int, base: tuple[int, int, int],
            arenas: int, tail: tuple[int, int], alone: Any,
            per_worker: int = PIECES_PER_WORKER) -> bool:
        """Run instances ``[0, n)`` of the segment function at address ``fn`` on up to
        ``chunks`` threads (the caller is one), in up to ``per_worker`` contiguous pieces
        per thread; ``arenas`` is the address of an
        ``int64`` array of at least ``chunks`` worker arenas.  When the pool is busy,
        ``alone()`` runs the whole segment on the calling thread instead.  Whether a
        worker took a piece (False: the caller ran everything itself)."""
        if chunks <= 1 or not self.enter(chunks - 1):
            alone()
            return False
        try:
            pieces = piece_count(n, chunks, per_worker)
            mine = self._run(self._addr, fn, n, pieces, chunks - 1, *base, arenas, *tail)
        finally:
            self.leave()
        return mine < pieces

    def stop(self) -> None:
        """Stop and join every worker thread (the pool cannot run jobs afterwards)."""
        with self._busy:
            self._block[_STOP] = 1
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            for t in self._threads:
                t.join()
            self._threads.clear()


_state: dict[str, WorkPool] = {}
_lock = threading.Lock()


def shared_pool() -> WorkPool:
    """The process's pool (created on first use)."""
    with _lock:
        pool = _state.get("pool")
        if pool is None:
            pool = _state["pool"] = WorkPool()
        return pool


def started_threads() -> int:
    """How many worker threads the shared pool runs (0 before its first split job)."""
    with _lock:
        pool = _state.get("pool")
    return pool.threads if pool is not None else 0


def shutdown() -> None:
    """Stop and join the shared pool's threads; the next split job starts a new pool."""
    with _lock:
        pool = _state.pop("pool", None)
    if pool is not None:
        pool.stop()


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: forget the pool (and a lock
    another thread may have held at the fork) so the child starts its own."""
    global _lock
    _lock = threading.Lock()
    _state.pop("pool", None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
# the workers run JIT code: stop them before the interpreter frees the engine
atexit.register(shutdown)
