"""Options and output helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="PATH|URL",
                        help="database path or SQLAlchemy URL (default: $FEINSUM_DB, else the "
                        "per-user database)")


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", metavar="DEVICE",
                        help='OpenCL device: "PLATFORM:DEVICE" indices or part of its name '
                        "(default: $PYOPENCL_CTX, else the first usable GPU, else CPU)")


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable JSON output")


def emit_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout (rich when stdout is a terminal, plain aligned text otherwise)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for c in columns:
        table.add_column(c)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    Console(width=160 if not sys.stdout.isatty() else None).print(table)


def fmt_float(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"
