"""Where sweep tasks run: a local process pool, or a Dask distributed cluster.

Both executors take one task per point (:func:`planner.sweep.worker.plan_point`) and
hand back futures that the driver polls (``done()``), so results stream in the order
they complete and a stop request is seen within one poll interval.  The local pool is
:class:`concurrent.futures.ProcessPoolExecutor` sized to the machine; the Dask one is
the real :class:`distributed.Client` connected to a scheduler (``tcp://HOST:PORT``) or
given by the caller (a ``LocalCluster``'s client in tests).  Neither schedules anything
itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from typing import Any, Protocol

from planner.errors import Diagnostic, PlannerError

__all__ = ["SCHEDULER_ENV", "DaskExecutor", "Executor", "LocalPool", "make_executor"]

#: The environment variable naming the Dask scheduler when ``--scheduler`` is not given.
SCHEDULER_ENV = "PLANNER_DASK_SCHEDULER"


class Executor(Protocol):
    name: str

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Any: ...

    def cancel(self, futures: list[Any]) -> None: ...

    def close(self) -> None: ...


def _machine_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the driver, which cancels and keeps what finished
    (a terminal sends SIGINT to the whole process group)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalPool:
    """A process pool with ``workers`` processes (default: the machine's cores).

    ``start_method``: the multiprocessing start method (default: the platform's;
    the HTTP service asks for ``forkserver``, since forking a threaded server is unsafe).
    """

    def __init__(self, workers: int | None = None, start_method: str | None = None) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.workers = workers or _machine_cores()
        ctx = multiprocessing.get_context(start_method) if start_method else None
        self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx,
                                        initializer=_ignore_sigint)
        self.name = f"local pool ({self.workers} worker{'s' if self.workers > 1 else ''})"

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        return self.pool.submit(fn, arg)

    def cancel(self, futures: list[Any]) -> None:
        for f in futures:
            f.cancel()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """Tasks on a Dask cluster through :class:`distributed.Client` (one task per point)."""

    def __init__(self, scheduler: str | Any) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise PlannerError(Diagnostic(
                "--scheduler needs dask.distributed: pip install 'dask[distributed]'"),
                kind="usage") from None
        if isinstance(scheduler, str):
            try:
                self.client = Client(scheduler, timeout="10s")
            except OSError as exc:
                raise PlannerError(Diagnostic(
                    f"cannot reach the Dask scheduler at {scheduler}: {exc}"),
                    kind="unreachable") from None
            self.owned = True
        else:
            self.client, self.owned = scheduler, False
        n = len(self.client.scheduler_info().get("workers", {}))
        self.name = f"dask {self.client.scheduler.address} ({n} worker{'s' if n != 1 else ''})"

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> Any:
        # pure=False: a task's key must not be shared with another sweep's equal task
        return self.client.submit(fn, arg, pure=False)

    def cancel(self, futures: list[Any]) -> None:
        if futures:
            self.client.cancel(futures)

    def close(self) -> None:
        if self.owned:
            self.client.close()


def make_executor(scheduler: str | None = None, workers: int | None = None,
                  start_method: str | None = None) -> Executor:
    """A Dask executor when ``scheduler`` names one (the CLI reads ``--scheduler``, else
    ``$PLANNER_DASK_SCHEDULER``), else a local pool of ``workers`` processes."""
    if scheduler:
        return DaskExecutor(scheduler)
    return LocalPool(workers, start_method)
