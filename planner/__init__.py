"""planner: a constraint-solver-driven materialization planner for tile kernels.

Layers, in data-flow order: ``planner.ir`` (Tile IR, frontend, verifier, forms,
reference interpreter) → ``planner.catalog`` (YAML targets) → ``planner.plan`` (the
MaterializationPlan contract) → ``planner.realize`` (execution binding and homes: what a
decision means physically) → ``planner.prove`` (z3 proofs) → ``planner.solve`` (cost
model, CP-SAT planning) → ``planner.lower`` (loop program, llvmlite CPU backend, Metal
emission).  The CLI and the HTTP service are thin shells over them.

A small API for notebooks and scripts::

    import planner
    k = planner.load("softmax")                      # LoadedKernel (.kernel, .bindings)
    p = planner.plan(k, "x86-avx2", bindings={"M": 37, "N": 29})
    p                                                # one-line repr; HTML in Jupyter
    planner.compare(p, planner.plan(k, baseline="all-materialize", bindings=...))
    print(planner.lower(k, p, emit="llvm"))
    outs = planner.run(k, p, bindings={"M": 37, "N": 29})   # {"Y": ndarray}

Importing :mod:`planner` stays light: the solver, z3, llvmlite and numpy are imported
by the functions when they are called.  ``planner.plan`` and ``planner.lower`` are
both the subpackages of those names and callables (the functions below): their
module objects get a ``__call__``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import Diagnostic, PlannerError, SourceLoc

if TYPE_CHECKING:
    import numpy as np

    from planner.catalog import Target
    from planner.ir.core import Kernel
    from planner.ir.load import LoadedKernel
    from planner.plan.decisions import MaterializationPlan
    from planner.solve.compare import Comparison

__version__ = "0.1.0"

#: The target the API plans, lowers and runs for when none is named.
DEFAULT_TARGET = "x86-avx2"

__all__ = ["DEFAULT_TARGET", "Diagnostic", "PlannerError", "SourceLoc", "__version__",
           "compare", "load", "lower", "plan", "run"]


# -- helpers -----------------------------------------------------------------------------


def _target(target: object) -> Target:
    if target is None:
        target = DEFAULT_TARGET
    if isinstance(target, str):
        from planner.catalog import CatalogRegistry

        return CatalogRegistry.from_environment().get(target)
    return target  # type: ignore[return-value]


def _kernel_and_bindings(kernel_or_source: object, bindings: Mapping[str, int] | None
                         ) -> tuple[Kernel, LoadedKernel | None, dict[str, int]]:
    """The kernel, its LoadedKernel (None for a bare Kernel) and the bindings: the
    loaded example's, overridden by ``bindings``."""
    from planner.ir.load import LoadedKernel

    if isinstance(kernel_or_source, str | Path):
        kernel_or_source = load(kernel_or_source)
    if isinstance(kernel_or_source, LoadedKernel):
        merged = {**dict(kernel_or_source.bindings), **dict(bindings or {})}
        return kernel_or_source.kernel, kernel_or_source, merged
    from planner.ir.core import Kernel

    if not isinstance(kernel_or_source, Kernel):
        raise PlannerError(Diagnostic(
            f"expected a Kernel, a LoadedKernel, an example name or a path, got "
            f"{type(kernel_or_source).__name__}"), kind="usage")
    return kernel_or_source, None, dict(bindings or {})


def _infeasible(p: MaterializationPlan) -> PlannerError:
    head = f"no feasible plan for {p.kernel} on {p.target}"
    reasons = p.explanation or ("the solver gave no explanation",)
    return PlannerError([Diagnostic(f"{head}: {why}", rule="infeasible") for why in reasons],
                        kind="infeasible")


def _feasible_plan(kernel: Kernel, p: MaterializationPlan | None, tgt: Target,
                   bindings: Mapping[str, int]) -> MaterializationPlan:
    from planner.plan.decisions import Status

    if p is None:
        p = plan(kernel, tgt, bindings)
    if p.status is Status.INFEASIBLE:
        raise _infeasible(p)
    if p.kernel != kernel.name:
        raise PlannerError(Diagnostic(f"the plan was made for kernel {p.kernel}, not "
                                      f"{kernel.name}"), kind="plan-mismatch")
    return p


# -- the API -----------------------------------------------------------------------------


def load(source: str | Path, bindings: Mapping[str, int] | None = None) -> LoadedKernel:
    """Load a kernel: a built-in example name (``"softmax"``), or a path to an example
    ``.py``, a JSON IR file or a text IR file.  ``bindings`` override (or add to) the
    example's / the JSON file's bindings.  Returns a
    :class:`~planner.ir.load.LoadedKernel` (``.kernel``, ``.bindings``, ``.example``)."""
    import dataclasses

    from planner.ir.load import load_kernel

    loaded = load_kernel(str(source))
    if bindings:
        loaded = dataclasses.replace(loaded, bindings={**dict(loaded.bindings),
                                                       **dict(bindings)})
    return loaded


