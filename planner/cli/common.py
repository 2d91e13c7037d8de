"""Argument helpers shared by the CLI subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path

from planner.ir.load import (
    DEFAULT_SYMBOL_BOUNDS,
    LoadedKernel,
    load_kernel,
    parse_bindings,
    parse_bounds,
)
from planner.ir.verify import verify
from planner.lower.backends import compare_output, max_abs_error

__all__ = ["add_bind_arg", "add_catalog_dir_arg", "add_kernel_arg", "compare_output",
           "kernel_and_bindings", "max_abs_error", "symbol_bounds"]


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
    ``server.service.decode_kernel``) before anything plans, proves, lowers, runs or
    interprets it: a rejected kernel ends the command with the verifier's located,
    rule-numbered diagnostics (exit 1).  Only ``show``, which just prints the kernel,
    passes ``verified=False``.  With ``--symbolic`` (``check``) the bindings are
    dropped and the kernel is verified for all symbol values.
    """
    loaded = load_kernel(args.kernel)
    bindings = {**loaded.bindings, **parse_bindings(getattr(args, "bind", None))}
    if getattr(args, "symbolic", False):
        bindings = {}
    if verified:
        verify(loaded.kernel, bindings)
    return loaded, bindings
