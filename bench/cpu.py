"""Benchmark the llvmlite CPU backend against numpy, and plans against each other.

Run from the repository root::

    python bench/cpu.py            # everything (a few minutes)
    python bench/cpu.py --quick    # fewer sizes and repetitions

Six tables:

1. GEMM (the ordinary ``make_gemm`` and the seed's ``make_manual_gemm`` with large,
   CPU-sized tiles) at n = 256 … 2048: GFLOP/s and the ratio to numpy's matmul in the
   same process, on 1 and 2 threads (numpy's BLAS limited to the same count).
2. Row softmax and layernorm on 4096×4096, GELU-tanh on 16M elements and the attention
   example: time and speed-up over a plain numpy implementation.
3. Edge tiles: per-element time of GEMM 300×200×130 (per multiply-add, against
   256×256×128: M and N tile multiples, K the same size class), softmax 37×1000 and
   attention 100×77 over that of the nearest tile-multiple size (``--only edges``).
4. Every example under its optimal plan and each feasible baseline: the planner's
   predicted time (the plan objective) and rank against the measured time and rank.
5. Asynchronous copies (``--only copies``): the pipelined manual GEMM staged by plain
   stores against the same GEMM staged by ``copy_async`` (examples/async_gemm.py, both
   forms: on x86 a copy is done by the worker with the next window software-prefetched),
   in one run: time and ratio sync ÷ async, 1 and 2 threads, at 512³ and 300×200×130.
6. Manual GEMM (``--only manual``): ``make_manual_gemm`` (explicit As/Bs, which the CPU
   packs straight from the views) against ``make_gemm`` with the same 128³ tiles, at
   512³ and 1024³: time and ratio manual ÷ gemm, 1 and 2 threads, interleaved.

The machine is shared and noisy: variants are interleaved and the median of several
repetitions is reported, so ratios are more trustworthy than absolute times.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "planner" / "examples"))

import async_gemm  # noqa: E402
import attention  # noqa: E402
import gelu  # noqa: E402
import gemm  # noqa: E402
import layernorm  # noqa: E402
import manual_gemm  # noqa: E402
import softmax  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

from planner.catalog import CatalogRegistry  # noqa: E402
from planner.lower import compile_kernel  # noqa: E402
from planner.lower.cpu.jit import host_target  # noqa: E402
from planner.solve import Baseline, plan_kernel  # noqa: E402

TARGET = CatalogRegistry().get("host")  # --target
THREADS = (2, 1)
QUIET_S = 0.0  # set by --wait-quiet


WARMUP_S = 0.15


def sample(f: Callable[[], object], best_of: int = 1) -> float:
    """Seconds of one call of ``f`` after ``WARMUP_S`` of untimed calls of ``f`` (so
    caches are warm and no other variant's spinning BLAS threads steal a core); with
    ``best_of``, the fastest of that many calls (a call another process interrupted is
    dropped: for sub-millisecond calls on a shared machine)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < WARMUP_S:
        f()
    best = float("inf")
    for _ in range(best_of):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def idle_fraction(interval: float = 0.2) -> float | None:
    """Fraction of CPU time idle over ``interval`` seconds (Linux /proc/stat)."""
    def snap() -> tuple[int, int] | None:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        except OSError:
            return None
        return fields[3] + fields[4], sum(fields)

    a = snap()
    time.sleep(interval)
    b = snap()
    if a is None or b is None or b[1] == a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1])


