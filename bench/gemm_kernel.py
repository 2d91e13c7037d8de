"""Benchmark the JIT-compiled packed sgemm against numpy matmul in the same process.

Usage::

    python bench/gemm_kernel.py [--sizes 256 512 1024 2048] [--reps 7] [--threads 1 2]
                                [--config auto|avx2|avx512] [--wait-quiet S]

For each size and thread count the two implementations are timed in ABBA blocks (numpy,
ours, ours, numpy), each block after 0.25 s of untimed warm-up calls of the same function
(OpenBLAS's worker threads keep spinning ~0.1 s after a threaded call and would steal the
second core from whatever is timed next). Reported: medians of the 2·reps samples as
GFLOP/s (2·n³ / t), ``ratio = t_numpy / t_ours`` (> 1: faster than numpy) and "best", the
same ratio of the fastest samples. numpy's BLAS is limited to the same number of threads
with ``threadpoolctl`` (required); ``OPENBLAS_CORETYPE`` and the BLAS kernel threadpoolctl
reports are printed, because an old forced core type makes numpy 30–85 % slower.

The machine is shared: each row waits (≤ S s) for a ≥ 90 % idle machine and shows how
much CPU other processes used while it ran; rows where that is not ~0 % are not
trustworthy (OpenBLAS's spinning threads suffer most from a stolen core).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

try:
    from threadpoolctl import threadpool_info, threadpool_limits
except ImportError:  # pragma: no cover - reported to the user
    sys.exit("bench/gemm_kernel.py needs threadpoolctl: pip install threadpoolctl")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.lower.cpu.gemm import GemmConfig, SgemmKernel
from planner.lower.cpu.jit import JitCache, host_target


def _time(fn: object, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return out


WARM_S = 0.25


def _idle_fraction(window_s: float = 1.0) -> float | None:
    """Fraction of CPU time idle over ``window_s`` (Linux /proc/stat), else None."""
    try:
        with open("/proc/stat") as f:
            a = [int(x) for x in f.readline().split()[1:]]
        time.sleep(window_s)
        with open("/proc/stat") as f:
            b = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    d = [y - x for x, y in zip(a, b, strict=False)]
    return (d[3] + d[4]) / max(1, sum(d))


def _cpu_snapshot() -> tuple[float, float, float] | None:
    """(busy s, total s) of the whole machine from /proc/stat, and this process's CPU s."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    t = os.times()
    return (sum(v) - v[3] - v[4]) / hz, sum(v) / hz, t.user + t.system


def _foreign_load(a: tuple[float, float, float] | None,
                  b: tuple[float, float, float] | None) -> str:
    """Share of all CPU time used by *other* processes between two snapshots."""
    if a is None or b is None or b[1] <= a[1]:
        return "n/a"
    return f"{max(0.0, (b[0] - a[0]) - (b[2] - a[2])) / (b[1] - a[1]):.0%}"


def _wait_quiet(limit_s: float) -> str:
    """Wait (≤ limit_s) until the machine is ≥ 90 % idle; describe what was seen."""
    t0 = time.perf_counter()
    idle = _idle_fraction()
    while idle is not None and idle < 0.9 and time.perf_counter() - t0 < limit_s:
        idle = _idle_fraction()
    return "n/a" if idle is None else f"{idle:.0%}"


