"""``feinsum campaign``: the tuning jobs of a PLAN file on the devices of a dask cluster."""

from __future__ import annotations

import argparse
from typing import Any

from feinsum.checks import count_type, processes_type
from feinsum.cli.common import (
    add_db_argument,
    add_json_argument,
    emit_json,
)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    parser.epilog = ("PLAN: one job per line, each line what `feinsum tune` takes "
                     "(\"xre,rij,xej->ei\" -s x=3,r=3,i=35,j=35,e=E -l E=50000, or --kernel "
                     "FILE.py[:NAME] -l ...); # starts a comment. Example: feinsum campaign "
                     "plan.txt --scheduler tcp://node1:8786 --db postgresql+psycopg://...")
    parser.add_argument("plan", metavar="PLAN", help="the file of jobs")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="the dask scheduler (default: a cluster on this machine, one "
                        "worker per usable OpenCL device)")
    add_db_argument(parser)
    parser.add_argument("--budget", type=count_type(), default=None, metavar="N",
                        help="the budget of PLAN lines that give none (default: the "
                        "autotuner's, 100)")
    parser.add_argument("--records", choices=("auto", "client"), default="auto",
                        help="auto: workers write to the database when they can reach it, "
                        "else send their measurements here; client: always send them here")
    parser.add_argument("--workers-per-device", type=processes_type(), default=1, metavar="N",
                        help="without --scheduler: worker processes per device (builds "
                        "overlap, timing never does)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bars; print only the final table")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from feinsum.campaigns import campaign, read_plan
    from feinsum.campaigns.cluster import connect
    from feinsum.errors import CampaignError

    if args.scheduler is not None and args.workers_per_device != 1:
        raise CampaignError("--workers-per-device is for the cluster started without "
                            "--scheduler; start workers at the scheduler yourself")
    plan = read_plan(args.plan, budget=args.budget)  # a bad PLAN: before any connection
    client: Any = None if args.scheduler is None else connect(args.scheduler)
    db: Any = None
    try:
        from feinsum.cli.dbread import open_db

        db = open_db(args.db, write=True)
        result = campaign(plan, client, db=db, records=args.records,
                          progress=not (args.json or args.quiet),
                          workers_per_device=args.workers_per_device)
    finally:
        if client is not None:
            client.close()
        if db is not None:
            db.close()
    if args.json:
        emit_json({"scheduler": result.scheduler, "dashboard": result.dashboard,
                   "seconds": result.elapsed, "database": db.where,
                   "jobs": [{**vars(j), "speedup_over_peer": j.speedup_over_peer}
                            for j in result.jobs]})
    elif args.quiet:
        import sys

        from rich.console import Console

        Console(width=None if sys.stdout.isatty() else 160).print(result.table())
    if result.failed:
        raise CampaignError(f"{len(result.failed)} of {len(result.jobs)} jobs failed: "
                            + "; ".join(f"line {j.line} on {j.device}: {j.message}"
                                        for j in result.failed))
    return 0