def wait_quiet(limit_s: float) -> None:
    """Wait up to ``limit_s`` for a machine at least 90 % idle (others share it)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        idle = idle_fraction()
        if idle is None or idle >= 0.9:
            return


def medians(variants: dict[str, Callable[[], object]], reps: int, best_of: int = 1
            ) -> dict[str, float]:
    """Median seconds of each variant (each sample the best of ``best_of`` calls);
    variants interleaved in ABBA order."""
    keys = list(variants)
    times: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(reps):
        wait_quiet(QUIET_S)
        for k in (keys if r % 2 == 0 else reversed(keys)):
            times[k].append(sample(variants[k], best_of))
    return {k: statistics.median(v) for k, v in times.items()}


def table(header: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    cells = [tuple(str(c) for c in r) for r in (header, *rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                       enumerate(zip(r, widths, strict=True))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def numpy_with(threads: int, f: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with threadpool_limits(threads):
            return f()
    return run


# --------------------------------------------------------------------------- GEMM


def gemm_configs(n: int) -> list[tuple[str, object, dict[str, int]]]:
    block = 128 if n <= 512 else 256
    return [
        (f"gemm {block}x{block}x256", gemm.make_gemm(gemm.GemmConfig(block, block, 256, 2)), {}),
        ("manual 128x128x128",
         manual_gemm.make_manual_gemm(manual_gemm.GemmConfig(128, 128, 128, 2)), {}),
    ]


def bench_gemm(sizes: list[int], reps: int) -> str:
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        c = np.empty((n, n), np.float32)
        bindings = {"M": n, "N": n, "K": n}
        variants: dict[str, Callable[[], object]] = {}
        for th in THREADS:
            variants[f"numpy {th}t"] = numpy_with(th, lambda a=a, b=b: a @ b)
        for name, kernel, _ in gemm_configs(n):
            ck = compile_kernel(kernel, plan_kernel(kernel, TARGET, bindings), TARGET)
            got = ck(A=a, B=b, C=c)["C"]
            err = float(np.max(np.abs(got - a @ b)))
            assert err < 1e-2 * np.sqrt(n), f"{name}: wrong result (max error {err})"
            for th in THREADS:
                variants[f"{name} {th}t"] = (lambda ck=ck, th=th, a=a, b=b, c=c:
                                             ck(A=a, B=b, C=c, threads=th))
        t = medians(variants, reps)
        flops = 2.0 * n ** 3
        for name, _, _ in gemm_configs(n):
            for th in THREADS:
                key = f"{name} {th}t"
                rows.append((n, name, th, f"{flops / t[key] / 1e9:.1f}",
                             f"{flops / t[f'numpy {th}t'] / 1e9:.1f}",
                             f"{t[f'numpy {th}t'] / t[key]:.2f}x"))
    return table(("n", "kernel", "threads", "GFLOP/s", "numpy GFLOP/s", "vs numpy"), rows)


# --------------------------------------------------------------------------- elementwise


def np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def np_layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=1, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=1, keepdims=True)
    return xc / np.sqrt(var + 1e-5) * w + b


def np_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(gelu.SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = (q @ k.T) * np.float32(1.0 / np.sqrt(q.shape[1]))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p @ v) / p.sum(axis=1, keepdims=True)


def workloads(quick: bool) -> list[tuple[str, object, dict[str, int], dict[str, np.ndarray],
                                         Callable[[], object]]]:
    rng = np.random.default_rng(0)
    m = 2048 if quick else 4096
    x = rng.standard_normal((m, m)).astype(np.float32)
    w = rng.standard_normal(m).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    g = rng.standard_normal((4 if quick else 16) * 1024 * 1024).astype(np.float32)
    L, S, D = (512, 512, 64) if quick else (2048, 2048, 64)
    q = rng.standard_normal((L, D)).astype(np.float32)
    kk = rng.standard_normal((S, D)).astype(np.float32)
    v = rng.standard_normal((S, D)).astype(np.float32)
    return [
        (f"softmax {m}x{m}", softmax.make_softmax(softmax.SoftmaxConfig(block_m=4)),
         {"M": m, "N": m}, {"X": x, "Y": np.empty_like(x)}, lambda: np_softmax(x)),
        (f"layernorm {m}x{m}", layernorm.make_layernorm(layernorm.LayerNormConfig(block_m=4)),
         {"M": m, "N": m}, {"X": x, "W": w, "Bias": bias, "Y": np.empty_like(x)},
         lambda: np_layernorm(x, w, bias)),
        (f"gelu-tanh {g.size // 2**20}M", gelu.make_gelu(gelu.GeluConfig(block=4096)),
         {"N": g.size}, {"X": g, "Y": np.empty_like(g)}, lambda: np_gelu(g)),
        (f"attention L=S={L} D={D}",
         attention.make_attention(attention.AttentionConfig(block_q=64, block_kv=64,
                                                            window=2)),
         {"L": L, "S": S, "D": D}, {"Q": q, "K": kk, "V": v, "O": np.empty_like(q)},
         lambda: np_attention(q, kk, v)),
    ]


def bench_elementwise(quick: bool, reps: int) -> str:
    rows = []
    for name, kernel, bindings, arrays, reference in workloads(quick):
        ck = compile_kernel(kernel, plan_kernel(kernel, TARGET, bindings), TARGET)
        want = np.asarray(reference())
        got = next(iter(ck(dict(arrays)).values()))
        err = float(np.max(np.abs(got - want)))
        variants: dict[str, Callable[[], object]] = {"numpy": numpy_with(1, reference)}
        for th in THREADS:
            variants[f"{th}t"] = (lambda ck=ck, th=th, arrays=arrays:
                                  ck(dict(arrays), threads=th))
        t = medians(variants, reps)
        for th in THREADS:
            rows.append((name, th, f"{t[f'{th}t'] * 1e3:.2f}", f"{t['numpy'] * 1e3:.2f}",
                         f"{t['numpy'] / t[f'{th}t']:.1f}x", f"{err:.1e}"))
    return table(("kernel", "threads", "ms", "numpy ms", "speed-up", "max |err|"), rows)


# --------------------------------------------------------------------------- edge tiles


def edge_cases() -> list[tuple[str, Callable[[tuple[int, ...]], tuple[object, dict[str, int],
                                                                       dict[str, np.ndarray],
                                                                       int]],
                               tuple[int, ...], tuple[int, ...]]]:
    """(kernel, builder of (kernel, bindings, arrays, elements) for a size, awkward size,
    nearest tile-multiple size): the sizes of issue 13's edge-tile target."""
    rng = np.random.default_rng(2)

    def arr(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    def gemm_case(s: tuple[int, ...]):
        m, n, k = s
        return (gemm.make_gemm(gemm.GemmConfig(128, 128, 256, 2)), {"M": m, "N": n, "K": k},
                {"A": arr(m, k), "B": arr(k, n), "C": np.empty((m, n), np.float32)}, m * n * k)

    def softmax_case(s: tuple[int, ...]):
        m, n = s
        return (softmax.make_softmax(softmax.SoftmaxConfig(block_m=4)), {"M": m, "N": n},
                {"X": arr(m, n), "Y": np.empty((m, n), np.float32)}, m * n)

    def attention_case(s: tuple[int, ...]):
        L, S = s
        return (attention.make_attention(attention.AttentionConfig(64, 64, 2)),
                {"L": L, "S": S, "D": 64},
                {"Q": arr(L, 64), "K": arr(S, 64), "V": arr(S, 64),
                 "O": np.empty((L, 64), np.float32)}, L * S)

    return [("gemm 128x128x256 tiles (per M*N*K)", gemm_case, (300, 200, 130), (256, 256, 128)),
            ("softmax block_m=4 (per M*N)", softmax_case, (37, 1000), (36, 1000)),
            ("attention 64x64 tiles, D=64 (per L*S)", attention_case, (100, 77), (128, 64))]


def bench_edges(reps: int) -> str:
    """Per-element time of the awkward size over that of the nearest tile-multiple size
    (1.00: the edge tiles cost what they compute), both sizes interleaved, each sample
    the best of 5 calls."""
    rows = []
    for name, build, odd, near in edge_cases():
        variants: dict[str, Callable[[], object]] = {}
        elems = {}
        for tag, size in (("odd", odd), ("near", near)):
            kernel, bindings, arrays, n = build(size)
            ck = compile_kernel(kernel, plan_kernel(kernel, TARGET, bindings), TARGET)
            elems[tag] = n
            for th in THREADS:
                variants[f"{tag} {th}t"] = (lambda ck=ck, th=th, arrays=arrays:
                                            ck(dict(arrays), threads=th))
        t = medians(variants, reps, best_of=5)
        for th in THREADS:
            po, pn = t[f"odd {th}t"] / elems["odd"], t[f"near {th}t"] / elems["near"]
            rows.append((name, "x".join(map(str, odd)), "x".join(map(str, near)), th,
                         f"{po * 1e9:.3f}", f"{pn * 1e9:.3f}", f"{po / pn:.2f}"))
    return table(("kernel", "size", "tile multiple", "threads", "ns/elem", "ns/elem (multiple)",
                  "ratio"), rows)


# --------------------------------------------------------------------------- plans


def ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    for r, i in enumerate(order):
        out[i] = r + 1
    return out


def bench_plans(quick: bool, reps: int) -> str:
    rows = []
    cases = [(n, k, b, a) for n, k, b, a, _ in workloads(quick)]
    n = 512 if quick else 1024
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n)).astype(np.float32)
    bm = rng.standard_normal((n, n)).astype(np.float32)
    for name, kernel, _ in gemm_configs(n):
        cases.append((f"{name} n={n}", kernel, {"M": n, "N": n, "K": n},
                      {"A": a, "B": bm, "C": np.empty_like(a)}))
    agree = total = 0
    for name, kernel, bindings, arrays in cases:
        plans = {}
        for baseline in (None, *Baseline):
            plan = plan_kernel(kernel, TARGET, bindings, baseline=baseline)
            if plan.status.value != "infeasible":
                plans[baseline.value if baseline else "optimal"] = plan
        compiled = {k: compile_kernel(kernel, p, TARGET) for k, p in plans.items()}
        # Plans that lower to the same loop program run the same code: one letter each.
        letters: dict[str, str] = {}
        code = {k: letters.setdefault(str(ck.loop_program), "ABCDEFGH"[len(letters)])
                for k, ck in compiled.items()}
        distinct = {code[k]: k for k in reversed(list(compiled))}
        t = medians({k: (lambda ck=compiled[k], arrays=arrays:
                         ck(dict(arrays), threads=THREADS[0])) for k in distinct.values()},
                    reps)
        t = {k: t[distinct[code[k]]] for k in compiled}
        keys = list(plans)
        predicted = ranks([plans[k].objective for k in keys])
        measured = ranks([t[k] for k in keys])
        for k, pr, mr in zip(keys, predicted, measured, strict=True):
            rows.append((name, k, code[k], f"{plans[k].objective / 1e6:.2f}",
                         f"{t[k] * 1e3:.2f}", pr, mr))
        pairs = [(i, j) for i in range(len(keys)) for j in range(i + 1, len(keys))
                 if code[keys[i]] != code[keys[j]]
                 and plans[keys[i]].objective != plans[keys[j]].objective]
        agree += sum((predicted[i] - predicted[j]) * (measured[i] - measured[j]) > 0
                     for i, j in pairs)
        total += len(pairs)
    text = table(("kernel", "plan", "code", "predicted ms", f"measured ms ({THREADS[0]}t)",
                  "predicted rank", "measured rank"), rows)
    return text + (f"\n\n(code: plans with the same letter lower to the same loop program)"
                   f"\npairwise ranking agreement: {agree}/{total} pairs of plans with "
                   "different code and different predictions are ordered alike")


