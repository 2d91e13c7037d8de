"""Planning work in worker processes with memory and CPU limits, killable per job.

Every job that parses, plans, proves or lowers a submitted kernel runs in one of
``size`` long-lived worker processes (forked from a ``forkserver`` that has imported
the planner once, so a replacement starts in milliseconds).  A worker sets
``RLIMIT_AS`` (``memory_bytes``) once and, before each job, an ``RLIMIT_CPU`` soft
limit of its CPU time so far plus ``cpu_seconds``; a job that exceeds either ends in
its own worker (``MemoryError``, ``SIGXCPU``), never in the server.

:meth:`WorkerPool.call` waits on the event loop for the job's answer, the request's
deadline or the client's disconnect, whichever comes first; on the last two it kills
the worker (the solver stops at once, its memory is returned) and a fresh one is
forked for the next job.  Slots are bounded: ``size`` jobs run, ``max_queue`` wait, and
one more is refused with :class:`Overloaded` (the app answers 503 with ``Retry-After``).

CPU priority: workers run at nice :data:`WORKER_NICE` (the event loop, which answers
cache hits and health checks, comes first), and a job still running after
:data:`LONG_JOB_S` is lowered to nice :data:`LONG_JOB_NICE`, so short (cold) requests
are not starved by long solves on a machine with few cores.  The worker's priority is
restored when the job ends; where the system does not allow raising it again, the
worker is replaced instead.

Exceptions cross the process boundary as plain data: a :class:`PlannerError` or an
:class:`ApiError` is rebuilt in the server; any other exception that user input can
provoke has already been mapped to a :class:`PlannerError` with a rule id by
:func:`classify` in the worker; the rest become :class:`JobFailed` (a 500 with the
request id).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import resource
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from planner.errors import Diagnostic, PlannerError, SourceLoc

REQUEST_FILE = "<request>"
#: Niceness of a worker process, and of one whose job has run for ``LONG_JOB_S`` seconds.
WORKER_NICE, LONG_JOB_NICE, LONG_JOB_S = 2, 19, 1.0


class Overloaded(Exception):
    """Every slot is busy and the queue is full."""

    def __init__(self, running: int, queued: int) -> None:
        super().__init__(f"{running} jobs running and {queued} waiting")
        self.running, self.queued = running, queued


class DeadlineExceeded(Exception):
    """The request's deadline passed before its job answered (the worker was killed)."""


class ClientGone(Exception):
    """The client disconnected while its job ran (the worker was killed)."""


class JobFailed(Exception):
    """A job ended in an exception that is a planner bug, or its worker died."""


class ApiErrorData(Exception):
    """An :class:`ApiError` raised by a job, carried as data (the service rebuilds it)."""

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__(fields.get("message", ""))
        self.fields = fields


def classify(exc: BaseException) -> PlannerError | None:
    """The 4xx a exception that user input can provoke stands for, else None (a bug).

    RecursionError: structure nested too deeply for the readers or the planner (413
    ``too-large``, rule ``nesting-depth``); MemoryError: the job hit the worker's memory
    limit (413, ``memory-limit``); OverflowError: a number too large for a float or a
    machine integer (422 ``overflow``); ValueError: a value no stage can represent, e.g.
    an integer too long to print (422 ``invalid-value``).
    """
    loc = SourceLoc(REQUEST_FILE, 0)
    if isinstance(exc, RecursionError):
        return PlannerError(Diagnostic("the kernel is nested too deeply (or its dataflow "
                                       "chains are too long) to process", loc,
                                       rule="nesting-depth"), kind="too-large")
    if isinstance(exc, MemoryError):
        return PlannerError(Diagnostic("the request needs more memory than a planning job "
                                       "may use", loc, rule="memory-limit"), kind="too-large")
    if isinstance(exc, OverflowError):
        return PlannerError(Diagnostic(f"a number in the kernel is too large to compute "
                                       f"with ({exc})", loc, rule="overflow"), kind="overflow")
    if isinstance(exc, ValueError) and not isinstance(exc, UnicodeError):
        text = str(exc)
        if len(text) > 300:
            text = text[:297] + "..."
        return PlannerError(Diagnostic(f"a value in the request cannot be processed: {text}",
                                       loc, rule="invalid-value"), kind="invalid-value")
    return None


