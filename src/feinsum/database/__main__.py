"""``python -m feinsum.database``: inspect, upgrade, export, import, merge and prune.

Every command takes ``--db URL`` (a SQLite path or a SQLAlchemy URL; default
``$FEINSUM_DB``, else the per-user SQLite file).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from collections.abc import Sequence

from feinsum.checks import seconds_type
from feinsum.errors import FeinsumError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m feinsum.database",
        description="Manage feinsum's timing database.",
    )
    p.add_argument("--db", default=None,
                   help="database path or SQLAlchemy URL (default: $FEINSUM_DB, else the "
                        "per-user SQLite file)")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("info", help="where the database is, its schema version and counts")
    s.add_argument("url", nargs="?", default=None, help="database (overrides --db)")

    s = sub.add_parser("upgrade", help="upgrade the schema to this feinsum's version")
    s.add_argument("url", nargs="?", default=None, help="database (overrides --db)")

    s = sub.add_parser("export", help="write the records to a JSON-lines file")
    s.add_argument("file", help="output file (.jsonl, or .jsonl.gz to compress)")
    s.add_argument("--device", default=None, help="only this device (its key)")
    s.add_argument("--status", default=None,
                   help="only this status (e.g. ok); default: every record")

    s = sub.add_parser("import", help="import JSON-lines exports (idempotent)")
    s.add_argument("files", nargs="+")

    s = sub.add_parser("merge", help="add the records of other databases or exports")
    s.add_argument("others", nargs="+", help="database paths/URLs or export files")

    s = sub.add_parser("prune", help="delete stale measurements")
    s.add_argument("--older-than-days", type=seconds_type(unit="days"), default=None)
    s.add_argument("--loopy-below", default=None, help="measured with loopy older than this")
    s.add_argument("--pyopencl-below", default=None)
    s.add_argument("--feinsum-below", default=None)
    s.add_argument("--status", action="append", default=None,
                   help="only measurements with this status (repeatable)")
    s.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from feinsum.database import open_database

    url = getattr(args, "url", None) or args.db
    try:
        if args.command == "info":
            with open_database(url, readonly=True) as db:
                print(f"database:        {db.where}")
                print(f"schema version:  {db.schema_version()}")
                print(f"measurements:    {db.count()} ({db.count('ok')} ok)")
                shipped = db.shipped_store
                print(f"shipped records: {0 if shipped is None else shipped.count()}")
        elif args.command == "upgrade":
            with open_database(url, include_shipped=False) as db:
                print(f"{db.where}: schema version {db.schema_version()}")
        elif args.command == "export":
            with open_database(url, readonly=True, include_shipped=False) as db:
                n = db.export(args.file, device=args.device, status=args.status)
            print(f"wrote {n} measurements to {args.file}")
        elif args.command == "import":
            with open_database(url, include_shipped=False) as db:
                for f in args.files:
                    print(f"{f}: {db.import_file(f)}")
        elif args.command == "merge":
            with open_database(url, include_shipped=False) as db:
                for other in args.others:
                    print(f"{other}: {db.merge(other)}")
        elif args.command == "prune":
            with open_database(url, include_shipped=False) as db:
                age = (
                    None if args.older_than_days is None
                    else _dt.timedelta(days=args.older_than_days)
                )
                n = db.prune(
                    older_than=age, loopy_below=args.loopy_below,
                    pyopencl_below=args.pyopencl_below, feinsum_below=args.feinsum_below,
                    status=args.status, dry_run=args.dry_run,
                )
            print(f"{'would delete' if args.dry_run else 'deleted'} {n} measurements")
    except FeinsumError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
