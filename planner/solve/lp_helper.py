"""LP windows solved by HiGHS in a second process, beside this process's own solve.

HiGHS solves one LP at a time per process (its task scheduler is global:
:data:`planner.solve.lp._HIGHS`), so the windows of a large relaxation
(:func:`planner.solve.lp.relax`) ran one after the other on one core while the other
had little to do.  :class:`LpHelper` is a child process that solves some of them at the
same time: started early (it imports HiGHS while this process builds the model, on the
core that building leaves idle), sent a window's arrays through a pipe, it answers with
its optimum and column values, the same numbers this process computes for that window
(:func:`solve_window`, one function for both sides).

The child is this file run as a script (no ``planner`` import: it starts in ~0.5 s).
It ends when its pipe closes, and (Linux) is killed when this process dies, so a planning
job killed at its deadline leaves no solver behind.  A helper that cannot start or that
fails answers nothing (:meth:`LpHelper.solve` returns None): the caller solves the window
itself, with the same result.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

__all__ = ["LpHelper", "WindowLp", "WindowSolution", "solve_window"]

_log = logging.getLogger(__name__)
_HEADER = struct.Struct("<Q")
#: Seconds a reply may come after the window's own time limit before the helper counts
#: as failed (the pipe's transfer and HiGHS's own overrun).
REPLY_GRACE_S = 1.0


@dataclass(frozen=True)
class WindowLp:
    """One window's LP: column bounds and costs, rows ``lo <= matrix @ x <= hi``."""

    lower: np.ndarray
    upper: np.ndarray
    objective: np.ndarray
    matrix: Any  # scipy.sparse.csr_matrix
    lo: np.ndarray
    hi: np.ndarray


@dataclass(frozen=True)
class WindowSolution:
    """HiGHS's answer for a window: ``optimal`` (its optimum proved), the objective and
    the column values (only when optimal)."""

    optimal: bool
    objective: float
    values: np.ndarray | None


def solve_window(solver: Any, lp: WindowLp, time_limit_s: float) -> WindowSolution:
    """Solve ``lp`` with ``solver`` (an ortools ``model_builder.Solver("highs")``)."""
    from ortools.linear_solver.python import model_builder as mb

    model = mb.Model()
    # one call from the sparse matrix (a Python loop over ~139,000 rows takes seconds)
    model.helper.fill_model_from_sparse_data(lp.lower, lp.upper, lp.objective, lp.lo, lp.hi,
                                             lp.matrix.tocsr())
    solver.set_time_limit_in_seconds(max(0.01, time_limit_s))
    solver.set_solver_specific_parameters("output_flag=false")  # no banner
    status = solver.solve(model)
    if status != mb.SolveStatus.OPTIMAL:
        return WindowSolution(False, float("nan"), None)
    return WindowSolution(True, float(solver.objective_value), _values(solver, model))


def _values(solver: Any, model: Any) -> np.ndarray:
    """Every column's value, in one call to the solver's helper where it has one
    (``Solver.values`` builds a pandas series through one Python call per column: ~0.5 s
    for 97,000 columns)."""
    helper = getattr(solver, "_Solver__solve_helper", None)
    values = getattr(helper, "variable_values", None)
    if values is not None:
        out = np.asarray(values(), dtype=np.float64)
        if out.shape == (model.num_variables,):
            return out
    return np.asarray(solver.values(model.get_variables()), dtype=np.float64)


class LpHelper:
    """A child process that solves LP windows (:func:`solve_window`) one at a time, in
    the order they are sent.  Thread-safe; :meth:`close` (or ``with``) ends it."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self._lock = threading.Lock()  # one exchange at a time on the pipe
        self._failed = False
        #: windows the child answered (solved or not)
        self.answered = 0

    @classmethod
    def start(cls) -> LpHelper | None:
        """Start the child (it imports HiGHS at once); None where it cannot start."""
        try:
            process = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                close_fds=True)
        except OSError as exc:
            _log.warning("planner: no LP helper process (%s); windows solved in turn", exc)
            return None
        return cls(process)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def failed(self) -> bool:
        """True once the helper failed or was closed: it answers nothing more."""
        return self._failed

    def solve(self, lp: WindowLp, time_limit_s: float) -> Future[WindowSolution | None]:
        """Send ``lp`` now; the future's answer is None where the helper failed (it is
        then not used again) or did not answer within the limit and
        :data:`REPLY_GRACE_S`."""
        out: Future[WindowSolution | None] = Future()
        # plain arrays and a scipy matrix: the child unpickles them without planner
        request = pickle.dumps((lp.lower, lp.upper, lp.objective, lp.matrix, lp.lo, lp.hi,
                                time_limit_s), protocol=pickle.HIGHEST_PROTOCOL)
        timer = threading.Timer(time_limit_s + REPLY_GRACE_S, self._give_up)
        timer.daemon = True

        def exchange() -> None:
            answer = None
            with self._lock:
                if not self._failed:
                    timer.start()
                    try:
                        _send(self._process.stdin, request)
                        reply = pickle.loads(_receive(self._process.stdout))
                        if reply is None:
                            raise ValueError("HiGHS failed in the helper")
                        optimal, objective, values = reply
                        answer = WindowSolution(bool(optimal), float(objective), values)
                        self.answered += 1
                    except (OSError, EOFError, ValueError, TypeError,
                            pickle.UnpicklingError) as exc:
                        self._fail(exc)
                    finally:
                        timer.cancel()
            out.set_result(answer)

        threading.Thread(target=exchange, name="planner-lp-helper", daemon=True).start()
        return out

    def _give_up(self) -> None:
        self._fail(TimeoutError("no answer within the window's limit"))

    def _fail(self, exc: BaseException) -> None:
        if not self._failed:
            self._failed = True
            _log.warning("planner: LP helper process failed (%s); its windows are solved "
                         "here", exc)
        with contextlib.suppress(OSError):
            self._process.kill()

    def close(self) -> None:
        """End the child (it may be solving: it is killed) and reap it."""
        self._failed = True
        for pipe in (self._process.stdin, self._process.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        with contextlib.suppress(OSError):
            self._process.kill()
        self._process.wait()

    def __enter__(self) -> LpHelper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _send(pipe: IO[bytes] | None, data: bytes) -> None:
    if pipe is None:
        raise OSError("no pipe")
    pipe.write(_HEADER.pack(len(data)))
    pipe.write(data)
    pipe.flush()


def _receive(pipe: IO[bytes] | None) -> bytes:
    if pipe is None:
        raise OSError("no pipe")
    head = pipe.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the pipe closed")
    (size,) = _HEADER.unpack(head)
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed mid-message")
    return data


def _die_with(parent: int) -> None:
    """Be killed when ``parent`` dies (Linux), and end now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit(0)


def _serve(parent: int) -> None:
    """The child: answer each window sent on stdin until it closes."""
    _die_with(parent)
    from ortools.linear_solver.python import model_builder as mb

    solver = mb.Solver("highs")
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            *arrays, limit = pickle.loads(_receive(stdin))
        except EOFError:
            return
        reply: tuple[bool, float, np.ndarray | None] | None
        try:
            got = solve_window(solver, WindowLp(*arrays), limit)
            reply = (got.optimal, got.objective, got.values)
        except Exception as exc:  # reported to the parent, which solves the window itself
            print(f"planner LP helper: {exc!r}", file=sys.stderr)
            reply = None
        _send(stdout, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
