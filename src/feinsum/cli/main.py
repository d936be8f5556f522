"""Argument parsing, dispatch and the exit-code policy of the ``feinsum`` command.

Exit codes, the same for every command (docs/cli.rst): 0 found or did what was asked; 1
found nothing (``match`` no einsum, ``query``/``list``/``report`` no record, ``best`` no
record, only the default; ``devices`` no usable device; ``cache`` turned off) or a user
error (one line on stderr; ``--debug`` shows the traceback); 2 a usage error (argparse);
130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TextIO

# subcommand -> (the module defining its configure() and run(): under feinsum.cli, or a
# full module name for `campaign`, which lives in the package it drives; one-line help)
_COMMANDS: dict[str, tuple[str, str]] = {
    "devices": ("cmd_devices", "list OpenCL devices, whether they build kernels, their roofline"),
    "tune": ("cmd_tune", "autotune an einsum (given on the command line or in a kernel file)"),
    "campaign": ("feinsum.campaigns.command", "the tuning jobs of a PLAN file on the devices of "
                 "a dask cluster"),
    "match": ("cmd_match", "list the einsums found in a loopy kernel with their canonical keys"),
    "query": ("cmd_query", "records for an einsum on a device, fastest first"),
    "best": ("cmd_query", "the best record for an einsum (with the fallback chain)"),
    "show": ("cmd_show", "one record: recipe, parameters, timings and generated OpenCL code"),
    "list": ("cmd_list", "what the database holds: einsums x devices, best GFLOP/s"),
    "report": ("cmd_report", "roofline plot and speed-up table for a device (PNG/SVG/HTML)"),
    "db": ("cmd_db", "database maintenance: upgrade, export, import, merge, prune, "
                     "revalidate, info"),
    "cache": ("cmd_cache", "the hook's persistent cache of transformed programs: info, clear"),
}


def _module_name(module: str) -> str:
    return module if "." in module else f"feinsum.cli.{module}"


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (the problem and where the options are listed), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the "
                  "options)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="feinsum",
        description="A database of code transformations for batched einsums and kernel "
        "reductions on OpenCL devices.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks on errors")
        _configure(module, name, p)
    return parser


def _configure(module: str, name: str, parser: argparse.ArgumentParser) -> None:
    # Argument definitions live beside each command but must not import heavy modules:
    # every command module imports feinsum's heavy parts inside its run() only.
    mod = importlib.import_module(_module_name(module))
    mod.configure(parser, name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``feinsum`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from feinsum import __version__

        print(f"feinsum {__version__}")
        return 0
    if not args.command:
        parser.print_help()
        return 2
    module, _ = _COMMANDS[args.command]
    label = " ".join(filter(None, (args.command, getattr(args, "db_command", None))))
    run: Callable[[argparse.Namespace], int] = importlib.import_module(_module_name(module)).run
    import warnings

    from feinsum.errors import RooflineWarning

    def one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
        if issubclass(category, RooflineWarning):
            print(f"feinsum {label}: warning: {message}", file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    show = warnings.showwarning
    warnings.showwarning = one_line
    try:
        return run(args) or 0
    except KeyboardInterrupt:
        print(f"feinsum {label}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from feinsum.errors import FeinsumError

        if getattr(args, "debug", False):
            raise
        if isinstance(exc, FeinsumError):
            print(f"feinsum {label}: error: {exc}", file=sys.stderr)
            return 1
        if isinstance(exc, (OSError, ValueError)):
            print(f"feinsum {label}: error: {exc}", file=sys.stderr)
            return 1
        print(
            f"feinsum {label}: internal error: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1
    finally:
        warnings.showwarning = show


if __name__ == "__main__":
    sys.exit(main())
