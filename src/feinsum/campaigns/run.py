"""``feinsum.campaign``: the jobs of a PLAN on a dask cluster's devices, from the client.

The client checks the PLAN, makes sure every worker owns its devices
(:class:`~feinsum.campaigns.owner.DeviceOwner`), asks the workers which device identities
they have, and submits one task per job and identity (``Client.submit`` with the identity's
resource), following them with ``as_completed`` and the workers' events: progress bars,
and the measurements it records itself when workers cannot reach the database. A task
whose worker dies is re-run by dask on another worker; it resumes from the database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from feinsum.campaigns.job import Assignment, JobOutcome, record_payload, record_payloads
from feinsum.campaigns.plan import Plan, read_plan
from feinsum.errors import CampaignError

if TYPE_CHECKING:
    from feinsum.database import Database


@dataclass
class JobResult:
    """One job on one device identity: ``status`` is ``ok``, ``failed`` (every candidate
    failed) or ``error`` (the job could not run; ``message`` says why)."""

    line: int
    label: str
    device: str
    status: str = "queued"
    message: str = ""
    worker: str | None = None
    best_recipe: str | None = None
    best_params: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None
    gflops: float | None = None
    peer: str | None = None
    peer_seconds: float | None = None
    evaluated: int = 0
    previous: int = 0
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def speedup_over_peer(self) -> float | None:
        if not self.seconds or not self.peer_seconds:
            return None
        return self.peer_seconds / self.seconds


@dataclass
class CampaignResult:
    """Every job's result, in PLAN order, and where the cluster was."""

    jobs: list[JobResult]
    scheduler: str
    dashboard: str | None
    elapsed: float

    @property
    def failed(self) -> list[JobResult]:
        return [j for j in self.jobs if not j.ok]

    @property
    def jobs_per_minute(self) -> float:
        return 60.0 * len(self.jobs) / self.elapsed if self.elapsed > 0 else 0.0

    def table(self) -> Any:
        from feinsum.campaigns.display import campaign_table

        return campaign_table(self)


def campaign(plan: Plan | str | os.PathLike[str], client: Any = None, *, db: Any = None,
             budget: int | None = None, records: str = "auto", progress: bool = True,
             workers_per_device: int = 1, console: Any = None) -> CampaignResult:
    """Run the tuning jobs of *plan* (a :class:`~feinsum.campaigns.Plan` or a PLAN file) on
    the devices of a dask cluster and record every measurement in *db*.

    :arg client: a ``distributed.Client``; ``None``: a cluster on this machine with
        *workers_per_device* workers for each usable OpenCL device.
    :arg db: the database (a :class:`~feinsum.database.Database`, path or URL; ``None``:
        the default). Workers write to it when they can reach it (a PostgreSQL server, or
        a SQLite file on the client's machine), else the client records what they send.
    :arg budget: the budget of PLAN lines that give none.
    :arg records: ``"auto"`` (as above) or ``"client"`` (workers always send their
        measurements to the client).
    :arg progress: progress bars, the dashboard address and the final table.

    A job naming no ``--device`` runs once on every distinct device identity of the
    cluster. Never do two jobs time on one physical device at once. The result lists every
    job; those that failed say why (nothing is raised for them).
    """
    from feinsum import checks
    from feinsum.campaigns.cluster import local_cluster, require_distributed
    from feinsum.database import Database, open_database

    budget = checks.optional_count("budget", budget)
    workers_per_device = checks.count("workers_per_device", workers_per_device,
                                      maximum=checks.MAX_PROCESSES)
    require_distributed()
    if records not in ("auto", "client"):
        raise CampaignError(f"records must be 'auto' or 'client', not {records!r}")
    if not isinstance(plan, Plan):
        plan = read_plan(plan, budget=budget)
    elif budget is not None:
        plan = dataclasses.replace(plan, jobs=tuple(
            j if j.budget is not None else dataclasses.replace(j, budget=budget)
            for j in plan.jobs))
    with contextlib.ExitStack() as stack:
        database = db if isinstance(db, Database) else stack.enter_context(open_database(db))
        if client is None:
            from distributed import Client

            cluster = stack.enter_context(local_cluster(workers_per_device))
            client = stack.enter_context(Client(cluster, set_as_default=False))
        return _Campaign(plan, client, database, records, progress, console).run()


def _has_plugin(dask_worker: Any) -> bool:
    from feinsum.campaigns.owner import PLUGIN_NAME

    return PLUGIN_NAME in dask_worker.plugins


