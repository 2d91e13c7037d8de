"""planner's compiled CPU kernels against what a user would pick instead.

Run from the repository root (peers: ``pip install -e '.[bench]'``)::

    python bench/peers.py            # 1 and 2 threads, about 10 minutes
    python bench/peers.py --quick    # smaller sizes, fewer rounds
    python bench/peers.py --only layernorm --only gelu   # rows whose name has either

Kernels: row softmax and layernorm (1024×4096 and 4096×4096), GELU-tanh (16M), GEMM
(n = 1024 and 2048), attention (L = S = 1024 and 2048, D = 64), and the awkward edge
sizes (GEMM 300×200×130, softmax 37×1000, attention 100×77). Peers: numpy (OpenBLAS for
the matmuls), numba (``@njit(parallel=True, fastmath=True)``), JAX (``jax.jit``, XLA
CPU) and Halide (softmax, layernorm, GELU in its Python API under the fastest shipped
autoscheduler: ``bench/halide_peer.py``); a peer that does not import is skipped with a
note, numba and Halide have no GEMM or attention row. torch.compile (inductor, CPU;
``pip install -e '.[bench-torch]'``, whose wheel pulls CUDA libraries) runs the JAX
peer's math, compiled once per shape before the timed rounds. Apache TVM is not a peer:
it has no wheel on the package registry this project installs from.

References (``bench/references.py``), measured in each child before the rows: a 64 MiB
copy (bytes read + written per second) and the FMA peak of an llvmlite loop; each row
gives the planner's share of the one that bounds it (bytes moved for softmax, layernorm
and GELU; flops for GEMM and attention).

Each thread count runs in its own child process pinned to that many cores
(``sched_setaffinity``) with every peer limited to it (threadpoolctl for BLAS,
``numba.set_num_threads``, ``XLA_FLAGS`` before JAX starts, ``HL_NUM_THREADS`` before
halide is imported), so no peer sees more cores than planner. Within a child, variants
are interleaved round by round (ABBA order), each sample after a short warm-up of the
same variant, which starts after a pause of ``SETTLE_S`` (the threads of the variant
before it spin idle for a while: OpenBLAS's for ~0.1 s after each call, 2^28 cycles, and
a variant timed while one of them spins on the other core runs its second thread at
half speed; on the Zen 4 VM planner's 2-thread attention L = S = 1024 took 4.2-4.9 ms
right after numpy and 1.6-1.9 ms otherwise, and JAX and torch.compile gained 10-25 %
from the pause too); the table gives median, min and max, and the ratio peer median /
planner median (> 1: planner faster). Every output is checked against the numpy reference
first (the max abs error is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from halide_peer import KINDS as HALIDE_KINDS
from halide_peer import build as halide_build

ROOT = Path(__file__).resolve().parents[1]
WARMUP_S = 0.1
SETTLE_S = 0.3


def _setup_child(threads: int) -> None:
    cores = sorted(os.sched_getaffinity(0))[:threads]
    os.sched_setaffinity(0, set(cores))
    os.environ["NUMBA_NUM_THREADS"] = str(threads)
    os.environ["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}"
                               f" intra_op_parallelism_threads={threads}")
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    os.environ["HL_NUM_THREADS"] = str(threads)


def _peers(threads: int) -> tuple[dict[str, object], list[str]]:
    notes: list[str] = []
    mods: dict[str, object] = {}
    try:
        import numba
        numba.set_num_threads(threads)
        mods["numba"] = numba
    except Exception as e:  # any import failure skips the peer
        notes.append(f"numba skipped: {type(e).__name__}: {e}")
    try:
        import jax
        jax.config.update("jax_platforms", "cpu")
        mods["jax"] = jax
    except Exception as e:
        notes.append(f"jax skipped: {type(e).__name__}: {e}")
    try:
        import torch
        torch.set_num_threads(threads)
        mods["torch"] = torch
    except Exception as e:
        notes.append(f"torch.compile skipped: {type(e).__name__}: {e}")
    try:
        import halide
        from halide_peer import load_autoschedulers

        names, skipped = load_autoschedulers(halide)
        notes.extend(skipped)
        if not names:
            raise RuntimeError("no autoscheduler plugin loaded")
        mods["halide"] = (halide, names)
    except Exception as e:
        notes.append(f"halide skipped: {type(e).__name__}: {e}")
    return mods, notes


# ------------------------------------------------------------------ peer kernels


def _numba_kernels(numba: object) -> dict[str, Callable[..., np.ndarray]]:
    njit, prange = numba.njit, numba.prange  # type: ignore[attr-defined]

    @njit(parallel=True, fastmath=True)
    def softmax(x):
        out = np.empty_like(x)
        for i in prange(x.shape[0]):
            m = x[i].max()
            s = np.float32(0.0)
            for j in range(x.shape[1]):
                e = np.exp(x[i, j] - m)
                out[i, j] = e
                s += e
            out[i] /= s
        return out

    @njit(parallel=True, fastmath=True)
    def layernorm(x, w, b):
        out = np.empty_like(x)
        n = x.shape[1]
        for i in prange(x.shape[0]):
            s = np.float32(0.0)
            q = np.float32(0.0)
            for j in range(n):  # one pass: sum and sum of squares of a row in cache
                s += x[i, j]
                q += x[i, j] * x[i, j]
            mean = s / n
            inv = np.float32(1.0) / np.sqrt(q / n - mean * mean + np.float32(1e-5))
            for j in range(n):
                out[i, j] = (x[i, j] - mean) * inv * w[j] + b[j]
        return out

    @njit(parallel=True, fastmath=True)
    def gelu(x):
        out = np.empty_like(x)
        c = np.float32(0.7978845608028654)
        for i in prange(x.shape[0]):
            v = x[i]
            out[i] = np.float32(0.5) * v * (np.float32(1.0) + np.tanh(
                c * (v + np.float32(0.044715) * v * v * v)))
        return out

    return {"softmax": softmax, "layernorm": layernorm, "gelu": gelu}


def _jax_kernels(jax: object) -> dict[str, Callable[..., object]]:
    jnp = jax.numpy  # type: ignore[attr-defined]
    jit = jax.jit  # type: ignore[attr-defined]

    def softmax(x):
        e = jnp.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def layernorm(x, w, b):
        mean = x.mean(axis=1, keepdims=True)
        xc = x - mean
        var = (xc * xc).mean(axis=1, keepdims=True)
        return xc * jax.lax.rsqrt(var + 1e-5) * w + b  # type: ignore[attr-defined]

    def gelu(x):
        return 0.5 * x * (1.0 + jnp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))

    def gemm(a, b):
        return a @ b

    def attention(q, k, v):
        s = (q @ k.T) * (1.0 / np.sqrt(q.shape[1]))
        p = jnp.exp(s - s.max(axis=1, keepdims=True))
        return (p @ v) / p.sum(axis=1, keepdims=True)

    return {n: jit(f) for n, f in (("softmax", softmax), ("layernorm", layernorm),
                                   ("gelu", gelu), ("gemm", gemm), ("attention", attention))}


def _torch_kernels(torch: object) -> dict[str, Callable[..., object]]:
    """The JAX peer's math under ``torch.compile`` (inductor's CPU C++/OpenMP code)."""

    def softmax(x):
        e = (x - x.amax(dim=1, keepdim=True)).exp()
        return e / e.sum(dim=1, keepdim=True)

    def layernorm(x, w, b):
        mean = x.mean(dim=1, keepdim=True)
        xc = x - mean
        var = (xc * xc).mean(dim=1, keepdim=True)
        return xc * (var + 1e-5).rsqrt() * w + b

    def gelu(x):
        return 0.5 * x * (1.0 + (0.7978845608028654 * (x + 0.044715 * x * x * x)).tanh())

    def gemm(a, b):
        return a @ b

    def attention(q, k, v):
        s = (q @ k.T) * (1.0 / np.sqrt(q.shape[1]))
        p = (s - s.amax(dim=1, keepdim=True)).exp()
        return (p @ v) / p.sum(dim=1, keepdim=True)

    compile_ = torch.compile  # type: ignore[attr-defined]
    return {n: compile_(f, dynamic=False) for n, f in (
        ("softmax", softmax), ("layernorm", layernorm), ("gelu", gelu), ("gemm", gemm),
        ("attention", attention))}


# ------------------------------------------------------------------ workloads


def _workloads(quick: bool) -> list[tuple[str, str, object, dict[str, int],
                                          dict[str, np.ndarray], Callable[[], np.ndarray]]]:
    """(row name, kernel kind, planner kernel, bindings, arrays, numpy reference)."""
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT / "planner" / "examples"))
    import attention
    import gelu
    import gemm
    import layernorm
    import softmax
    from cpu import np_attention, np_gelu, np_layernorm, np_softmax

    rng = np.random.default_rng(0)
    f32 = np.float32
    out = []
    sizes = [(512, 2048, "")] if quick else [(1024, 4096, ""), (4096, 4096, "")]
    for rows, cols, tag in [*sizes, (37, 1000, " (edge)")]:
        x = rng.standard_normal((rows, cols)).astype(f32)
        w, b = rng.standard_normal(cols).astype(f32), rng.standard_normal(cols).astype(f32)
        out.append((f"softmax {rows}x{cols}{tag}", "softmax",
                    softmax.make_softmax(softmax.SoftmaxConfig(block_m=4)),
                    {"M": rows, "N": cols}, {"X": x}, lambda x=x: np_softmax(x)))
        if not tag:
            out.append((f"layernorm {rows}x{cols}", "layernorm",
                        layernorm.make_layernorm(layernorm.LayerNormConfig(block_m=4)),
                        {"M": rows, "N": cols}, {"X": x, "W": w, "Bias": b},
                        lambda x=x, w=w, b=b: np_layernorm(x, w, b)))
    g = rng.standard_normal((1 if quick else 16) * 2 ** 20).astype(f32)
    out.append((f"gelu-tanh {g.size // 2 ** 20}M", "gelu", gelu.make_gelu(gelu.GeluConfig(4096)),
                {"N": g.size}, {"X": g}, lambda: np_gelu(g)))
    square = [(512, 512, 512)] if quick else [(1024, 1024, 1024), (2048, 2048, 2048)]
    for (mm, nn, kk), blk, tag in ([(n3, (256, 256, 256), "") for n3 in square]
                                   + [((300, 200, 130), (128, 128, 256), " (edge)")]):
        a = rng.standard_normal((mm, kk)).astype(f32)
        bb = rng.standard_normal((kk, nn)).astype(f32)
        out.append((f"gemm {mm}x{nn}x{kk}{tag}", "gemm", gemm.make_gemm(gemm.GemmConfig(*blk, 2)),
                    {"M": mm, "N": nn, "K": kk}, {"A": a, "B": bb},
                    lambda a=a, bb=bb: a @ bb))
    square_l = [512] if quick else [1024, 2048]
    for (ll, ss), tag in [((n2, n2), "") for n2 in square_l] + [((100, 77), " (edge)")]:
        q, k, v = (rng.standard_normal((r, 64)).astype(f32) for r in (ll, ss, ss))
        out.append((f"attention L={ll} S={ss} D=64{tag}", "attention",
                    attention.make_attention(attention.AttentionConfig(64, 64, 2)),
                    {"L": ll, "S": ss, "D": 64}, {"Q": q, "K": k, "V": v},
                    lambda q=q, k=k, v=v: np_attention(q, k, v)))
    return out


def _sample(f: Callable[[], object]) -> float:
    time.sleep(SETTLE_S)  # the previous variant's idle threads stop spinning
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < WARMUP_S:
        f()
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def child(threads: int, quick: bool, rounds: int, only: list[str] | None = None,
          target_name: str = "host") -> dict[str, object]:
    _setup_child(threads)
    from references import copy_bandwidth, fma_peak
    from threadpoolctl import threadpool_limits

    from planner.catalog import CatalogRegistry
    from planner.lower import compile_kernel
    from planner.solve import plan_kernel

    refs = {"copy": copy_bandwidth(threads), "fma": fma_peak(threads)}
    mods, notes = _peers(threads)
    from threadpoolctl import threadpool_info

    notes += [f"numpy's BLAS: {i.get('internal_api')} {i.get('version')}, kernel "
              f"{i.get('architecture')}"
              for i in threadpool_info() if i.get("user_api") == "blas"]
    nb = _numba_kernels(mods["numba"]) if "numba" in mods else {}
    jx = _jax_kernels(mods["jax"]) if "jax" in mods else {}
    tc = _torch_kernels(mods["torch"]) if "torch" in mods else {}
    target = CatalogRegistry().get(target_name)
    rows = []
    for name, kind, kernel, bindings, arrays, reference in _workloads(quick):
        if only and not any(o in name for o in only):
            continue
        want = np.asarray(reference())
        ck = compile_kernel(kernel, plan_kernel(kernel, target, bindings), target)
        out_name = next(p.name for p in ck.loop_program.params if not p.readonly)
        buf = np.empty_like(want)
        args = tuple(arrays.values())
        variants: dict[str, Callable[[], object]] = {
            "planner": lambda ck=ck, arrays=arrays, buf=buf, o=out_name:
                ck(dict(arrays), threads=threads, **{o: buf})[o],
            "numpy": reference,
        }
        if kind in nb:
            variants["numba"] = lambda f=nb[kind], args=args: f(*args)
        if kind in jx:
            dev = [mods["jax"].device_put(a) for a in args]  # type: ignore[attr-defined]
            variants["jax"] = lambda f=jx[kind], dev=dev: f(*dev).block_until_ready()
        if kind in tc:
            tt = [mods["torch"].from_numpy(a) for a in args]  # type: ignore[attr-defined]
            with mods["torch"].no_grad():  # type: ignore[attr-defined]
                tc[kind](*tt)  # compile outside the timed rounds
            variants["torch"] = lambda f=tc[kind], tt=tt: f(*tt).numpy()
        if "halide" in mods and kind in HALIDE_KINDS:
            hl, names = mods["halide"]  # type: ignore[misc]
            run, note = halide_build(hl, kind, list(args), threads, names)
            notes.append(note)
            if run is not None:
                variants["halide"] = run
        errs = {}
        with threadpool_limits(threads):
            for k, f in variants.items():
                errs[k] = float(np.max(np.abs(np.asarray(f()) - want))) if want.size else 0.0
            times: dict[str, list[float]] = {k: [] for k in variants}
            keys = list(variants)
            for r in range(rounds):
                for k in (keys if r % 2 == 0 else reversed(keys)):
                    times[k].append(_sample(variants[k]))
        med = statistics.median(times["planner"])
        if kind in ("gemm", "attention"):  # flops against the FMA peak
            m, n = want.shape
            inner = args[0].shape[1]
            flops = 2 * m * n * inner if kind == "gemm" else 4 * m * args[1].shape[0] * inner
            share = ("FMA peak", flops / med / refs["fma"] if med else 0.0)
        else:  # bytes read and written against the copy
            moved = sum(a.nbytes for a in args) + want.nbytes
            share = ("copy", moved / med / refs["copy"] if med else 0.0)
        rows.append({"name": name, "errors": errs, "share": share,
                     "times": {k: (statistics.median(v), min(v), max(v))
                               for k, v in times.items()}})
    return {"threads": threads, "rows": rows, "notes": notes, "refs": refs}


def _cell(t: dict[str, list[float]], k: str) -> str:
    """``median (min..max)`` in ms, or n/a for a peer without this row."""
    if k not in t:
        return "n/a"
    med, lo, hi = t[k]
    return f"{med * 1e3:.3f} ({lo * 1e3:.3f}..{hi * 1e3:.3f})"


#: Environment variables that override OpenBLAS's own CPU detection and blocking.
_OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds per row")
    ap.add_argument("--threads", type=int, action="append", help="thread counts (1, 2)")
    ap.add_argument("--only", action="append", metavar="TEXT",
                    help="only rows whose name contains TEXT (repeatable)")
    ap.add_argument("--target", default="host",
                    help="catalog planner plans and lowers for (default: host, the "
                         "catalog matching this CPU)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rounds = args.rounds or (5 if args.quick else 9)
    if args.child:
        print(json.dumps(child(args.threads[0], args.quick, rounds, args.only, args.target)))
        return
    from planner.catalog import CatalogRegistry
    from planner.lower.cpu.jit import host_target

    print(f"host {platform.processor() or platform.machine()} (LLVM cpu "
          f"{host_target().cpu}), {os.cpu_count()} cores, numpy {np.__version__}; "
          f"planner plans for {CatalogRegistry().get(args.target).name}; median of "
          f"{rounds} interleaved rounds (min..max); ratio = peer median / planner median "
          "(> 1: planner faster)\n")
    forced = [f"{k}={os.environ[k]}" for k in _OPENBLAS_OVERRIDES if k in os.environ]
    if forced:
        print(f"note: {', '.join(forced)} is set in this environment; the children run "
              "without it, so OpenBLAS uses the kernel it detects for this CPU (a forced "
              "Haswell kernel on an AVX-512 CPU runs numpy's GEMM ~2x slower)\n")
    for th in args.threads or [1, 2]:
        cmd = [sys.executable, __file__, "--child", "--threads", str(th),
               "--rounds", str(rounds), "--target", args.target] \
            + (["--quick"] if args.quick else []) \
            + [a for o in args.only or [] for a in ("--only", o)]
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for key in _OPENBLAS_OVERRIDES:  # OpenBLAS picks its own kernel for this CPU
            env.pop(key, None)
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                        env=env).stdout.splitlines()[-1])
        print(f"{th} thread{'s' if th > 1 else ''}: references: 64 MiB copy "
              f"{res['refs']['copy'] / 1e9:.1f} GB/s (read + written), FMA peak of an "
              f"llvmlite loop {res['refs']['fma'] / 1e9:.0f} GFLOP/s")
        for note in res["notes"]:
            print(f"  note: {note}")
        peers = ["numpy", "numba", "jax", "torch", "halide"]
        head = ["kernel", "planner ms"] + [f"{p} ms" for p in peers] \
            + [f"{p} ratio" for p in peers] + ["planner of reference", "max |err| (planner)"]
        lines = [head]
        for r in res["rows"]:
            t = r["times"]
            pm = t["planner"][0]
            lines.append([r["name"], _cell(t, "planner")] + [_cell(t, p) for p in peers]
                         + [f"{t[p][0] / pm:.2f}" if p in t else "n/a" for p in peers]
                         + [f"{r['share'][1]:.0%} of {r['share'][0]}",
                            f"{r['errors']['planner']:.1e}"])
        widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
        for i, line in enumerate(lines):
            print("  " + "  ".join(c.ljust(w) if j == 0 else c.rjust(w)
                                   for j, (c, w) in enumerate(zip(line, widths, strict=True))))
            if i == 0:
                print("  " + "  ".join("-" * w for w in widths))
        print()


if __name__ == "__main__":
    main()
