"""The one registry of backends: which code generator lowers and runs a target's plans.

Every caller that lowers or runs a plan — ``planner lower``, ``planner run``,
``planner survey``, the Metal check (:mod:`planner.cli.metal_cmds`) and the server's
``POST /v1/lower`` — finds the target's :class:`Backend` with :func:`backend_for` and
calls it; none of them decides by itself which code generator serves a target.

A :class:`Backend` is a frozen record: its ``name``, the catalog ``backend:`` value it
serves (:attr:`planner.catalog.Target.backend`), the emit forms it prints and the two
operations every backend offers:

* :meth:`Backend.emit` — the text of one form (``loops``: the loop program of
  :mod:`planner.lower.loops`; ``llvm``/``asm``: optimized LLVM IR / assembly from
  :func:`planner.lower.cpu.compile_kernel`; ``msl``: Metal Shading Language from
  :func:`planner.lower.metal.emitter.emit_msl`), refusing a form it does not print;
* :meth:`Backend.run` — run the plan on random inputs and, with ``check``, compare
  every output with the reference interpreter and, when the kernel is an example's
  (a :class:`LoadedKernel` with its ``reference(inputs)``), with the example's own
  numpy reference too (CPU: JIT-compiled native code, timed; Metal: the Linux
  emulator in several thread orders), returned as a :class:`RunResult`.  Both
  backends go through one check path (``_references`` and ``_compare_runs``): one
  line per output, run and reference, and a summary naming each reference's result.
  An output the kernel never stores keeps its zeros, so it matches the interpreter
  but not a numpy reference: ``run --check`` fails naming it.

A target whose catalog names no backend (``backend: null``: ``nvidia-h100``,
``npu-systolic``, ...) is planning-only; :func:`backend_for` refuses it with a
:class:`PlannerError` (kind ``unsupported``, HTTP 400) naming the target, its catalog
value and the registered backends, and that one message is what the CLI prints and
the server answers.

The code generators are imported when first used, so importing this module (the CLI
does for every command, through :func:`compare_output`) does not load llvmlite.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from planner.catalog import Backend as CatalogBackend
from planner.catalog import Target
from planner.errors import Diagnostic, PlannerError, error
from planner.ir.core import Kernel
from planner.ir.load import LoadedKernel

if TYPE_CHECKING:
    from planner.lower.metal.emitter import MslKernel
    from planner.lower.metal.emulator import Order
    from planner.plan.decisions import MaterializationPlan

__all__ = [
    "BACKENDS",
    "DEFAULT_ORDERS",
    "Backend",
    "RunResult",
    "backend_for",
    "backend_named",
    "check_metal",
    "compare_output",
    "emit_forms",
    "find_backend",
    "max_abs_error",
]

#: Thread orders the Metal check runs in unless told otherwise.
DEFAULT_ORDERS: tuple[Order, ...] = ("forward", "reverse")


# -- comparing outputs with a reference -------------------------------------------------


def max_abs_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest absolute difference; NaN where both are NaN counts as equal, else inf."""
    if got.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if want.dtype.kind == "f":
        diff = np.where(np.isnan(got) & np.isnan(want), 0.0, diff)
    return float("inf") if np.isnan(diff).any() else float(diff.max())