def run_guarded(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
    """``fn(*args)`` as ``(tag, payload)``: never raises (StopIteration included, which
    cannot travel through a Future)."""
    from planner.server.service import ApiError  # the worker's own import

    try:
        return "ok", fn(*args)
    except PlannerError as exc:
        return "planner", (exc.diagnostics, exc.kind)
    except ApiError as exc:
        return "api", {"status": exc.status, "kind": exc.kind, "message": exc.message,
                       "headers": exc.headers, "explanation": exc.explanation,
                       "diagnostics": exc.diagnostics}
    except BaseException as exc:  # every job must answer
        mapped = classify(exc)
        if mapped is not None:
            return "planner", (mapped.diagnostics, mapped.kind)
        return "bug", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"


def unwrap(tag: str, payload: Any) -> Any:
    """The value of a :func:`run_guarded` answer, or its exception raised."""
    if tag == "ok":
        return payload
    if tag == "planner":
        diagnostics, kind = payload
        raise PlannerError(list(diagnostics), kind=kind)
    if tag == "api":
        raise ApiErrorData(payload)
    raise JobFailed(str(payload))


# -- the worker process ----------------------------------------------------------------


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _worker_main(conn: Connection, memory_bytes: int | None, cpu_seconds: float | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, WORKER_NICE)
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        if cpu_seconds:
            soft = int(_cpu_used() + cpu_seconds) + 1
            if cpu_hard != resource.RLIM_INFINITY:
                soft = min(soft, cpu_hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, cpu_hard))
        answer = run_guarded(fn, args)
        try:
            conn.send(answer)
        except OSError:  # the server is gone
            return
        except Exception as exc:  # an answer that does not pickle
            conn.send(("bug", f"the job's answer could not be sent: {exc!r}"))


