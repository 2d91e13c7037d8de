"""The ``planner`` command line: a thin shell over the library.

Each subcommand lives in its own module exposing ``register(subparsers)``; the
module list below is the only place that knows them all.  One
:class:`~planner.errors.PlannerError` is caught here, rendered and turned into
exit status 1; nothing else prints a traceback for a user's mistake.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from planner.errors import PlannerError

COMMAND_MODULES = (
    "planner.cli.ir_cmds",
    "planner.cli.catalog_cmds",
    "planner.cli.plan_cmds",
    "planner.cli.serve_cmds",
    "planner.cli.lower_cmds",
    "planner.cli.survey_cmds",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="planner", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PlannerError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