def compare_output(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4, atol: float = 1e-4
                   ) -> tuple[bool, float]:
    """Whether an output matches its reference (NaN equals NaN), and the max abs error."""
    ok = got.shape == want.shape and bool(
        np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
    return ok, max_abs_error(got, want) if got.shape == want.shape else float("inf")


#: How lines and verdicts name the two references an output is compared with.
INTERPRETER = "reference interpreter"
NUMPY_REFERENCE = "example's numpy reference"
_SHORT = {INTERPRETER: "reference interpreter", NUMPY_REFERENCE: "numpy reference"}


@dataclass(frozen=True, slots=True)
class _Comparison:
    """Every output of every run compared with every reference (the one check path)."""

    lines: tuple[str, ...]
    #: reference name -> (outputs that differ, with the run's label; worst error)
    failed: dict[str, tuple[list[str], float]]
    references: tuple[str, ...]
    worst: float

    @property
    def ok(self) -> bool:
        return not self.failed

    def account(self) -> str:
        """One clause per reference: ``reference interpreter ok, numpy reference: Z``."""
        return ", ".join(
            f"{_SHORT[r]}: MISMATCH on {', '.join(self.failed[r][0])}" if r in self.failed
            else f"{_SHORT[r]} ok" for r in self.references)


def _references(kernel: Kernel, loaded: LoadedKernel | None, inputs: Mapping[str, np.ndarray],
                bindings: Mapping[str, int]) -> dict[str, dict[str, np.ndarray]]:
    """The reference interpreter's outputs and, for an example, its numpy reference's."""
    from planner.ir.interpreter import interpret

    refs = {INTERPRETER: interpret(kernel, inputs, bindings)}
    independent = loaded.expected({k: v.copy() for k, v in inputs.items()}) \
        if loaded is not None else None
    if independent:
        refs[NUMPY_REFERENCE] = independent
    return refs


def _compare_runs(runs: Sequence[tuple[str, Mapping[str, np.ndarray], str]],
                  references: Mapping[str, Mapping[str, np.ndarray]], rtol: float,
                  atol: float) -> _Comparison:
    """Compare each run's outputs (``(label, outputs, facts)``; label "" for a single run)
    with each reference; an output a reference names but the run lacks is a mismatch."""
    lines: list[str] = []
    failed: dict[str, tuple[list[str], float]] = {}
    worst = 0.0
    for label, outputs, facts in runs:
        lead = f"{label}: " if label else ""
        tail = f" ({facts})" if facts else ""
        for ref_name, expected in references.items():
            for name, want in expected.items():
                got = outputs.get(name)
                if got is None:
                    ok, err = False, float("inf")
                    lines.append(f"  {lead}{name} vs the {ref_name}: the kernel has no such "
                                 f"output MISMATCH{tail}")
                else:
                    ok, err = compare_output(np.asarray(got), want, rtol, atol)
                    lines.append(f"  {lead}{name} vs the {ref_name}: max abs error {err:.3g} "
                                 f"{'ok' if ok else 'MISMATCH'}{tail}")
                worst = max(worst, err)
                if not ok:
                    names, w = failed.get(ref_name, ([], 0.0))
                    names.append(f"{name} ({label} order)" if label else name)
                    failed[ref_name] = (names, max(w, err))
    return _Comparison(tuple(lines), failed, tuple(references), worst)


# -- the records ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one run (and check) of a plan showed.

    ``header`` says what ran (kernel, target, plan, shape, timings); ``lines`` has one
    line per compared output; ``ok`` is None when nothing was checked; ``verdict`` is
    the last line (``check ok: ...`` or the reason of the mismatch, "" unchecked) and
    ``summary`` the one-line account ``planner survey`` prints.
    """

    header: str
    lines: tuple[str, ...]
    ok: bool | None
    worst: float
    verdict: str
    summary: str
    rule: str = ""

    @property
    def report(self) -> str:
        """The whole account: header, one line per output, verdict."""
        return "\n".join(line for line in (self.header, *self.lines, self.verdict) if line)

    def mismatch(self, message: str | None = None) -> PlannerError:
        """The error a failed check raises (kind ``mismatch``; default: the verdict)."""
        return PlannerError(Diagnostic(self.verdict if message is None else message,
                                       rule=self.rule), kind="mismatch")


class _Emit(Protocol):
    def __call__(self, kernel: Kernel, plan: MaterializationPlan | None, target: Target,
                 form: str) -> str: ...


class _Run(Protocol):
    def __call__(self, kernel: Kernel | LoadedKernel, plan: MaterializationPlan | None,
                 target: Target, bindings: Mapping[str, int], *, check: bool, seed: int,
                 rtol: float, atol: float, threads: int | None, repeat: int) -> RunResult: ...


@dataclass(frozen=True, slots=True)
class Backend:
    """A code generator: the catalog backend it serves, its emit forms and operations.

    ``targets`` is how messages name its targets ("needs a Metal target"); ``forms`` are
    the emit forms in the order help texts list them, ``default_form`` what ``planner
    lower`` prints without ``--emit``; ``unavailable(target)`` says why this machine
    cannot run the code it makes for ``target`` (None: it can).
    """

    name: str
    serves: CatalogBackend
    targets: str
    forms: tuple[str, ...]
    default_form: str
    lower: _Emit
    runner: _Run
    unavailable: Callable[[Target], str | None]

    def supports(self, form: str) -> bool:
        return form in self.forms

    def require(self, target: Target, form: str | None = None, *, option: str = "emit"
                ) -> str:
        """The form to emit for ``target`` (``None``: the default), or PlannerError.

        Refuses a target this backend does not serve and a form it does not print,
        naming the forms it does (``option`` is how the caller spells the choice:
        ``--emit`` on the command line, ``emit`` in a request).
        """
        if target.backend is not self.serves:
            value = target.backend.value if target.backend is not None else "null"
            raise error(f"the {self.name} backend lowers {self.serves.value} targets; "
                        f"{target.name} has backend: {value}", kind="unsupported")
        form = self.default_form if form is None else form
        if form in self.forms:
            return form
        known = emit_forms()
        if form not in known:
            raise error(f"{option} {form!r} is not a form any backend emits (forms: "
                        f"{', '.join(known)})", kind="unsupported")
        needs = " or ".join(b.targets for b in BACKENDS if b.supports(form))
        raise error(f"{option} {form} needs {needs}; {target.name} lowers to "
                    f"{self.serves.value} ({self.name} backend), which emits "
                    f"{', '.join(self.forms)}", kind="unsupported")

    def emit(self, kernel: Kernel, plan: MaterializationPlan | None, target: Target,
             form: str | None = None, *, option: str = "emit") -> str:
        """The text of ``form`` (default: :attr:`default_form`) for ``kernel`` under ``plan``."""
        return self.lower(kernel, plan, target, self.require(target, form, option=option))

    def run(self, kernel: Kernel | LoadedKernel, plan: MaterializationPlan | None,
            target: Target, bindings: Mapping[str, int], *, check: bool = True,
            seed: int = 0, rtol: float = 1e-4, atol: float = 1e-4,
            threads: int | None = None, repeat: int = 1) -> RunResult:
        """Run ``plan`` on random inputs (``seed``) and, with ``check``, compare with the
        reference interpreter; a mismatch is reported in the result, not raised.

        ``threads`` and ``repeat`` (timed runs) apply to backends that time their code.
        A :class:`LoadedKernel` of an example also brings the example's numpy reference,
        which every backend compares with as well.
        """
        self.require(target)
        return self.runner(kernel, plan, target, bindings, check=check, seed=seed,
                           rtol=rtol, atol=atol, threads=threads, repeat=repeat)


def _plan_label(plan: MaterializationPlan | None) -> str:
    if plan is None:
        return "all-virtual"
    return plan.baseline.value if plan.baseline else "optimal"


def _shown(bindings: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(bindings.items()))


def _split(kernel: Kernel | LoadedKernel) -> tuple[Kernel, LoadedKernel | None]:
    if isinstance(kernel, LoadedKernel):
        return kernel.kernel, kernel
    return kernel, None


def _loops(kernel: Kernel, plan: MaterializationPlan | None, target: Target) -> str:
    from planner.lower.loops import build_loop_program

    return str(build_loop_program(kernel, plan, target))


# -- CPU (llvm-cpu) -----------------------------------------------------------------------


def _cpu_emit(kernel: Kernel, plan: MaterializationPlan | None, target: Target,
              form: str) -> str:
    if form == "loops":
        return _loops(kernel, plan, target)
    from planner.lower.cpu import compile_kernel

    compiled = compile_kernel(kernel, plan, target)
    return compiled.llvm_ir if form == "llvm" else compiled.asm


def _cpu_unavailable(target: Target) -> str | None:
    from planner.catalog import host_cpu, missing_host_features

    missing = missing_host_features(target)
    if not missing:
        return None
    return (f"this machine's CPU ({host_cpu()[0]}) lacks {', '.join(missing)}, which "
            f"{target.name}'s code needs")


def _cpu_run(kernel: Kernel | LoadedKernel, plan: MaterializationPlan | None, target: Target,
             bindings: Mapping[str, int], *, check: bool, seed: int, rtol: float,
             atol: float, threads: int | None, repeat: int) -> RunResult:
    from planner.ir.interpreter import random_inputs
    from planner.lower.cpu import compile_kernel

    kernel, loaded = _split(kernel)
    start = time.perf_counter()
    compiled = compile_kernel(kernel, plan, target, threads=threads)
    compile_s = time.perf_counter() - start
    inputs = random_inputs(kernel, bindings, seed)
    times: list[float] = []
    outputs: dict[str, np.ndarray] = {}
    for _ in range(max(1, repeat)):
        fresh = {k: v.copy() for k, v in inputs.items()}
        start = time.perf_counter()
        outputs = compiled(fresh, bindings=bindings)
        times.append(time.perf_counter() - start)
    run_s = float(np.median(times))
    header = (f"{kernel.name} on {target.name} ({_plan_label(plan)} plan, {compiled.threads} "
              f"threads, {_shown(bindings)}): compile {compile_s:.2f} s, run "
              f"{run_s * 1e3:.3f} ms (median of {len(times)})")
    if not check:
        return RunResult(header, (), None, 0.0, "", f"ran in {run_s * 1e3:.1f} ms (unchecked)")
    cmp = _compare_runs([("", outputs, "")], _references(kernel, loaded, inputs, bindings),
                        rtol, atol)
    if cmp.failed:
        clauses = "; ".join(f"with the {r} on {', '.join(names)}: max abs error {w:.3g}"
                            for r, (names, w) in cmp.failed.items())
        verdict = (f"compiled {kernel.name} disagrees {clauses} (rtol {rtol}, atol {atol})")
    else:
        verdict = (f"check ok: matches the {' and the '.join(cmp.references)} (max abs error "
                   f"{cmp.worst:.3g})")
    summary = (f"{'MISMATCH' if cmp.failed else 'matches reference'} ({cmp.account()}; "
               f"max err {cmp.worst:.1e}, {run_s * 1e3:.1f} ms)")
    return RunResult(header, cmp.lines, cmp.ok, cmp.worst, verdict, summary)


# -- Metal ------------------------------------------------------------------------------


def _metal_emit(kernel: Kernel, plan: MaterializationPlan | None, target: Target,
                form: str) -> str:
    if form == "loops":
        return _loops(kernel, plan, target)
    from planner.lower.metal.emitter import emit_msl

    return emit_msl(kernel, plan, target).source


def _metal_unavailable(target: Target) -> str | None:
    from planner.lower.metal.emulator import clang_available

    return None if clang_available() else "clang-19 is not installed (scripts/install_clang.sh)"


def check_metal(kernel: Kernel | LoadedKernel, plan: MaterializationPlan | None,
                target: Target, bindings: Mapping[str, int],
                orders: Sequence[Order] = DEFAULT_ORDERS, *, seed: int = 0,
                rtol: float = 1e-4, atol: float = 1e-4,
                emit: Callable[[Kernel, MaterializationPlan | None, Target], MslKernel]
                | None = None) -> RunResult:
    """Emit ``kernel``, run it in the emulator in each of ``orders`` and compare.

    Each output is compared with the reference interpreter and, for a
    :class:`LoadedKernel` of an example, with the example's numpy reference.  A run
    that faults or diverges at a barrier raises the emulator's ``KernelFault``.
    ``emit`` replaces :func:`~planner.lower.metal.emitter.emit_msl` (tests break it).
    """
    from planner.ir.interpreter import random_inputs
    from planner.lower.metal.emitter import emit_msl
    from planner.lower.metal.runtime import run_msl_kernel

    kernel, loaded = _split(kernel)
    start = time.perf_counter()
    msl = (emit or emit_msl)(kernel, plan, target)
    emit_s = time.perf_counter() - start
    inputs = random_inputs(kernel, bindings, seed)
    references = _references(kernel, loaded, inputs, bindings)
    groups = msl.grid(bindings)[0]
    header = (f"{kernel.name} on {target.name} ({_plan_label(plan)} plan, {_shown(bindings)}): "
              f"Metal kernel `{msl.kernel_name}`, {groups} threadgroups x "
              f"{msl.threads_per_group} threads, threadgroup memory "
              f"{msl.threadgroup_bytes:,} B, emitted in {emit_s:.2f} s")
    runs: list[tuple[str, Mapping[str, np.ndarray], str]] = []
    for order in orders:
        run = run_msl_kernel(kernel, msl, inputs, bindings, order=order, seed=seed)
        rep = run.report
        facts = (f"{rep.barriers_passed} barriers passed, {rep.elapsed_s:.3f} s"
                 if rep is not None else "no threadgroups to run")
        runs.append((order, run.outputs, facts))
    cmp = _compare_runs(runs, references, rtol, atol)
    total_s = time.perf_counter() - start
    how = "+".join(orders)
    if cmp.failed:
        bad = [f"{n[:-1]}, vs the {r})" for r, (names, _) in cmp.failed.items() for n in names]
        verdict = f"check FAILED: {', '.join(bad)} (rtol {rtol}, atol {atol})"
        summary = (f"emulated Metal MISMATCH: {', '.join(bad)} ({cmp.account()}; max err "
                   f"{cmp.worst:.1e})")
    else:
        verdict = (f"check ok: the emulated Metal kernel matches the "
                   f"{' and the '.join(cmp.references)} in {len(orders)} thread "
                   f"order{'s' if len(orders) != 1 else ''} (max abs error {cmp.worst:.3g})")
        summary = f"emulated Metal matches reference ({cmp.account()}; {how}, {total_s:.1f} s)"
    return RunResult(header, cmp.lines, cmp.ok, cmp.worst, verdict, summary, rule="msl-check")


def _metal_run(kernel: Kernel | LoadedKernel, plan: MaterializationPlan | None,
               target: Target, bindings: Mapping[str, int], *, check: bool, seed: int,
               rtol: float, atol: float, threads: int | None, repeat: int) -> RunResult:
    if not check:
        raise error("on a Metal target 'planner run' executes in the emulator only to "
                    "check it: add --check", kind="usage")
    return check_metal(kernel, plan, target, bindings, seed=seed, rtol=rtol, atol=atol)


# -- the registry -----------------------------------------------------------------------

#: Every backend, in the order messages list them.
BACKENDS: tuple[Backend, ...] = (
    Backend("cpu", CatalogBackend.LLVM_CPU, "an llvm-cpu target", ("loops", "llvm", "asm"),
            "loops", _cpu_emit, _cpu_run, _cpu_unavailable),
    Backend("metal", CatalogBackend.METAL, "a Metal target", ("loops", "msl"), "msl",
            _metal_emit, _metal_run, _metal_unavailable),
)


def emit_forms() -> tuple[str, ...]:
    """Every form some backend emits, in registry order (``--emit`` choices)."""
    return tuple(dict.fromkeys(form for b in BACKENDS for form in b.forms))


def backend_named(name: str) -> Backend:
    """The registered backend called ``name`` (``cpu``, ``metal``)."""
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    raise error(f"no backend named {name!r} (registered: "
                f"{', '.join(b.name for b in BACKENDS)})", kind="unsupported")


def find_backend(target: Target) -> Backend | None:
    """The backend serving ``target``'s catalog ``backend:`` value; None: planning-only."""
    for backend in BACKENDS:
        if target.backend is not None and backend.serves is target.backend:
            return backend
    return None


def backend_for(target: Target) -> Backend:
    """The backend serving ``target``, or PlannerError (kind ``unsupported``) saying why none.

    The message names the target, its catalog ``backend:`` value and the registered
    backends; the CLI prints it and the server answers it (400) word for word.
    """
    backend = find_backend(target)
    if backend is not None:
        return backend
    registered = ", ".join(f"{b.name} ({b.serves.value})" for b in BACKENDS)
    if target.backend is None:
        raise error(f"target {target.name} is planning-only: its catalog says backend: null, "
                    f"and only targets of a registered backend can be lowered or run "
                    f"(registered: {registered}); plan it instead ('planner plan', "
                    "POST /v1/plan)",
                    kind="unsupported")
    raise error(f"no registered backend serves target {target.name}: its catalog says "
                f"backend: {target.backend.value} (registered: {registered})",
                kind="unsupported")
