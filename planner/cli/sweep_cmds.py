"""``planner sweep``: plan every configuration of a kernel's space, rank them, explain.

A thin layer over :mod:`planner.sweep`: the example's ``SPACE`` (restricted by
``--space name=v1,v2``) × ``--target``s × ``--policy``s, one task per point on a local
process pool or, with ``--scheduler tcp://HOST:PORT`` (or ``$PLANNER_DASK_SCHEDULER``),
a Dask cluster; a repeat is served from the plan cache.  Progress with an ETA goes to
stderr; Ctrl-C cancels what is left and prints the finished points (exit 130).  The
solver, numpy and dask are imported when the command runs, not when the parser is built.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from planner.cli.common import (
    DEFAULT_TARGET,
    add_bind_arg,
    add_catalog_dir_arg,
    add_kernel_arg,
    check_output_path,
    parse_bindings,
    positive_float,
    positive_int,
    print_json,
    write_output,
)

SCHEDULER_ENV = "PLANNER_DASK_SCHEDULER"  # planner.sweep.execute.SCHEDULER_ENV
EXIT_INTERRUPTED = 130


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``planner sweep``."""
    p = subparsers.add_parser(
        "sweep", help="plan every configuration of a kernel's space and rank them",
        description="Plan every point of an example's configuration space (SPACE) on each "
        "target and policy: which configurations fit, which is predicted fastest, and "
        "what limits each one.")
    add_kernel_arg(p)
    p.add_argument("--target", action="append", default=[],
                   help=f"target (repeatable; default {DEFAULT_TARGET})")
    p.add_argument("--policy", action="append", default=[],
                   choices=["default", "expensive-only"], help="planning policy (repeatable)")
    p.add_argument("--space", action="append", default=[], metavar="NAME=V1,V2",
                   help="restrict (or replace) a parameter's values (repeatable)")
    add_bind_arg(p)
    add_catalog_dir_arg(p)
    p.add_argument("--time-limit", type=positive_float, default=10.0, metavar="S",
                   help="CP-SAT time limit per point (default 10)")
    p.add_argument("--measure", action="store_true",
                   help="compile and time the top K on the CPU backend; report predicted vs "
                   "measured rank (Spearman rho)")
    p.add_argument("--top", type=positive_int, default=None, metavar="K",
                   help="show (and with --measure, time) the K best feasible points "
                   "(default: all shown, 10 timed)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--csv", type=Path, metavar="FILE", help="also write the results as CSV")
    p.add_argument("--plot", type=Path, metavar="FILE.html",
                   help="also write a self-contained HTML plot")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help=f"run on this Dask scheduler (default ${SCHEDULER_ENV}; else a local "
                   "process pool)")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="local pool size (default: the machine's cores)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the "
                   "plan cache")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    from planner.sweep.cache import default_plan_cache
    from planner.sweep.execute import make_executor
    from planner.sweep.run import SweepSpec, run_sweep, sweep_tasks
    from planner.sweep.space import parse_space_overrides

    for path, option in ((args.csv, "--csv"), (args.plot, "--plot")):
        if path is not None:
            check_output_path(path, option)
    spec = SweepSpec(args.kernel, tuple(args.target or [DEFAULT_TARGET]),
                     tuple(args.policy or ["default"]), parse_space_overrides(args.space),
                     parse_bindings(args.bind), args.time_limit,
                     tuple(str(d) for d in args.catalog_dir))
    prepared = sweep_tasks(spec)
    if not prepared.tasks:
        print("the space has no points (every configuration violates a constraint)",
              file=sys.stderr)
    executor = make_executor(args.scheduler or os.environ.get(SCHEDULER_ENV) or None,
                             args.workers)
    # The first Ctrl-C asks the driver loop to stop (it cancels what has not finished
    # and keeps the finished points) instead of raising KeyboardInterrupt wherever the
    # main thread happens to be (inside the pool's own bookkeeping it can leave the pool
    # unable to shut down); a second Ctrl-C interrupts as usual.
    stop = threading.Event()

    def on_sigint(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        result = run_sweep(spec, executor, cache=None if args.no_cache else
                           default_plan_cache(), progress=_Progress(), prepared=prepared,
                           stop=stop)
    finally:
        signal.signal(signal.SIGINT, previous)
        executor.close()
    if args.measure and result.results and not result.interrupted:
        from planner.sweep.measure import measure_top

        print("measuring ...", file=sys.stderr)
        result.measured, result.rho, notes = measure_top(
            result.ranked(), prepared.example.instance, prepared.targets,
            dict(prepared.tasks[0].bindings), args.top or 10)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    _emit(args, result)
    return EXIT_INTERRUPTED if result.interrupted else 0


def _emit(args: argparse.Namespace, result: object) -> None:
    from planner.sweep.render import sweep_csv, sweep_plot_html, sweep_table

    if args.csv is not None:
        write_output(args.csv, sweep_csv(result), "--csv")  # type: ignore[arg-type]
    if args.plot is not None:
        write_output(args.plot, sweep_plot_html(result), "--plot")  # type: ignore[arg-type]
    if args.json:
        print_json(result.to_json())  # type: ignore[attr-defined]
    else:
        print(sweep_table(result, args.top))  # type: ignore[arg-type]


class _Progress:
    """``[ 12/48]  25%  3.1 points/s  ETA 0:12`` on stderr: redrawn in place on a
    terminal, else one line per tenth of the sweep."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last_line = 0.0

    def __call__(self, done: int, total: int, elapsed: float) -> None:
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        text = (f"[{done:>{len(str(total))}}/{total}] {done / max(total, 1):4.0%}  "
                f"{rate:.1f} points/s  ETA {int(eta) // 60}:{int(eta) % 60:02d}")
        if self.tty:
            sys.stderr.write("\r" + text + ("\n" if done == total else ""))
            sys.stderr.flush()
        elif done == total or done % max(1, total // 10) == 0 or \
                time.monotonic() - self.last_line > 5:
            print(text, file=sys.stderr, flush=True)
            self.last_line = time.monotonic()
