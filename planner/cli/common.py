"""Argument helpers shared by the CLI subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path

from planner.ir.load import LoadedKernel, load_kernel, parse_bindings


def add_kernel_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", help="an example .py file or name, a text IR file or a .json IR file")


def add_bind_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bind", action="append", metavar="NAME=VALUE",
                   help="bind a kernel symbol (repeatable); overrides the example's defaults")


def add_catalog_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog-dir", action="append", type=Path, default=[], metavar="DIR",
                   help="extra directory of target catalogs (repeatable)")


def kernel_and_bindings(args: argparse.Namespace) -> tuple[LoadedKernel, dict[str, int]]:
    loaded = load_kernel(args.kernel)
    bindings = {**loaded.bindings, **parse_bindings(getattr(args, "bind", None))}
    return loaded, bindings
