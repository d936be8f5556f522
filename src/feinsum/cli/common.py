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
    from rich.text import Text

    table = Table(title=None if title is None else Text(title), show_lines=False)
    for c in columns:
        table.add_column(Text(c))
    for row in rows:  # Text: "[i0 i1]" is data, not rich markup
        table.add_row(*(Text("" if v is None else str(v)) for v in row))
    Console(width=160 if not sys.stdout.isatty() else None).print(table)


#: The exit code of a command that found nothing (as grep does) or met a user error.
NOTHING_FOUND = 1


def nothing_found(command: str, message: str) -> int:
    """Say on stderr that *command* found nothing, and return its exit code (1)."""
    print(f"feinsum {command}: {message}", file=sys.stderr)
    return NOTHING_FOUND


def fmt_float(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def fmt_rate(x: float | None) -> str:
    """Three significant digits, thousands in full (``12,400``, not ``1.24e+04``)."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def record_dict(r: Any) -> dict[str, Any]:
    """A :class:`~feinsum.database.Record` as JSON data."""
    from dataclasses import asdict

    d = asdict(r)
    d["ref"] = f"{r.source}#{r.id}"
    d["lengths"] = dict(r.lengths)
    d["params"] = dict(r.params)
    d["samples"] = list(r.samples)
    return d


def params_text(params: Any, limit: int = 70) -> str:
    if not params:
        return "-"
    text = ", ".join(f"{k}={v}" for k, v in dict(params).items())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def lengths_text(lengths: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in dict(lengths).items()) or "-"


def short_subscripts(e: Any) -> str:
    """Subscripts with one letter per index (``"ab,cb->ca"``), for tables and plots."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    names: dict[str, str] = {}
    for idx in (*e.in_indices, e.out_indices):
        for i in idx:
            names.setdefault(i, letters[len(names) % len(letters)])
    ins = ",".join("".join(names[i] for i in idx) for idx in e.in_indices)
    return f"{ins}->{''.join(names[i] for i in e.out_indices)}"


def einsum_label(spec: str | tuple[str, str] | None, fallback: str) -> str:
    """A short label of a stored canonical spec (its subscripts, rows and reduction); *spec*:
    its JSON, or ``dbread.einsum_text``'s (text, JSON)."""
    spec_json = spec[1] if isinstance(spec, tuple) else spec
    if spec_json is None:
        return fallback
    from feinsum.spec.serialize import spec_from_json

    try:
        e = spec_from_json(spec_json)
    except Exception:  # a spec this version cannot read: the key still identifies it
        return fallback
    rows = f" x{e.nrows}" if e.nrows > 1 else ""
    red = "" if e.reduction == "sum" else f" {e.reduction}"
    return f"{short_subscripts(e)}{rows}{red}"