class _Campaign:
    def __init__(self, plan: Plan, client: Any, db: Database, records: str, progress: bool,
                 console: Any) -> None:
        self.plan, self.client, self.db = plan, client, db
        self.records, self.progress, self.console = records, progress, console
        self.topic = f"feinsum-campaign-{uuid.uuid4().hex[:12]}"
        self.events: queue.Queue[Any] = queue.Queue()
        self.assignments: list[Assignment] = []
        self.results: list[JobResult] = []
        self.relayed: dict[int, list[dict[str, Any]]] = {}

    # {{{ before anything runs: the workers' devices, the assignments

    def _owners(self) -> dict[str, list[dict[str, Any]]]:
        """worker address -> the devices it owns."""
        from feinsum.campaigns.cluster import WORKER_TIMEOUT
        from feinsum.campaigns.owner import DeviceOwner, describe

        c = self.client
        try:
            c.wait_for_workers(1, timeout=WORKER_TIMEOUT)
        except (TimeoutError, OSError):
            raise CampaignError(f"no worker joined the scheduler {c.scheduler.address} "
                                f"within {WORKER_TIMEOUT:g} s; start workers with `dask "
                                f"worker {c.scheduler.address}`") from None
        if not all(c.run(_has_plugin).values()):
            # a worker without a usable device fails its set-up: describe() says why below
            with contextlib.suppress(Exception):
                c.register_plugin(DeviceOwner(), name=DeviceOwner.name)
        found = c.run(describe, on_error="return")
        owners = {w: d for w, d in found.items() if not isinstance(d, BaseException)}
        if not owners:
            why = "; ".join(f"{w}: {e}" for w, e in found.items())
            raise CampaignError(f"no worker of {c.scheduler.address} owns a usable OpenCL "
                                f"device ({why})")
        return owners

    def _assign(self, owners: Mapping[str, list[dict[str, Any]]]) -> None:
        from feinsum.database.engine import resolve_url
        from feinsum.database.records import hostname
        from feinsum.devices.opencl import DeviceInfo
        from feinsum.timing.measurement import Target

        identities: dict[str, dict[str, Any]] = {}
        for devices in owners.values():
            for d in devices:
                identities.setdefault(d["key"], d["info"])
        db_url = (None if self.records == "client" else
                  resolve_url(self.db.url).render_as_string(hide_password=False))
        for job in self.plan.jobs:
            chosen = [(k, info) for k, info in identities.items()
                      if job.runs_on(DeviceInfo.from_dict(info))]
            if not chosen:
                names = sorted({str(i["name"]) for i in identities.values()})
                raise CampaignError(
                    f"{self.plan.source}, line {job.line}: --device {job.device} names no "
                    f"device of the cluster (it has: {', '.join(names)})")
            for key, info in chosen:
                dev = DeviceInfo.from_dict(info)
                target = Target.make(job.einsum, job.lengths)
                known = self.db.query(job.einsum.with_lengths(dict(job.lengths))
                                      if job.lengths else job.einsum, key, status=None,
                                      lengths=target.lengths)
                a = Assignment(
                    index=len(self.assignments), job=job, device=info, topic=self.topic,
                    db_url=db_url, client_host=hostname(),
                    known=tuple(record_payload(r) for r in known),
                    roofline=self.db.get_roofline(dev))
                self.assignments.append(a)
                self.results.append(JobResult(job.line, job.label, dev.name))

    # }}}

    def run(self) -> CampaignResult:
        from distributed import as_completed

        from feinsum.campaigns.cluster import dashboard_link
        from feinsum.campaigns.display import CampaignProgress
        from feinsum.campaigns.job import run_assignment
        from feinsum.campaigns.owner import resource_name

        t0 = time.monotonic()
        self._assign(self._owners())
        dashboard = dashboard_link(self.client)
        if self.progress:
            import sys

            from rich.console import Console

            # rich assumes 80 columns when stdout is not a terminal: too narrow for the table
            self.console = self.console or Console(width=None if sys.stdout.isatty() else 160)
            self.console.print(f"campaign of {len(self.assignments)} jobs on "
                          f"{self.client.scheduler.address}; dask dashboard: "
                          f"{dashboard or 'not served (pip install bokeh)'}")
        bars = CampaignProgress(self.progress, self.console)
        for a in self.assignments:
            bars.add_job(a.index, f"{a.job.line}: {a.job.label} @ {self.results[a.index].device}",
                         a.job.budget)
        self.client.subscribe_topic(self.topic, self.events.put)
        futures = {}
        try:
            for a in self.assignments:
                f = self.client.submit(
                    run_assignment, a, key=f"feinsum-job-{a.index}-{self.topic}", pure=False,
                    resources={resource_name(a.device_key): 1})
                futures[f.key] = (f, a)
            done = as_completed([f for f, _ in futures.values()], loop=self.client.loop)
            while not done.is_empty():
                self._drain(bars, wait=0.2)
                for f in done.next_batch(block=False):
                    self._drain(bars)
                    self._finish(f, futures[f.key][1], bars)
            self._drain(bars)
        finally:
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic(self.topic)
            self._forget()
            bars.close()
        result = CampaignResult(self.results, self.client.scheduler.address, dashboard,
                                time.monotonic() - t0)
        if self.progress:
            self.console.print(result.table())
        return result

    # {{{ while it runs

    def _drain(self, bars: Any, wait: float = 0.0) -> None:
        """Handle the workers' events that have arrived (waiting up to *wait* for one)."""
        try:
            event = self.events.get(timeout=wait) if wait else self.events.get_nowait()
        except queue.Empty:
            return
        while True:
            self._event(event[1], bars)
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return

    def _event(self, msg: Mapping[str, Any], bars: Any) -> None:
        a = self.assignments[int(msg["index"])]
        kind, worker = msg["kind"], str(msg["worker"])
        if kind == "start":
            self.results[a.index].worker = worker
            bars.started(a.index, worker)
        elif kind == "measurement":
            p = msg["payload"]
            if not msg["recorded"]:
                self._record(a, [p])
            gflops = (p["flops"] / p["min_time"] * 1e-9
                      if p["status"] == "ok" and p["flops"] and p["min_time"] else None)
            bars.measured(a.index, worker, gflops)
        elif kind == "roofline" and self.db.get_roofline(a.device_info) is None:
            self.db.set_roofline(a.device_info, msg["data"])

    def _record(self, a: Assignment, payloads: list[dict[str, Any]]) -> None:
        """Record what a worker sent (once), and tell a re-run of the job what is known."""
        from distributed import Variable

        mine = self.relayed.setdefault(a.index, [])
        uids = {p["uid"] for p in mine}
        new = [p for p in payloads if p["uid"] not in uids]
        if not new:
            return
        record_payloads(self.db, new, a.job.einsum.with_lengths(dict(a.job.lengths))
                        if a.job.lengths else a.job.einsum, a.device_info)
        mine.extend(new)
        Variable(f"{self.topic}-{a.index}", client=self.client).set(mine)

    def _forget(self) -> None:
        """Delete the scheduler's copies of what the client recorded."""
        from distributed import Variable

        for index in self.relayed:
            with contextlib.suppress(Exception):
                Variable(f"{self.topic}-{index}", client=self.client).delete()

    def _finish(self, future: Any, a: Assignment, bars: Any) -> None:
        r = self.results[a.index]
        if future.status == "finished":
            out: JobOutcome = future.result()
            if not out.recorded_by_worker:
                self._record(a, out.measurements)
            r.worker, r.evaluated, r.previous = out.worker, out.evaluated, out.previous
            r.failures, r.peer, r.peer_seconds = out.failures, out.peer, out.peer_seconds
            if out.best is None:
                counts = ", ".join(f"{k}: {v}" for k, v in out.failures.items()) or "none ran"
                r.status, r.message = "failed", f"every candidate failed ({counts})"
            else:
                r.status = "ok"
                r.best_recipe, r.best_params = out.best["recipe"], out.best["params"]
                r.seconds, r.gflops = out.best["seconds"], out.best["gflops"]
        else:
            r.status, r.message = "error", _task_error(future)
        bars.finished(a.index, r.status if r.ok else f"{r.status}: {r.message}"[:80], r.worker)

    # }}}


def _task_error(future: Any) -> str:
    from distributed import KilledWorker

    try:
        exc = future.exception()
    except Exception as e:  # the future was lost (cancelled, scheduler gone)
        return f"{type(e).__name__}: {e}"
    if isinstance(exc, KilledWorker):
        return (f"its worker died {exc.allowed_failures + 1} times while running it (last "
                f"{exc.last_worker.address}); see that worker's log")
    return f"{type(exc).__name__}: {exc}"


# vim: foldmethod=marker