# --------------------------------------------------------------------------- copies


def bench_copies(reps: int) -> str:
    rows = []
    tiles = (64, 64, 64)
    for m, n, k in ((512, 512, 512), (300, 200, 130)):
        rng = np.random.default_rng(m + n + k)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        bindings = {"M": m, "N": n, "K": k}
        kernels = {
            "sync stores": manual_gemm.make_manual_gemm(manual_gemm.GemmConfig(*tiles, 2)),
            "copy_async staged": async_gemm.make_async_gemm(
                async_gemm.AsyncGemmConfig(*tiles, 2, "staged")),
            "copy_async carried": async_gemm.make_async_gemm(
                async_gemm.AsyncGemmConfig(*tiles, 2, "carried")),
        }
        variants: dict[str, Callable[[], object]] = {}
        for name, kernel in kernels.items():
            ck = compile_kernel(kernel, plan_kernel(kernel, TARGET, bindings), TARGET)
            err = float(np.max(np.abs(ck(A=a, B=b, C=c)["C"] - a @ b)))
            assert err < 1e-2 * np.sqrt(k), f"{name}: wrong result (max error {err})"
            for th in THREADS:
                variants[f"{name} {th}t"] = (lambda ck=ck, th=th, a=a, b=b, c=c:
                                             ck(A=a, B=b, C=c, threads=th))
        t = medians(variants, reps)
        for name in kernels:
            for th in THREADS:
                base = t[f"sync stores {th}t"]
                rows.append((f"{m}x{n}x{k}", name, th, f"{t[f'{name} {th}t'] * 1e3:.3f}",
                             f"{base / t[f'{name} {th}t']:.2f}x"))
    return table(("M x N x K", "staging", "threads", "ms", "sync / this"), rows)