def _warm(fn: object) -> None:
    t0 = time.perf_counter()
    while True:
        fn()  # type: ignore[operator]
        if time.perf_counter() - t0 >= WARM_S:
            return


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--config", choices=["auto", "avx2", "avx512"], default="auto")
    ap.add_argument("--wait-quiet", type=float, default=60.0, metavar="S",
                    help="before each row wait up to S s for a >= 90%% idle machine (0: off)")
    args = ap.parse_args(argv)
    if args.reps < 5:
        ap.error("--reps must be at least 5")

    spec = host_target()
    config = {
        "auto": None,
        "avx2": GemmConfig.avx2(),
        "avx512": GemmConfig.avx512(),
    }[args.config]
    t0 = time.perf_counter()
    kernel = SgemmKernel(JitCache(), config=config)
    compile_s = time.perf_counter() - t0

    print(f"host cpu: {spec.cpu}  avx2={spec.has_feature('avx2')} fma={spec.has_feature('fma')}"
          f" avx512f={spec.has_feature('avx512f')}  usable cpus: {len(os.sched_getaffinity(0))}")
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    print(f"OPENBLAS_CORETYPE={coretype or '<unset>'}")
    if coretype and spec.has_feature("avx512f"):
        print(f"!! OPENBLAS_CORETYPE={coretype} is forced on an AVX-512 host: if that kernel "
              "lacks AVX-512 (Haswell, Zen), numpy runs ~2x slower than OpenBLAS's own "
              "choice; unset it (env -u OPENBLAS_CORETYPE) for a fair baseline")
    for info in threadpool_info():
        print(f"threadpoolctl: {info.get('internal_api')} {info.get('version')} "
              f"kernel={info.get('architecture')} threads={info.get('num_threads')}")
    print(f"numpy {np.__version__}; kernel config {kernel.config}; compile {compile_s:.2f} s")
    print(f"median of 2x{args.reps} calls timed in ABBA blocks after warm-up, float32")
    print(f"load average at start: {os.getloadavg()[0]:.2f} (shared machine: see idle column)\n")

    header = (f"{'n':>5} {'thr':>3} | {'numpy ms':>9} {'GF/s':>7} | {'ours ms':>9} {'GF/s':>7}"
              f" | {'ratio':>5} {'best':>5} | idle before, other procs during")
    print(header)
    print("-" * len(header))
    rng = np.random.default_rng(0)
    for n in args.sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c_np = np.empty((n, n), dtype=np.float32)
        c_ours = np.empty((n, n), dtype=np.float32)
        flops = 2.0 * n**3
        reps = args.reps if n < 2048 else max(5, args.reps - 2)
        for thr in args.threads:
            idle = _wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else "-"
            snap0 = _cpu_snapshot()
            with threadpool_limits(limits=thr, user_api="blas"):

                def run_np(a: np.ndarray = a, b: np.ndarray = b, c: np.ndarray = c_np) -> None:
                    np.matmul(a, b, out=c)

                def run_ours(
                    a: np.ndarray = a, b: np.ndarray = b, c: np.ndarray = c_ours, t: int = thr
                ) -> None:
                    kernel.sgemm(a, b, c, threads=t)

                t_np: list[float] = []
                t_ours: list[float] = []
                # ABBA blocks, each after >= WARM_S of untimed calls of the same kernel:
                # OpenBLAS workers spin ~0.1 s after a threaded call (stealing our second
                # core), and an idle vCPU runs slowly for a while after waking.
                for fn, sink in ((run_np, t_np), (run_ours, t_ours),
                                 (run_ours, t_ours), (run_np, t_np)):
                    _warm(fn)
                    sink += _time(fn, reps)
            foreign = _foreign_load(snap0, _cpu_snapshot())
            err = float(np.max(np.abs(c_np - c_ours))) / max(1.0, float(np.max(np.abs(c_np))))
            if err > 1e-4:
                print(f"!! n={n} threads={thr}: results differ (rel {err:.2e})")
            m_np, m_ours = statistics.median(t_np), statistics.median(t_ours)
            print(f"{n:>5} {thr:>3} | {m_np * 1e3:>9.2f} {flops / m_np / 1e9:>7.1f} | "
                  f"{m_ours * 1e3:>9.2f} {flops / m_ours / 1e9:>7.1f} | {m_np / m_ours:>5.2f}"
                  f" {min(t_np) / min(t_ours):>5.2f} | {idle}, {foreign}")
    kernel.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