@dataclass(eq=False)
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class WorkerPool:
    """``size`` worker processes, ``max_queue`` waiting jobs; see the module docstring."""

    def __init__(self, size: int, max_queue: int, memory_bytes: int | None,
                 cpu_seconds: float | None) -> None:
        self.size, self.max_queue = size, max_queue
        self.memory_bytes, self.cpu_seconds = memory_bytes, cpu_seconds
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["planner.server.service"])
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()  # idle and busy, for close()
        self._running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self.killed = 0  # workers killed for a deadline or a disconnect
        self._closed = False

    @property
    def busy(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        return sum(1 for f in self._waiting if not f.done())

    def _spawn(self) -> _Worker:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, name="planner-worker", daemon=True,
                                    args=(child, self.memory_bytes, self.cpu_seconds))
        # A worker never needs the server's __main__; a script without a main guard
        # would otherwise be run again in every worker (multiprocessing re-imports it).
        main = sys.modules.get("__main__")
        script = main.__dict__.pop("__file__", None) if main is not None else None
        try:
            process.start()
        finally:
            if script is not None:
                main.__file__ = script  # type: ignore[union-attr]
        child.close()
        worker = _Worker(process, parent)
        self._all.add(worker)
        return worker

    def warm(self) -> None:
        """Start the forkserver and one worker (so the first request does not wait)."""
        if not self._idle:
            self._idle.append(self._spawn())

    async def _acquire(self) -> None:
        if self._running < self.size and not self.queued:
            self._running += 1
            return
        if self.queued >= self.max_queue:
            raise Overloaded(self._running, self.queued)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        try:
            await future  # the releasing job hands its slot over
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # granted just as we were cancelled
            raise
        finally:
            with contextlib.suppress(ValueError):
                self._waiting.remove(future)

    def _release(self) -> None:
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_result(None)
                return
        self._running -= 1

    def _take(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.process.is_alive():
                return worker
            self._all.discard(worker)
            worker.kill()
        return self._spawn()

    async def call(self, fn: Callable[..., Any], args: tuple[Any, ...], *,
                   deadline: float | None = None,
                   disconnected: asyncio.Event | None = None) -> Any:
        """``fn(*args)`` in a worker; see the module docstring for what it raises.

        A full queue is :class:`Overloaded`; reaching ``deadline`` while waiting for a
        slot or while running is :class:`DeadlineExceeded` (the request's own time limit
        is used up; the queue bound, not the deadline, is what tells overload).
        """
        if self._running < self.size and not self.queued:
            self._running += 1  # a free slot: no waiting, whatever the deadline
        else:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                await asyncio.wait_for(self._acquire(), wait)
            except TimeoutError:
                raise DeadlineExceeded() from None
        try:
            return await self._call(fn, args, deadline, disconnected)
        finally:
            self._release()

    async def _call(self, fn: Callable[..., Any], args: tuple[Any, ...],
                    deadline: float | None, disconnected: asyncio.Event | None) -> Any:
        loop = asyncio.get_running_loop()
        worker = await asyncio.to_thread(self._take) if not self._idle else self._take()
        ready: asyncio.Future[None] = loop.create_future()
        fd = worker.conn.fileno()
        keep = False
        pid = worker.process.pid
        lowered = [False]

        def lower_priority() -> None:
            try:
                os.setpriority(os.PRIO_PROCESS, pid, LONG_JOB_NICE)  # type: ignore[arg-type]
                lowered[0] = True
            except OSError:
                pass

        timer = loop.call_later(LONG_JOB_S, lower_priority)
        try:
            try:
                await asyncio.to_thread(worker.conn.send, (fn, args))
            except OSError:  # the worker died while idle
                raise self._died(worker) from None
            loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
            waits: list[asyncio.Future[Any]] = [ready]
            gone = asyncio.ensure_future(disconnected.wait()) if disconnected else None
            if gone is not None:
                waits.append(gone)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                done, _ = await asyncio.wait(waits, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                loop.remove_reader(fd)
                if gone is not None:
                    gone.cancel()
            if ready not in done:
                self.killed += 1
                raise ClientGone() if gone is not None and gone in done else DeadlineExceeded()
            try:
                tag, payload = await asyncio.to_thread(worker.conn.recv)
            except (EOFError, OSError):
                raise self._died(worker) from None
            keep = True
            return unwrap(tag, payload)
        finally:
            timer.cancel()
            if keep and lowered[0]:
                try:
                    os.setpriority(os.PRIO_PROCESS, pid, WORKER_NICE)  # type: ignore[arg-type]
                except OSError:
                    keep = False  # cannot raise it again: a fresh worker instead
            if keep and not self._closed:
                self._idle.append(worker)
            else:
                self._all.discard(worker)
                await asyncio.to_thread(worker.kill)

    def _died(self, worker: _Worker) -> Exception:
        worker.process.join(timeout=5)
        code = worker.process.exitcode
        if code == -signal.SIGXCPU:
            return PlannerError(Diagnostic(
                f"the request used more than {self.cpu_seconds:g} s of CPU time",
                SourceLoc(REQUEST_FILE, 0), rule="cpu-limit"), kind="timeout")
        if code == -signal.SIGKILL:  # the kernel's OOM killer, most likely
            return PlannerError(Diagnostic(
                "the planning job was killed (out of memory)", SourceLoc(REQUEST_FILE, 0),
                rule="memory-limit"), kind="too-large")
        return JobFailed(f"the worker process exited with status {code}")

    def close(self) -> None:
        """Kill every worker, busy ones included (their requests are ending too)."""
        self._closed = True
        for worker in list(self._all):
            worker.kill()
        self._all.clear()
        self._idle.clear()