# --------------------------------------------------------------------------- manual GEMM


def bench_manual(sizes: list[int], reps: int) -> str:
    """The manual GEMM (explicit As/Bs, packed straight from the views) against the
    plain GEMM with the same tiles, interleaved (each sample the best of 3 calls): time
    and ratio manual ÷ gemm."""
    rows = []
    tiles = (128, 128, 128)
    kernels = {"gemm": gemm.make_gemm(gemm.GemmConfig(*tiles, 2)),
               "manual": manual_gemm.make_manual_gemm(manual_gemm.GemmConfig(*tiles, 2))}
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        c = np.empty((n, n), np.float32)
        bindings = {"M": n, "N": n, "K": n}
        variants: dict[str, Callable[[], object]] = {}
        for name, kernel in kernels.items():
            ck = compile_kernel(kernel, plan_kernel(kernel, TARGET, bindings), TARGET)
            err = float(np.max(np.abs(ck(A=a, B=b, C=c)["C"] - a @ b)))
            assert err < 1e-2 * np.sqrt(n), f"{name}: wrong result (max error {err})"
            for th in THREADS:
                variants[f"{name} {th}t"] = (lambda ck=ck, th=th, a=a, b=b, c=c:
                                             ck(A=a, B=b, C=c, threads=th))
        t = medians(variants, reps, best_of=3)
        for th in THREADS:
            tg, tm = t[f"gemm {th}t"], t[f"manual {th}t"]
            rows.append((n, "x".join(map(str, tiles)), th, f"{tg * 1e3:.2f}",
                         f"{tm * 1e3:.2f}", f"{tm / tg:.3f}"))
    return table(("n", "tiles", "threads", "gemm ms", "manual ms", "manual / gemm"), rows)