def _plan(kernel_or_source: Kernel | LoadedKernel | str | Path,
          target: str | Target = DEFAULT_TARGET, bindings: Mapping[str, int] | None = None,
          policy: str = "default", baseline: str | None = None, time_limit_s: float = 10.0,
          bounds: Mapping[str, tuple[int, int]] | None = None) -> MaterializationPlan:
    """Plan a kernel for ``target`` (a catalog name or a Target): verify it first
    (:func:`planner.ir.verify.verify`), then :func:`planner.solve.plan_kernel`.

    ``kernel_or_source`` is a Kernel, a LoadedKernel or what :func:`load` takes; a loaded
    example's bindings are used unless ``bindings`` overrides them.  ``policy`` is
    ``"default"`` or ``"expensive-only"``; ``baseline`` (``"all-materialize"``,
    ``"greedy-fusion"``, ``"all-virtual"``) plans a fixed strategy instead of the optimum.
    An infeasible plan is returned (status ``infeasible``, with its explanation), not
    raised.
    """
    from planner.ir.verify import verify
    from planner.solve import plan_kernel

    kernel, _, env = _kernel_and_bindings(kernel_or_source, bindings)
    tgt = _target(target)
    verify(kernel, env, bounds)
    return plan_kernel(kernel, tgt, env, policy=policy, baseline=baseline,
                       time_limit_s=time_limit_s, bounds=bounds)


def compare(*plans: MaterializationPlan | tuple[str, MaterializationPlan]
            | Kernel | LoadedKernel | str | Path,
            labels: Sequence[str] | None = None, top: int = 3,
            target: str | Target = DEFAULT_TARGET, bindings: Mapping[str, int] | None = None,
            baselines: Sequence[str] = ("all-materialize", "greedy-fusion", "all-virtual"),
            time_limit_s: float = 10.0) -> Comparison:
    """Compare plans (:func:`planner.solve.compare_plans`); ``str(result)`` is the table.

    Either two or more plans (or ``(label, plan)`` pairs; ``labels`` names bare plans,
    default: their baseline or ``optimal``), or one kernel (what :func:`plan` takes):
    then its optimal plan on ``target`` is compared with each of ``baselines``.
    """
    from planner.plan.decisions import MaterializationPlan
    from planner.solve.compare import compare_plans

    if len(plans) == 1 and not isinstance(plans[0], MaterializationPlan | tuple):
        k = plans[0]
        items: list[tuple[str, MaterializationPlan]] = [
            ("optimal", plan(k, target, bindings, time_limit_s=time_limit_s))]
        items += [(b, plan(k, target, bindings, baseline=b, time_limit_s=time_limit_s))
                  for b in baselines]
    else:
        items = []
        for i, p in enumerate(plans):
            if isinstance(p, tuple):
                items.append((str(p[0]), p[1]))
            elif isinstance(p, MaterializationPlan):
                default = p.baseline.value if p.baseline is not None else "optimal"
                label = labels[i] if labels is not None and i < len(labels) else default
                items.append((label, p))
            else:
                raise PlannerError(Diagnostic(
                    "compare takes plans, (label, plan) pairs, or one kernel"), kind="usage")
        if labels is None:  # make repeated default labels distinct
            seen: dict[str, int] = {}
            for i, (label, p) in enumerate(items):
                n = seen[label] = seen.get(label, 0) + 1
                if n > 1:
                    items[i] = (f"{label} #{n}", p)
    result = compare_plans(items, top=top)
    return result


def _lower(kernel: Kernel | LoadedKernel | str | Path, plan: MaterializationPlan | None = None,
           target: str | Target | None = None, emit: str | None = None,
           bindings: Mapping[str, int] | None = None) -> str:
    """The emitted text of ``kernel`` under ``plan`` for ``target`` (default: the plan's,
    else :data:`DEFAULT_TARGET`): ``emit`` is ``"loops"``, ``"llvm"``, ``"asm"`` (CPU
    targets) or ``"msl"`` (Metal); default: the backend's (loops on CPU, msl on Metal).
    Without a plan the kernel is planned here (with ``bindings``)."""
    from planner.lower.backends import backend_for

    k, _, env = _kernel_and_bindings(kernel, bindings)
    tgt = _target(target if target is not None else (plan.target if plan else None))
    backend = backend_for(tgt)
    form = backend.require(tgt, emit)
    p = _feasible_plan(k, plan, tgt, env)
    return backend.emit(k, p, tgt, form)


