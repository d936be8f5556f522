"""``feinsum list``: what the database holds, one row per einsum and device."""

from __future__ import annotations

import argparse
from dataclasses import asdict

from feinsum.checks import count_type
from feinsum.cli.common import (
    add_db_argument,
    add_json_argument,
    emit_json,
    fmt_rate,
    nothing_found,
    print_table,
)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_db_argument(parser)
    parser.add_argument("--device", metavar="TEXT",
                        help="only devices whose name or key contains TEXT")
    parser.add_argument("--einsum", metavar="TEXT",
                        help="only einsums whose canonical key or canonical text contains TEXT")
    parser.add_argument("--min-records", type=count_type(), default=1, metavar="N",
                        help="only groups with at least N records")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from feinsum.cli.dbread import groups, open_db

    with open_db(args.db) as db:
        where = db.where
        found = groups(db)
    if args.device:
        t = args.device.lower()
        found = [g for g in found if t in g.device_key.lower()]
    if args.einsum:
        t = args.einsum.lower()
        found = [g for g in found
                 if t in g.canonical_key.lower() or t in g.canonical_text.lower()
                 or t in g.label.lower()]
    found = [g for g in found if g.records >= args.min_records]
    if args.json:
        emit_json({"database": where, "groups": [asdict(g) for g in found]})
        return 0 if found else nothing_found("list", "no records match")
    print_table(f"{where}: {len(found)} einsum x device groups",
                ["einsum", "canonical key", "device", "records", "ok", "lengths",
                 "best GFLOP/s"],
                [[g.label, g.canonical_key, g.device_name,
                  g.records, g.ok, g.lengths, fmt_rate(g.best_gflops)] for g in found])
    return 0 if found else nothing_found("list", "no records match")
