"""``planner catalog list | show | validate | schema``: inspect and check target catalogs.

A thin layer over :mod:`planner.catalog`: every command builds a
:class:`~planner.catalog.CatalogRegistry` from ``--catalog-dir`` (repeatable) and
``PLANNER_CATALOG_PATH``, and raises :class:`~planner.errors.PlannerError` for the
CLI's boundary to render.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from planner.catalog import (
    CatalogRegistry,
    Operation,
    Target,
    catalog_json_schema,
    format_byte_size,
    load_target_file,
)
from planner.cli.common import add_catalog_dir_arg
from planner.errors import PlannerError

# One letter per operation for the access table.
_OP_LETTERS = {Operation.READ: "r", Operation.WRITE: "w", Operation.MMA_READ: "m",
               Operation.MMA_WRITE: "M", Operation.ATOMIC: "a", Operation.COPY_ASYNC: "c"}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``planner catalog ...`` to the top-level parser."""
    parser = subparsers.add_parser("catalog", help="list, show, validate target catalogs")
    sub = parser.add_subparsers(dest="catalog_command", required=True)

    def command(name: str, help_text: str, func: object) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        add_catalog_dir_arg(cmd)
        cmd.set_defaults(func=func)
        return cmd

    command("list", "list known targets and the files they come from", _list)
    command("show", "summarize a target: scopes, resources, access", _show).add_argument(
        "name", help="a target name or a catalog file path")
    command("validate", "check catalog files; report every mistake", _validate).add_argument(
        "files", nargs="+", metavar="FILE", help="catalog files")
    command("schema", "print the JSON Schema of catalog files", _schema)


def _registry(args: argparse.Namespace) -> CatalogRegistry:
    return CatalogRegistry.from_environment(args.catalog_dir)


def _list(args: argparse.Namespace) -> int:
    rows = [(e.name, str(e.path), f"overrides {e.overrides}" if e.overrides else "")
            for e in _registry(args).list()]
    print(_table(("target", "file", ""), rows))
    return 0


def _show(args: argparse.Namespace) -> int:
    name = args.name
    is_path = name.endswith((".yaml", ".yml")) or os.sep in name
    target = load_target_file(Path(name)) if is_path else _registry(args).get(name)
    print(render_target(target))
    return 0


def _validate(args: argparse.Namespace) -> int:
    failures: list[PlannerError] = []
    for file in args.files:
        try:
            target = load_target_file(Path(file))
        except PlannerError as exc:
            failures.append(exc)
            continue
        print(f"ok  {file}  ({target.name}: {len(target.scopes)} scopes, "
              f"{len(target.resources)} resources, {len(target.access)} access entries)")
    if failures:
        raise PlannerError([d for exc in failures for d in exc.diagnostics], kind="catalog")
    return 0


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(catalog_json_schema(), indent=2))
    return 0


# -- rendering -------------------------------------------------------------------------

def render_target(target: Target) -> str:
    """A readable summary: header, scope tree, resources, access table, costs."""
    backend = target.backend.value if target.backend else "none (planning only)"
    lines = [f"{target.name}: {target.description}",
             f"source   {target.source}  (sha256 {target.content_hash[:12]})",
             f"backend  {backend}; parallel(..., AUTOMATIC) binds to "
             f"{target.default_parallel_scope}",
             "", "scopes"]
    lines += _scope_tree(target, target.root_scope.name, "  ", "")
    lines += ["", "resources", _indent(_table(
        ("name", "class", "instance", "capacity", "align", "coherence", "slicing", "operations"),
        [(r.name, r.resource_class, r.instance_scope, format_byte_size(r.capacity),
          str(r.alignment), r.coherence.value, "yes" if r.slicing else "no",
          ", ".join(op.value for op in Operation if op in r.operations))
         for r in target.resources]))]
    legend = ", ".join(f"{letter}={op.value}" for op, letter in _OP_LETTERS.items())
    lines += ["", f"access  ({legend})", _indent(_table(
        ("scope", *(r.name for r in target.resources)),
        [(s.name, *(_access_cell(target, s.name, r.name) for r in target.resources))
         for s in target.scopes]))]
    c = target.costs
    lines += ["", "costs (per instance of the default parallel scope)",
              f"  clock {c.clock_ghz:g} GHz, {c.concurrent_instances} concurrent "
              f"{target.default_parallel_scope} instances",
              f"  cheap {c.cheap:g}/cycle, transcendental {c.transcendental:g}/cycle, "
              f"mma {c.mma:g} flops/cycle, barrier {c.barrier:g} cycles"]
    return "\n".join(lines)


def _scope_tree(target: Target, name: str, prefix: str, branch: str) -> list[str]:
    scope = target.scope(name)
    extent = "dynamic" if scope.extent is None else str(scope.extent)
    most = f", at most {scope.max_extent}" if scope.max_extent is not None else ""
    lines = [f"{prefix}{branch}{name}  (extent {extent}{most})"]
    children = target.children(name)
    for i, child in enumerate(children):
        last = i == len(children) - 1
        inner = prefix + ("" if not branch else ("   " if branch == "└─ " else "│  "))
        lines += _scope_tree(target, child.name, inner, "└─ " if last else "├─ ")
    return lines


def _access_cell(target: Target, scope: str, resource: str) -> str:
    cell = "".join(letter for op, letter in _OP_LETTERS.items()
                   if target.can_access(scope, resource, op))
    return cell or "-"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in (header, *rows))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
