"""``planner catalog list | show | validate | schema``: inspect and check target catalogs.

A thin layer over :mod:`planner.catalog`: every command builds a
:class:`~planner.catalog.CatalogRegistry` from ``--catalog-dir`` (repeatable) and
``PLANNER_CATALOG_PATH``, and raises :class:`~planner.errors.PlannerError` for the
CLI's boundary to render.  ``list``, ``show`` and ``validate`` print JSON with
``--json``; ``schema`` always does.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from planner.cli.common import add_catalog_dir_arg, add_json_arg, print_json
from planner.errors import PlannerError

if TYPE_CHECKING:  # planner.catalog (yaml, the loader) is imported when a command runs
    from planner.catalog import CatalogRegistry, Target

# One letter per operation (planner.catalog.Operation's values) for the access table.
_OP_LETTERS = {"read": "r", "write": "w", "mma_read": "m", "mma_write": "M", "atomic": "a",
               "copy_async": "c"}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``planner catalog ...`` to the top-level parser."""
    parser = subparsers.add_parser("catalog", help="list, show, validate target catalogs")
    sub = parser.add_subparsers(dest="catalog_command", required=True)

    def command(name: str, help_text: str, func: object) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        add_catalog_dir_arg(cmd)
        cmd.set_defaults(func=func)
        return cmd

    add_json_arg(command("list", "list known targets and the files they come from", _list),
                 "the targets ({targets: [{name, file, overrides}]})")
    show = command("show", "summarize a target: scopes, resources, access", _show)
    show.add_argument("name", help="a target name or a catalog file path")
    add_json_arg(show, "the target ({name, description, source, content_hash, backend, "
                 "content: the catalog document})")
    validate = command("validate", "check catalog files; report every mistake", _validate)
    validate.add_argument("files", nargs="+", metavar="FILE", help="catalog files")
    add_json_arg(validate, "one verdict per file ({files: [{file, ok, target, errors}]})")
    command("schema", "print the JSON Schema of catalog files (always JSON)", _schema)


def _registry(args: argparse.Namespace) -> CatalogRegistry:
    from planner.catalog import CatalogRegistry

    return CatalogRegistry.from_environment(args.catalog_dir)


def _list(args: argparse.Namespace) -> int:
    """Every visible target; each file is loaded, so a broken one is listed as broken (with
    its first error) and the command exits 1."""
    registry = _registry(args)
    entries = registry.list()
    errors: dict[str, str] = {}
    for e in entries:
        try:
            registry.get(e.name)
        except PlannerError as exc:
            first = exc.diagnostics[0].message if exc.diagnostics else str(exc)
            errors[e.name] = first.splitlines()[0] if first else "invalid"
    if args.json:
        print_json({"targets": [{"name": e.name, "file": str(e.path),
                                 "overrides": str(e.overrides) if e.overrides else None,
                                 "ok": e.name not in errors, "error": errors.get(e.name)}
                                for e in entries]})
        return 1 if errors else 0
    rows = [(e.name, str(e.path),
             f"BROKEN: {errors[e.name]}" if e.name in errors
             else f"overrides {e.overrides}" if e.overrides else "")
            for e in entries]
    print(_table(("target", "file", ""), rows))
    return 1 if errors else 0


def _show(args: argparse.Namespace) -> int:
    from planner.catalog import load_target_file

    name = args.name
    is_path = name.endswith((".yaml", ".yml")) or os.sep in name
    target = load_target_file(Path(name)) if is_path else _registry(args).get(name)
    if args.json:
        print_json(target_to_json(target))
    else:
        print(render_target(target))
    return 0


def target_to_json(target: Target) -> dict[str, object]:
    """What ``catalog show --json`` prints: the summary fields and the catalog document
    as its YAML loads (as ``GET /v1/catalogs/NAME`` answers it)."""
    import yaml

    from planner.catalog.loader import read_catalog_text

    source = Path(str(target.source))
    content = (json.loads(json.dumps(yaml.safe_load(read_catalog_text(source)), default=str))
               if source.is_file() else None)
    return {"name": target.name, "description": target.description,
            "source": str(target.source), "content_hash": target.content_hash,
            "backend": target.backend.value if target.backend else None,
            "default_parallel_scope": target.default_parallel_scope,
            "scopes": [s.name for s in target.scopes],
            "resources": [r.name for r in target.resources], "content": content}


def _validate(args: argparse.Namespace) -> int:
    from planner.catalog import load_target_file

    failures: list[PlannerError] = []
    verdicts: list[dict[str, object]] = []
    for file in args.files:
        try:
            target = load_target_file(Path(file))
        except PlannerError as exc:
            failures.append(exc)
            verdicts.append({"file": file, "ok": False, "target": None,
                             "errors": [d.to_json() for d in exc.diagnostics]})
            continue
        verdicts.append({"file": file, "ok": True, "target": target.name, "errors": []})
        if not args.json:
            print(f"ok  {file}  ({target.name}: {len(target.scopes)} scopes, "
                  f"{len(target.resources)} resources, {len(target.access)} access entries)")
    if args.json:
        print_json({"ok": not failures, "files": verdicts})
    if failures:
        raise PlannerError([d for exc in failures for d in exc.diagnostics], kind="catalog")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from planner.catalog import catalog_json_schema

    print(json.dumps(catalog_json_schema(), indent=2))
    return 0


# -- rendering -------------------------------------------------------------------------

def render_target(target: Target) -> str:
    """A readable summary: header, scope tree, resources, access table, costs."""
    from planner.catalog import Operation, format_byte_size

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
    legend = ", ".join(f"{letter}={op}" for op, letter in _OP_LETTERS.items()) + \
        "; (a,c): the only mma operands read in place"
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
    from planner.catalog import MmaOperand, Operation

    cell = "".join(letter for op, letter in _OP_LETTERS.items()
                   if target.can_access(scope, resource, Operation(op)))
    operands = target.mma_operands(scope, resource)
    if operands and len(operands) < len(MmaOperand):  # mma_operands narrows mma_read
        cell += "(" + ",".join(o.value for o in operands) + ")"
    return cell or "-"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in (header, *rows))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
