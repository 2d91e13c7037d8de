"""LP windows solved by HiGHS in a second process, beside this process's own solve.

HiGHS solves one LP at a time per process (its task scheduler is global:
:data:`planner.solve.lp._HIGHS`), so the windows of a large relaxation
(:func:`planner.solve.lp.relax`) ran one after the other on one core while the other
had little to do.  :class:`LpHelper` is a child process that solves some of them at the
same time: started early (it imports HiGHS while this process builds the model, on the
core that building leaves idle), sent a window's arrays through a pipe, it answers with
its optimum and column values, the same numbers this process computes for that window
(:func:`solve_window`, one function for both sides).

The child is this file run as a script (``python -P``, no ``planner`` import: it starts
in ~0.5 s).  It ends when its pipe closes, and (Linux) is killed when this process dies,
so a planning job killed at its deadline leaves no solver behind.  A helper that cannot
start or that fails answers nothing (:meth:`LpHelper.solve` returns None): the caller
solves the window itself, with the same result.  Every window sent carries one absolute
deadline: the child gets what is left of it when it starts that window, and a window
not answered by the deadline and :func:`reply_grace` ends the child.

Limits: the child inherits this process's resource limits as they are when it starts
(a server worker's ``RLIMIT_AS`` applies to it separately, not to the two together);
CPU time it uses is not charged to this process's ``RLIMIT_CPU``, so it is bounded by
the window deadlines instead (and by :meth:`LpHelper.close`, which kills it).
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
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

__all__ = ["LpHelper", "WindowLp", "WindowSolution", "solve_window"]

_log = logging.getLogger(__name__)
#: a message's size in bytes and, for a window, the seconds it may take
_HEADER = struct.Struct("<Qd")
#: Seconds a reply may come after the window's deadline before the helper counts as
#: failed (the pipe's transfer, building the model and HiGHS's own overrun) ...
REPLY_GRACE_S = 1.0
#: ... and the share of the window's own time added to that
REPLY_GRACE_SHARE = 0.1


def reply_grace(time_limit_s: float) -> float:
    """Seconds past a ``time_limit_s`` window's deadline its reply may still come."""
    return REPLY_GRACE_S + REPLY_GRACE_SHARE * max(0.0, time_limit_s)


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

    #: the command that starts the child (``-P``: its folder not on ``sys.path``, where
    #: this package's module names would shadow others)
    COMMAND = (sys.executable, "-P", os.path.abspath(__file__))

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
                [*cls.COMMAND, str(os.getpid())],
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
        """Send ``lp`` to be solved within ``time_limit_s`` seconds from now (windows
        sent before it are solved first, within the same clock); the future's answer is
        None where the helper failed (it is then not used again), where the time ran out
        before the child could start the window, or where no answer came by the
        deadline and :func:`reply_grace` (the child is then killed)."""
        deadline = time.monotonic() + time_limit_s
        out: Future[WindowSolution | None] = Future()
        # plain arrays and a scipy matrix: the child unpickles them without planner
        request = pickle.dumps((lp.lower, lp.upper, lp.objective, lp.matrix, lp.lo, lp.hi),
                               protocol=pickle.HIGHEST_PROTOCOL)

        def exchange() -> None:
            answer = timer = None
            try:
                with self._lock:
                    left = deadline - time.monotonic()
                    if self._failed or left <= 0:
                        return
                    timer = threading.Timer(left + reply_grace(left), self._give_up)
                    timer.daemon = True
                    timer.start()
                    _send(self._process.stdin, request, left)
                    reply = pickle.loads(_receive(self._process.stdout)[0])
                    if reply is None:
                        raise ValueError("HiGHS failed in the helper")
                    optimal, objective, values = reply
                    answer = WindowSolution(bool(optimal), float(objective), values)
                    self.answered += 1
            except Exception as exc:  # any failure: the window is solved here
                answer = None
                self._fail(exc)
            finally:
                if timer is not None:
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
        """End the child (it may be solving: it is killed) and reap it.  Killed first: a
        reply being read then ends at once, and its pipe can be closed."""
        self._failed = True
        with contextlib.suppress(OSError):
            self._process.kill()
        self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()

    def __enter__(self) -> LpHelper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _send(pipe: IO[bytes] | None, data: bytes, seconds: float = 0.0) -> None:
    if pipe is None:
        raise OSError("no pipe")
    pipe.write(_HEADER.pack(len(data), seconds))
    pipe.write(data)
    pipe.flush()


def _receive(pipe: IO[bytes] | None) -> tuple[bytes, float]:
    """A message and the seconds its header carries."""
    if pipe is None:
        raise OSError("no pipe")
    head = pipe.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the pipe closed")
    size, seconds = _HEADER.unpack(head)
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed mid-message")
    return data, seconds


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
    # the replies go to a private copy of stdout; anything else written there (a
    # solver's banner, a warning) goes to stderr instead of into the replies' framing
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import scipy.sparse  # noqa: F401 - imported now, not while unpickling the first window
    from ortools.linear_solver.python import model_builder as mb

    solver = mb.Solver("highs")
    stdin = sys.stdin.buffer
    while True:
        try:
            data, limit = _receive(stdin)
            arrays = pickle.loads(data)
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
