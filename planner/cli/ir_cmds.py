"""``planner show``, ``planner check`` and ``planner interpret``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from planner.cli.common import (
    add_bind_arg,
    add_catalog_dir_arg,
    add_kernel_arg,
    compare_output,
    kernel_and_bindings,
    symbol_bounds,
)
from planner.errors import PlannerError, error


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="print a kernel's text IR (or JSON IR with --json)")
    add_kernel_arg(p)
    p.add_argument("--json", action="store_true", help="print the JSON IR")
    p.add_argument("--no-loc", action="store_true", help="omit source locations")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("check", help="verify a kernel; with --target also run the z3 proofs")
    add_kernel_arg(p)
    add_bind_arg(p)
    p.add_argument("--target", help="a catalog target name: adds can_access, factorization, "
                   "capacity, layout and 64-bit addressing proofs")
    p.add_argument("--symbolic", action="store_true",
                   help="prove for all symbol values (ignore the example's default bindings)")
    p.add_argument("--time-limit-ms", type=int, default=2000, help="per-proof z3 time limit")
    add_catalog_dir_arg(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("interpret", help="run the numpy reference interpreter on random inputs "
                       "and compare with the example's reference function")
    add_kernel_arg(p)
    add_bind_arg(p)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_interpret)


def cmd_show(args: argparse.Namespace) -> int:
    loaded = kernel_and_bindings(args, verified=False)[0]  # only prints: an invalid kernel too
    if args.json:
        from planner.ir.json_form import kernel_to_json

        print(json.dumps(kernel_to_json(loaded.kernel), indent=2))
    else:
        from planner.ir.printer import print_kernel

        sys.stdout.write(print_kernel(loaded.kernel, locations=not args.no_loc,
                                      base_dir=os.getcwd()))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    loaded, bindings = kernel_and_bindings(args)  # verified (for all values with --symbolic)
    print(f"{loaded.kernel.name}: verifier ok")
    if not args.target:
        return 0
    from planner.catalog import CatalogRegistry
    from planner.prove.proofs import prove_kernel

    target = CatalogRegistry.from_environment(args.catalog_dir).get(args.target)
    report = prove_kernel(loaded.kernel, target, bindings or None,
                          symbol_bounds=symbol_bounds(args), time_limit_ms=args.time_limit_ms)
    for r in report.results:
        print(f"  {r.status:8} {r.name:14} {r.subject}" + (f"  ({r.detail})" if r.detail else ""))
    if report.refuted or report.unknown:  # an assumption is listed, not an error
        raise PlannerError(report.diagnostics(), kind="proof")
    counts = {s: sum(r.status == s for r in report.results) for s in ("assumed", "unknown")}
    caveat = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    print(f"{loaded.kernel.name}: no proof refuted on {target.name}"
          + (f" ({caveat})" if caveat else "; all proved"))
    return 0


def cmd_interpret(args: argparse.Namespace) -> int:
    from planner.ir.interpreter import interpret, random_inputs

    loaded, bindings = kernel_and_bindings(args)
    inputs = random_inputs(loaded.kernel, bindings, seed=args.seed)
    outputs = interpret(loaded.kernel, inputs, bindings)
    shapes = ", ".join(f"{k}={v}" for k, v in sorted(bindings.items()))
    print(f"{loaded.kernel.name} [{shapes}]: interpreted")
    expected = loaded.expected(inputs)
    if expected is None:
        print("  (no reference function: nothing to compare)")
        return 0
    for name, want in expected.items():
        got = outputs[name]
        if got.shape != want.shape:
            raise error(f"output {name}: shape {got.shape} != reference {want.shape}")
        ok, err = compare_output(got, want)
        print(f"  {name}: max abs error {err:.3g} {'ok' if ok else 'MISMATCH'}")
        if not ok:
            raise error(f"output {name} differs from the reference (max abs error {err:.3g})",
                        kind="mismatch")
    return 0
