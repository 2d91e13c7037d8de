"""Argument helpers shared by the CLI subcommands.

Building the parser must stay cheap (``planner --help`` imports no solver, prover,
compiler, numpy or web framework), so nothing here imports the IR, solve, prove or
lower layers at module level: the names :func:`kernel_and_bindings` and
:func:`symbol_bounds` use (``load_kernel``, ``parse_bindings``, ``parse_bounds``,
``verify``) and the re-exported ``compare_output`` / ``max_abs_error`` are thin
stand-ins that import the real function on first call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.errors import Diagnostic, PlannerError, error

if TYPE_CHECKING:
    from planner.ir.load import LoadedKernel
    from planner.plan import MaterializationPlan

__all__ = ["DEFAULT_SYMBOL_BOUNDS", "DEFAULT_TARGET", "EMIT_FORMS", "add_bind_arg",
           "add_catalog_dir_arg", "add_json_arg", "add_kernel_arg", "check_output_path",
           "compare_output", "infeasible_error", "kernel_and_bindings", "max_abs_error",
           "non_negative_float", "non_negative_int", "positive_float", "positive_int",
           "print_json", "symbol_bounds", "write_output"]

#: Spelled here so that building the parser imports neither the IR, the catalog loader
#: nor the backends (tests/cli/test_cli_conventions.py checks that they agree):
#: :data:`planner.ir.load.DEFAULT_SYMBOL_BOUNDS` (the ``--bound`` help),
#: :data:`planner.catalog.DEFAULT_TARGET` (``--target``'s default) and
#: :func:`planner.lower.backends.emit_forms` (``--emit``'s choices).
DEFAULT_SYMBOL_BOUNDS = (0, 2**31 - 1)
DEFAULT_TARGET = "x86-avx2"
EMIT_FORMS = ("loops", "llvm", "asm", "msl")


# -- lazy stand-ins for the library functions the helpers below call -------------------

def load_kernel(spec: str) -> LoadedKernel:
    from planner.ir.load import load_kernel as load

    return load(spec)


def parse_bindings(items: list[str] | None) -> dict[str, int]:
    from planner.ir.load import parse_bindings as parse

    return parse(items)


def parse_bounds(items: list[str] | None) -> dict[str, tuple[int, int]]:
    from planner.ir.load import parse_bounds as parse

    return parse(items)


def verify(*args: Any, **kwargs: Any) -> Any:
    from planner.ir.verify import verify as run

    return run(*args, **kwargs)


def compare_output(*args: Any, **kwargs: Any) -> Any:
    from planner.lower.backends import compare_output as compare

    return compare(*args, **kwargs)


def max_abs_error(*args: Any, **kwargs: Any) -> Any:
    from planner.lower.backends import max_abs_error as err

    return err(*args, **kwargs)


# -- numeric argument types: argparse refuses a value out of range (exit 2) -------------

def _number(text: str, convert: type, what: str, ok: Any) -> Any:
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if (isinstance(value, float) and not math.isfinite(value)) or not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (``--threads``, ``--repeat``, ``--workers``, ``--time-limit-ms``)."""
    return _number(text, int, "an integer >= 1", lambda v: v >= 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (``--seed``)."""
    return _number(text, int, "an integer >= 0", lambda v: v >= 0)


def positive_float(text: str) -> float:
    """A finite number > 0 (``--time-limit``)."""
    return _number(text, float, "a finite number > 0", lambda v: v > 0)


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (``--rtol``, ``--atol``)."""
    return _number(text, float, "a finite number >= 0", lambda v: v >= 0)


# -- output -----------------------------------------------------------------------------

def add_json_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true",
                   help=f"print {what} as JSON on stdout (errors still go to stderr)")


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2))


