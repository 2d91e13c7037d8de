"""``planner show``, ``planner check`` and ``planner interpret``.

Each prints its result as text, or with ``--json`` as one JSON document on stdout:
``show`` the JSON IR (:func:`planner.ir.json_form.kernel_to_json`); ``check`` the
verifier's and the proofs' verdicts in the shape of the service's ``/v1/check``
answer; ``interpret`` each output's error against the reference.  Errors always go to
stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from planner.cli.common import (
    add_bind_arg,
    add_catalog_dir_arg,
    add_json_arg,
    add_kernel_arg,
    compare_output,
    kernel_and_bindings,
    non_negative_int,
    positive_int,
    print_json,
    symbol_bounds,
)
from planner.errors import PlannerError, error


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="print a kernel's text IR (or JSON IR with --json)")
    add_kernel_arg(p)
    p.add_argument("--json", action="store_true",
                   help="print the JSON IR (planner.ir.json_form) instead of the text IR")
    p.add_argument("--no-loc", action="store_true", help="omit source locations")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("check", help="verify a kernel; with --target also run the z3 proofs")
    add_kernel_arg(p)
    add_bind_arg(p)
    p.add_argument("--target", help="a catalog target name: adds can_access, factorization, "
                   "capacity, layout and 64-bit addressing proofs")
    p.add_argument("--symbolic", action="store_true",
                   help="prove for all symbol values (ignore the example's default bindings)")
    p.add_argument("--time-limit-ms", type=positive_int, default=2000, metavar="MS",
                   help="per-proof z3 time limit in milliseconds, >= 1 (default 2000)")
    add_catalog_dir_arg(p)
    add_json_arg(p, "the verdict ({kernel, target, ok, verifier, proofs, diagnostics}, as "
                 "/v1/check answers)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("interpret", help="run the numpy reference interpreter on random inputs "
                       "and compare with the example's reference function")
    add_kernel_arg(p)
    add_bind_arg(p)
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="random input seed, >= 0 (default 0)")
    add_json_arg(p, "the result ({kernel, bindings, compared, ok, outputs: [{name, shape, "
                 "max_abs_error, ok}]})")
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
    if not args.target:
        if args.json:
            print_json({"kernel": loaded.kernel.name, "target": None, "ok": True,
                        "verifier": "ok", "proofs": [], "diagnostics": []})
        else:
            print(f"{loaded.kernel.name}: verifier ok")
        return 0
    from planner.catalog import CatalogRegistry
    from planner.prove.proofs import prove_kernel

    target = CatalogRegistry.from_environment(args.catalog_dir).get(args.target)
    report = prove_kernel(loaded.kernel, target, bindings or None,
                          symbol_bounds=symbol_bounds(args), time_limit_ms=args.time_limit_ms)
    if args.json:
        print_json({"kernel": loaded.kernel.name, "target": target.name, "ok": report.ok,
                    "verifier": "ok", "proofs": [r.to_json() for r in report.results],
                    "diagnostics": [d.to_json() for d in report.diagnostics()]})
        if report.refuted or report.unknown:
            raise PlannerError(report.diagnostics(), kind="proof")
        return 0
    print(f"{loaded.kernel.name}: verifier ok")
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
    doc: dict[str, object] = {"kernel": loaded.kernel.name, "bindings": dict(sorted(
        bindings.items())), "seed": args.seed, "compared": False, "ok": True, "outputs": []}
    if not args.json:
        print(f"{loaded.kernel.name} [{shapes}]: interpreted")
    expected = loaded.expected(inputs)
    if expected is None:
        doc["outputs"] = [{"name": name, "shape": list(out.shape), "max_abs_error": None,
                           "ok": None} for name, out in outputs.items()]
        if args.json:
            print_json(doc)
        else:
            print("  (no reference function: nothing to compare)")
        return 0
    doc["compared"] = True
    rows: list[dict[str, object]] = []
    failure = None
    for name, want in expected.items():
        got = outputs[name]
        if got.shape != want.shape:
            raise error(f"output {name}: shape {got.shape} != reference {want.shape}")
        ok, err = compare_output(got, want)
        rows.append({"name": name, "shape": list(got.shape), "max_abs_error": float(err),
                     "ok": bool(ok)})
        if not args.json:
            print(f"  {name}: max abs error {err:.3g} {'ok' if ok else 'MISMATCH'}")
        if not ok:
            failure = error(f"output {name} differs from the reference (max abs error "
                            f"{err:.3g})", kind="mismatch")
            break
    if args.json:
        doc["outputs"], doc["ok"] = rows, failure is None
        print_json(doc)
    if failure is not None:
        raise failure
    return 0