# --------------------------------------------------------------------------- overhead


def per_call_us(f: Callable[[], object], calls: int = 10000, reps: int = 5) -> float:
    """Median over ``reps`` loops of ``calls`` calls of ``f``: microseconds per call."""
    for _ in range(calls // 10):
        f()
    loops = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            f()
        loops.append((time.perf_counter_ns() - t0) / calls / 1e3)
    return statistics.median(loops)


def bench_overhead(reps: int) -> str:
    """Fixed cost of a call: tiny planned kernels (softmax 1x8, gelu N=1) on 1 and 2
    threads against a plain numpy add and, if numba imports, an njit kernel of the
    same signature, interleaved."""
    x, y = np.ones((1, 8), np.float32), np.empty((1, 8), np.float32)
    g, gy = np.ones(1, np.float32), np.empty(1, np.float32)
    sm = softmax.make_softmax(softmax.SoftmaxConfig(block_m=4))
    ge = gelu.make_gelu(gelu.GeluConfig(block=4096))
    csm = compile_kernel(sm, plan_kernel(sm, TARGET, {"M": 1, "N": 8}), TARGET)
    cge = compile_kernel(ge, plan_kernel(ge, TARGET, {"N": 1}), TARGET)
    variants: dict[str, Callable[[], object]] = {"numpy add 1 elem":
                                                 lambda: np.add(g, g, out=gy)}
    try:
        import numba

        @numba.njit(cache=False)
        def nb_gelu(a: np.ndarray, out: np.ndarray) -> None:
            for i in range(a.shape[0]):
                out[i] = 0.5 * a[i]

        nb_gelu(g, gy)
        variants["numba njit 1 elem"] = lambda: nb_gelu(g, gy)
    except ImportError:
        pass
    for th in THREADS:
        variants[f"planner softmax 1x8 {th}t"] = lambda th=th: csm(X=x, Y=y, threads=th)
        variants[f"planner gelu N=1 {th}t"] = lambda th=th: cge(X=g, Y=gy, threads=th)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(reps):
        for k in (list(variants) if r % 2 == 0 else reversed(list(variants))):
            times[k].append(per_call_us(variants[k]))
    return table(("call", "us per call (median)"),
                 [(k, f"{statistics.median(v):.2f}") for k, v in times.items()])


SECTIONS = ("gemm", "elementwise", "edges", "plans", "copies", "manual", "overhead")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer reps")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per variant")
    parser.add_argument("--only", choices=SECTIONS, action="append")
    parser.add_argument("--wait-quiet", type=float, default=5.0, metavar="S",
                        help="before each round wait up to S s for a >= 90%% idle machine")
    parser.add_argument("--target", default="host",
                        help="catalog to plan and lower for (default: host, the catalog "
                             "matching this CPU)")
    args = parser.parse_args()
    global QUIET_S, TARGET
    QUIET_S = args.wait_quiet
    TARGET = CatalogRegistry().get(args.target)
    reps = args.reps or (3 if args.quick else 7)
    only = set(args.only or SECTIONS)
    spec = host_target()
    blas = [(i.get("internal_api"), i.get("architecture"), i.get("num_threads"))
            for i in threadpool_info()]
    print(f"host {platform.processor() or platform.machine()}, LLVM cpu {spec.cpu}, "
          f"avx512f={spec.has_feature('avx512f')}, numpy {np.__version__}, BLAS {blas}")
    idle = idle_fraction(1.0)
    print(f"target catalog {TARGET.name}; threads {THREADS}; median of {reps} interleaved "
          f"runs; machine idle at start: {'n/a' if idle is None else f'{idle:.0%}'}\n")
    if "gemm" in only:
        sizes = [256, 512, 1024] if args.quick else [256, 512, 1024, 2048]
        print("GEMM\n" + bench_gemm(sizes, reps) + "\n")
    if "elementwise" in only:
        print("Elementwise, reductions, attention (vs plain numpy, 1 numpy thread)\n"
              + bench_elementwise(args.quick, reps) + "\n")
    if "edges" in only:
        print("Edge tiles: per-element time at an awkward size vs the nearest tile multiple\n"
              + bench_edges(max(reps, 9)) + "\n")
    if "plans" in only:
        print("Optimal plan vs baselines: predicted (plan objective) vs measured\n"
              + bench_plans(args.quick, reps) + "\n")
    if "copies" in only:
        print("Asynchronous copies: the manual GEMM staged by stores vs by copy_async\n"
              + bench_copies(max(reps, 9)) + "\n")
    if "overhead" in only:
        print("Per-call overhead (loops of 10,000 calls)\n" + bench_overhead(reps) + "\n")
    if "manual" in only:
        print("Manual GEMM (As/Bs packed from the views) vs the plain GEMM, same tiles\n"
              + bench_manual([512] if args.quick else [512, 1024], max(reps, 9)))


if __name__ == "__main__":
    main()