def check_output_path(path: str | Path, option: str) -> None:
    """Refuse, before any work, an output file that cannot be created: its directory is
    missing or not writable, or the path is a directory (``-``, stdout, always can)."""
    if str(path) == "-":
        return
    target = Path(path)
    parent = target.parent
    if target.is_dir():
        problem = "it is a directory"
    elif not parent.is_dir():
        problem = f"directory {str(parent)!r} does not exist"
    elif not os.access(parent, os.W_OK | os.X_OK):
        problem = f"directory {str(parent)!r} is not writable"
    else:
        return
    raise error(f"cannot write {option} file {str(path)!r}: {problem}", kind="output")


def write_output(path: str | Path, text: str, option: str) -> None:
    """Write ``text`` to the file the user named with ``option``; ``-`` is stdout.

    A file that cannot be written is a located error naming the path, not a traceback.
    """
    if str(path) == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise error(f"cannot write {option} file {str(path)!r}: {exc.strerror or exc}",
                    kind="output") from None


def infeasible_error(plan: MaterializationPlan, *, shown: bool = False,
                     prefix: str = "") -> PlannerError:
    """The error (kind ``infeasible``, exit 1) an infeasible plan ends a command with;
    ``shown``: its explanation is already on stdout, so one line says so."""
    head = f"{prefix}no feasible plan for {plan.kernel} on {plan.target}"
    if shown:
        return PlannerError(Diagnostic(f"{head} (explained above)", rule="infeasible"),
                            kind="infeasible")
    reasons = plan.explanation or ("the solver gave no explanation",)
    return PlannerError([Diagnostic(f"{head}: {why}", rule="infeasible") for why in reasons],
                        kind="infeasible")


def add_kernel_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", help="an example .py file or name, a text IR file or a .json IR file")


def add_bind_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bind", action="append", metavar="NAME=VALUE",
                   help="bind a kernel symbol (repeatable); overrides the example's defaults")
    p.add_argument("--bound", action="append", metavar="NAME=LO..HI",
                   help="declare the inclusive range of a symbol (repeatable, e.g. N=1..4096): "
                        "proofs and the verifier range over it where no binding fixes the "
                        f"symbol (default {DEFAULT_SYMBOL_BOUNDS[0]}..{DEFAULT_SYMBOL_BOUNDS[1]})")


def symbol_bounds(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    """The command's ``--bound`` declarations, checked against the kernel's symbols by
    the caller that knows them."""
    return parse_bounds(getattr(args, "bound", None))


def add_catalog_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog-dir", action="append", type=Path, default=[], metavar="DIR",
                   help="extra directory of target catalogs (repeatable)")


def kernel_and_bindings(args: argparse.Namespace, *, verified: bool = True
                        ) -> tuple[LoadedKernel, dict[str, int]]:
    """The command's KERNEL, verified, and its bindings (the example's, then ``--bind``).

    Every command that takes a KERNEL loads it here, and here the verifier runs on it
    (:func:`planner.ir.verify.verify`, the call the HTTP service makes in
    ``planner.server.service.decode_kernel``) before anything plans, proves, lowers, runs or
    interprets it: a rejected kernel ends the command with the verifier's located,
    rule-numbered diagnostics (exit 1).  Only ``show``, which just prints the kernel,
    passes ``verified=False``.  With ``--symbolic`` (``check``) the bindings are
    dropped and the kernel is verified for all symbol values; ``--bound`` declarations
    (which must name the kernel's symbols) decide S10's zero-trip loops.
    """
    loaded = load_kernel(args.kernel)
    bindings = {**loaded.bindings, **parse_bindings(getattr(args, "bind", None))}
    if getattr(args, "symbolic", False):
        bindings = {}
    bounds = symbol_bounds(args)
    unknown = sorted(set(bounds) - set(loaded.kernel.symbols()))
    if unknown:
        known = ", ".join(loaded.kernel.symbols()) or "none"
        raise PlannerError(Diagnostic(
            f"--bound {', '.join(unknown)}: not a symbol of kernel {loaded.kernel.name!r} "
            f"(its symbols: {known})"), kind="usage")
    if verified:
        verify(loaded.kernel, bindings, bounds)
    return loaded, bindings
