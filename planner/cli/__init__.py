"""The ``planner`` command line: a thin shell over the library.

Each subcommand lives in its own module exposing ``register(subparsers)``; the
module list below is the only place that knows them all.  Registering imports no
solver, prover, compiler, numpy or web framework (the commands import them when they
run), so ``planner --help`` is quick.  A :class:`~planner.errors.PlannerError` is
caught here, rendered and turned into the exit status of :data:`EPILOG`; nothing else
prints a traceback for a user's mistake.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from planner.errors import PlannerError

COMMAND_MODULES = (
    "planner.cli.ir_cmds",
    "planner.cli.catalog_cmds",
    "planner.cli.plan_cmds",
    "planner.cli.serve_cmds",
    "planner.cli.lower_cmds",
    "planner.cli.survey_cmds",
    "planner.cli.report_cmds",
    "planner.cli.sweep_cmds",
)

#: Exit statuses (also in ``planner --help``).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

EPILOG = """\
exit status:
  0    success (an infeasible baseline in 'compare' is a result, not a failure)
  1    a refuted or unknown proof, an infeasible plan ('plan', 'compare' when a planned
       optimum is infeasible, 'lower'/'run' refuse one), a run that does not match the
       reference, a verifier error, a saved plan made for another target or kernel, or
       another error: an unknown target, a kernel or file that does not exist or
       cannot be read (a directory, no permission), an output file that cannot be
       written (--dot)
  2    a usage error: an unknown option, a missing or out-of-range argument (argparse),
       a malformed --bind/--bound, an unknown 'survey --example', or a combination of
       options the command refuses (kind "usage")
  130  interrupted (Ctrl-C)

Errors are printed on stderr as 'FILE:LINE: error [RULE]: MESSAGE' lines, never as a
traceback; --json changes only what goes to stdout.  A closed stdout ('| head') ends
the command quietly with status 0.
"""


def package_version() -> str:
    """The installed distribution's version, else ``planner.__version__``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("planner")
    except PackageNotFoundError:
        import planner

        return getattr(planner, "__version__", "unknown")


class _VersionAction(argparse.Action):
    """``--version``: like argparse's, but the version is looked up only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"planner {package_version()}")
        parser.exit(EXIT_OK)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="planner", description=__doc__.splitlines()[0],
                                     epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_VersionAction,
                        help="print 'planner X.Y.Z' and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def exit_status(exc: PlannerError) -> int:
    """2 for a usage error, else 1."""
    return EXIT_USAGE if exc.kind == "usage" else EXIT_FAILURE


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return _run(args)
    except BrokenPipeError:  # stdout closed early ('planner plan softmax | head -1')
        _discard_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    try:
        status = int(args.func(args) or 0)
    except PlannerError as exc:
        sys.stdout.flush()
        print(exc.render(), file=sys.stderr)
        return exit_status(exc)
    except OSError as exc:  # a file the user named: one line naming it, no traceback
        if isinstance(exc, BrokenPipeError) or exc.filename is None:
            raise
        sys.stdout.flush()
        print(f"error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILURE
    sys.stdout.flush()  # a closed pipe shows here, inside main, not at interpreter exit
    return status


def _discard_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush cannot fail."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no file descriptor (captured output)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
