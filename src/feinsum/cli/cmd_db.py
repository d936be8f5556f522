"""``feinsum db``: upgrade, export, import, merge, prune, revalidate and inspect the timing
database (the operations of :class:`feinsum.database.Database`, and
:func:`feinsum.revalidate`)."""

from __future__ import annotations

import argparse
import datetime as _dt
from typing import Any

from feinsum.checks import processes_type, seconds_type
from feinsum.cli.common import (
    add_db_argument,
    add_json_argument,
    emit_json,
    nothing_found,
)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    sub = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_db_argument(p)
        add_json_argument(p)
        return p

    p = action("info", "where the database is, its schema version and record counts")
    p.add_argument("url", nargs="?", help="database path or URL (overrides --db)")
    p = action("upgrade", "create the database, or upgrade its schema to this feinsum's")
    p.add_argument("url", nargs="?", help="database path or URL (overrides --db)")
    p = action("export", "write the records to a JSON-lines file (.jsonl, or .jsonl.gz)")
    p.add_argument("file")
    p.add_argument("--device", metavar="KEY", help="only this device (its key)")
    p.add_argument("--status", default=None, help="only this status (default: every record)")
    p.add_argument("--recipe", default=None, help="only this recipe")
    p = action("import", "import JSON-lines exports (records already present are skipped)")
    p.add_argument("files", nargs="+")
    p = action("merge", "add the records of other databases (paths, URLs) or export files")
    p.add_argument("others", nargs="+")
    p = action("prune", "delete stale measurements (any of the criteria)")
    p.add_argument("--older-than-days", type=seconds_type(unit="days"), default=None,
                   metavar="DAYS", help="measured more than DAYS days ago")
    p.add_argument("--loopy-below", metavar="VERSION", help="measured with an older loopy")
    p.add_argument("--pyopencl-below", metavar="VERSION")
    p.add_argument("--feinsum-below", metavar="VERSION")
    p.add_argument("--stale-recipes", action="store_true",
                   help="measured with a recipe version other than the current one (run "
                   "`feinsum db revalidate` first: records whose code is unchanged then "
                   "are at the current version)")
    p.add_argument("--retired", action="store_true",
                   help="retired by revalidation (their code changed)")
    p.add_argument("--status", action="append", default=None,
                   help="only measurements with this status (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    p = action("revalidate", "generate the code of records of older recipe (or loopy) "
               "versions again: keep those whose code is unchanged under the current "
               "versions, retire the others (no device needed)")
    p.add_argument("targets", nargs="*", metavar="DB|FILE.jsonl",
                   help="databases (paths, URLs) or JSON-lines exports, rewritten in place "
                   "(beside --db; neither: the default database)")
    p.add_argument("--all", action="store_true", dest="everything",
                   help="also check the records of current versions")
    p.add_argument("--adopt", action="store_true",
                   help="also fingerprint records measured before fingerprints at older "
                   "recipe versions, trusting that today's code is the code they timed")
    p.add_argument("--jobs", type=processes_type(), default=None, metavar="N",
                   help="processes generating code (default: CPU count, at most 4)")
    p.add_argument("--recipe-path", action="append", default=None, metavar="DIR",
                   help="also load recipes from this directory or file (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="count, change nothing")


def _report(r: Any) -> dict[str, int]:
    return {"added": r.added, "skipped": r.skipped, "devices": r.devices,
            "einsums": r.einsums, "rooflines": r.rooflines, "peers": r.peers}


def run(args: argparse.Namespace) -> int:
    from feinsum.cli.dbread import open_db
    from feinsum.errors import FeinsumError

    url = getattr(args, "url", None) or args.db
    cmd = args.db_command
    out: dict[str, Any]
    if cmd == "info":
        with open_db(url) as db:
            shipped = db.shipped_store
            out = {"database": db.where, "schema_version": db.schema_version(),
                   "measurements": db.count(), "ok": db.count("ok"),
                   "shipped": 0 if shipped is None else shipped.count(),
                   "revision": db.revision()}
        text = (f"database:        {out['database']}\nschema version:  "
                f"{out['schema_version']}\nmeasurements:    {out['measurements']} "
                f"({out['ok']} ok)\nshipped records: {out['shipped']}")
    elif cmd == "upgrade":
        from feinsum.database import open_database

        with open_database(url, include_shipped=False) as db:
            out = {"database": db.where, "schema_version": db.schema_version()}
        text = f"{out['database']}: schema version {out['schema_version']}"
    elif cmd == "export":
        with open_db(url) as db:
            n = db.export(args.file, device=args.device, status=args.status,
                          recipe=args.recipe)
        out = {"file": args.file, "measurements": n}
        text = f"wrote {n} measurements to {args.file}"
    elif cmd in ("import", "merge"):
        from feinsum.database import open_database

        sources = args.files if cmd == "import" else args.others
        out = {"sources": {}}
        lines = []
        with open_database(url, include_shipped=False) as db:
            for s in sources:
                r = db.import_file(s) if cmd == "import" else db.merge(s)
                out["sources"][s] = _report(r)
                lines.append(f"{s}: {r}")
        text = "\n".join(lines)
    elif cmd == "prune":
        from feinsum.database import open_database

        if not any((args.older_than_days is not None, args.loopy_below, args.pyopencl_below,
                    args.feinsum_below, args.stale_recipes, args.retired, args.status)):
            raise FeinsumError("prune needs a criterion: --older-than-days, --loopy-below, "
                               "--pyopencl-below, --feinsum-below, --stale-recipes, "
                               "--retired or --status")
        versions = None
        if args.stale_recipes:
            from feinsum.recipes import recipes
            from feinsum.timing.measurement import UNTRANSFORMED, untransformed_version

            versions = {r.name: r.version for r in recipes()}
            versions[UNTRANSFORMED] = untransformed_version()
        age = None if args.older_than_days is None else _dt.timedelta(days=args.older_than_days)
        with open_database(url, include_shipped=False) as db:
            n = db.prune(older_than=age, loopy_below=args.loopy_below,
                         pyopencl_below=args.pyopencl_below, feinsum_below=args.feinsum_below,
                         recipe_versions=versions, retired=args.retired, status=args.status,
                         dry_run=args.dry_run)
        out = {"deleted": 0 if args.dry_run else n, "would_delete": n, "dry_run": args.dry_run}
        text = f"{'would delete' if args.dry_run else 'deleted'} {n} measurements"
    elif cmd == "revalidate":
        out, text = _revalidate(args, url)
    if args.json:
        emit_json(out)
    else:
        print(text)
    if cmd == "export" and not out["measurements"]:
        return nothing_found("db export", "no measurement matches (the file holds none)")
    return 0


def _revalidate(args: argparse.Namespace, url: str | None) -> tuple[dict[str, Any], str]:
    import sys

    from feinsum.database.engine import resolve_url, sqlite_path
    from feinsum.database.files import revalidation_target
    from feinsum.tuning.codecheck import revalidate

    def progress(done: int, total: int) -> None:
        if not args.json:
            print(f"  ... {done}/{total} records", file=sys.stderr, flush=True)

    kw = {"recipe_path": args.recipe_path, "dry_run": args.dry_run,
          "adopt": args.adopt, "everything": args.everything, "jobs": args.jobs,
          "progress": progress}
    targets = [*([url] if url else []), *args.targets] or [None]
    for target in targets:  # every one checked before any is revalidated
        path = None if target is None else sqlite_path(resolve_url(target))
        if path is not None:
            revalidation_target(path)
    reports = [revalidate(target, **kw) for target in targets]
    out = {"dry_run": args.dry_run, "targets": [
        {"target": r.where, "counts": r.counts, "note": r.note,
         "reasons": [{"action": a, "why": w, "recipe": n, "records": k}
                     for (a, w, n), k in sorted(r.reasons.items())]}
        for r in reports]}
    return out, "\n".join(r.summary() for r in reports)