def run(kernel: Kernel | LoadedKernel | str | Path, plan: MaterializationPlan | None = None,
        target: str | Target | None = None, bindings: Mapping[str, int] | None = None,
        inputs: Mapping[str, np.ndarray] | None = None, check: bool = True, *,
        threads: int | None = None, seed: int = 0, rtol: float = 1e-4, atol: float = 1e-4
        ) -> dict[str, np.ndarray]:
    """Compile ``kernel`` under ``plan`` for ``target`` and run it; returns the outputs
    (``{view name: array}``, every writable view).

    On a CPU target the code is compiled with llvmlite and runs natively (``threads``
    workers); on a Metal target the emitted MSL runs in the emulator (``threads`` does not
    apply), in the forward thread order and, with ``check``, in the reverse order too.
    ``inputs`` maps view names to numpy arrays (copied, never written); missing ones are
    random (``seed``; writable views zero-filled), as ``planner run`` does.  With
    ``check`` the outputs are compared with the reference interpreter on the same inputs
    and a mismatch raises :class:`PlannerError` (kind ``mismatch``).  Without a plan the
    kernel is planned here.
    """
    import numpy as np

    from planner.catalog import Backend as CatalogBackend
    from planner.ir.interpreter import interpret, random_inputs
    from planner.lower.backends import backend_for, compare_output

    k, _, env = _kernel_and_bindings(kernel, None)  # the example's bindings
    tgt = _target(target if target is not None else (plan.target if plan else None))
    backend = backend_for(tgt)
    backend.require(tgt)  # a planning-only target, or a CPU the host lacks, is refused
    given = {name: np.array(value, copy=True) for name, value in (inputs or {}).items()}
    # Explicit bindings over the inputs' shapes over the plan's over the example's.
    env = {**env, **(dict(plan.bindings) if plan is not None else {}),
           **_shape_bindings(k, given), **dict(bindings or {})}
    p = _feasible_plan(k, plan, tgt, env)
    arrays = {**random_inputs(k, env, seed), **given}
    runs: list[tuple[str, Mapping[str, np.ndarray]]]
    if backend.serves is CatalogBackend.METAL:
        from planner.lower.metal.emitter import emit_msl
        from planner.lower.metal.runtime import run_msl_kernel

        msl = emit_msl(k, p, tgt)
        orders = ("forward", "reverse") if check else ("forward",)
        runs = [(f"emulated Metal ({order} thread order)",
                 run_msl_kernel(k, msl, arrays, env, order=order, seed=seed).outputs)
                for order in orders]
    else:
        from planner.lower.cpu import compile_kernel

        compiled = compile_kernel(k, p, tgt, threads=threads)
        fresh = {name: a.copy() for name, a in arrays.items()}
        runs = [("compiled", compiled(fresh, bindings=env))]
    if check:
        expected = interpret(k, arrays, env)
        for what, outputs in runs:
            bad = []
            for name, want in expected.items():
                ok, err = compare_output(outputs[name], want, rtol, atol)
                if not ok:
                    bad.append(f"{name} (max abs error {err:.3g})")
            if bad:
                raise PlannerError(Diagnostic(
                    f"{what} {k.name} disagrees with the reference interpreter on "
                    f"{', '.join(bad)} (rtol {rtol}, atol {atol})"), kind="mismatch")
    return dict(runs[0][1])


def _shape_bindings(kernel: Kernel, arrays: Mapping[str, Any]) -> dict[str, int]:
    """Symbols bound by the given arrays' shapes (a view extent that is a plain symbol)."""
    from planner.ir.expr import Sym

    env: dict[str, int] = {}
    for p in kernel.params:
        arr = arrays.get(p.name_hint or "")
        if arr is None or len(arr.shape) != len(p.type.shape):
            continue
        for ext, n in zip(p.type.shape, arr.shape, strict=True):
            if isinstance(ext, Sym):
                env.setdefault(ext.name, int(n))
    return env


# -- planner.plan / planner.lower: subpackages that are also callables ------------------


class _CallablePlanModule(types.ModuleType):
    """``planner.plan``: the package, and :func:`planner.plan` when called."""

    def __call__(self, *args: Any, **kwargs: Any) -> MaterializationPlan:
        return _plan(*args, **kwargs)


class _CallableLowerModule(types.ModuleType):
    """``planner.lower``: the package, and :func:`planner.lower` when called."""

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        return _lower(*args, **kwargs)


_CallablePlanModule.__call__.__doc__ = _plan.__doc__
_CallableLowerModule.__call__.__doc__ = _lower.__doc__

import planner.lower  # noqa: E402  (light: its names are lazy; no llvmlite)
import planner.plan  # noqa: E402, F401  (light: frozen dataclasses and their JSON form)

sys.modules["planner.plan"].__class__ = _CallablePlanModule
sys.modules["planner.lower"].__class__ = _CallableLowerModule
plan = sys.modules["planner.plan"]
lower = sys.modules["planner.lower"]
