"""Campaigns with real processes: a ``dask scheduler`` and two ``dask worker`` processes on
this machine (both on the default OpenCL device: ONE physical device), PostgreSQL, four
small jobs. Every job is recorded, no configuration twice, and the recorded timing
intervals never overlap; the same with one worker SIGKILLed mid-campaign.

The PostgreSQL tests follow the ``postgres`` marker of the database tests (skipped without
``FEINSUM_TEST_POSTGRES_URL``, required in CI); without ``distributed`` they skip too.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ("database_fixtures",)

distributed = pytest.importorskip(
    "distributed", reason="campaigns need dask.distributed: pip install 'feinsum[campaign]'")

PLAN = """\
# four small jobs (tiny budgets)
"ij,j->i" -s i=16,j=16 --budget 2 --recipe generic --no-peers --workers 1
"ij,jk->ik" -s i=8,j=8,k=8 --budget 2 --no-peers --workers 1
"ei,ij->ej" -s e=E,i=8,j=8 -l E=64 --budget 2 --no-baseline --workers 1   # peers timed
"ij,ij->i" -s i=32,j=4 --budget 2 --no-peers --no-baseline --workers 1
"""
#: a dead worker's device lock is free again after this (the default, 30 s, is for clusters)
LEASE_ENV = {"DASK_DISTRIBUTED__SCHEDULER__LOCKS__LEASE_TIMEOUT": "3s",
             "DASK_DISTRIBUTED__SCHEDULER__LOCKS__LEASE_VALIDATION_INTERVAL": "0.5s"}


def _device_selection() -> str:
    """``FEINSUM_DEVICES`` naming the default device by its indices."""
    import pyopencl as cl

    from feinsum.devices.opencl import get_device

    dev = get_device()
    for p, platform in enumerate(cl.get_platforms()):
        for d, other in enumerate(platform.get_devices()):
            if other == dev:
                return f"{p}:{d}"
    raise AssertionError("the default device is on no platform")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **LEASE_ENV, "PYTHONUNBUFFERED": "1", **extra}


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``dask scheduler`` process; its address."""
    d = tmp_path_factory.mktemp("scheduler")
    info = d / "scheduler.json"
    with open(d / "scheduler.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", "0", "--no-dashboard", "--scheduler-file", str(info)],
            stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=d)
    try:
        deadline = time.monotonic() + 60
        while not info.exists() or not info.read_text().strip():
            assert proc.poll() is None, (d / "scheduler.log").read_text()
            assert time.monotonic() < deadline, "the scheduler did not start in 60 s"
            time.sleep(0.1)
        time.sleep(0.2)
        yield str(json.loads(info.read_text())["address"])
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def workers(scheduler: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two ``dask worker`` processes owning the default device: the first declares it with
    ``--preload feinsum.campaigns.owner``, the second gets the plugin from the campaign.
    (The test that kills one comes last.)"""
    tmp_path = tmp_path_factory.mktemp("workers")
    sel = _device_selection()
    procs = []
    try:
        for k in range(2):
            preload = ["--preload", "feinsum.campaigns.owner"] if k == 0 else []
            with open(tmp_path / f"worker{k}.log", "wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "distributed.cli.dask_worker", scheduler,
                     "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", f"w{k}",
                     *preload],
                    stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                    env=_env(FEINSUM_DEVICES=sel)))
        yield procs
    finally:
        for p in procs:
            _stop(p)


@pytest.fixture(scope="module")
def client(scheduler: str, workers: list[Any]) -> Iterator[Any]:
    c = distributed.Client(scheduler, timeout=10, set_as_default=False)
    try:
        c.wait_for_workers(2, timeout=90)
        yield c
    finally:
        c.close()


def _seed_roofline(db: Any) -> Any:
    """A made-up roofline for the device (the microbenchmarks take longer than the jobs)."""
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.timing.roofline import Roofline

    info = device_info(get_device())
    db.set_roofline(info, Roofline(info.key, 1e10, 1e10, {"float32": 1e11, "float64": 5e10},
                                   "2026-01-01T00:00:00").as_dict())
    return info


def _check_records(db: Any, result: Any, info: Any) -> None:
    """Every job recorded (budget + untransformed where timed), no configuration twice, no
    two timing intervals overlapping."""
    import sqlalchemy as sa

    from feinsum.campaigns import parse_plan
    from feinsum.timing.measurement import Target

    assert [j.status for j in result.jobs] == ["ok"] * 4, [j.message for j in result.jobs]
    plan = parse_plan(PLAN)
    for job in plan.jobs:
        target = Target.make(job.einsum, job.lengths)
        e = job.einsum.with_lengths(job.lengths) if job.lengths else job.einsum
        recs = db.query(e, info, status=None, lengths=target.lengths, include_shipped=False)
        assert len(recs) == 2 + job.baseline, (job.text, recs)
    with db.user_store.reading() as conn:
        dup = conn.execute(sa.text(
            "SELECT count(*) FROM (SELECT 1 FROM measurements GROUP BY einsum_id, device_id, "
            "recipe_id, configuration_id, lengths_key HAVING count(*) > 1) AS d")).scalar()
        assert dup == 0
        spans = conn.execute(sa.text(
            "SELECT timing_started_at, timing_ended_at FROM measurements "
            "WHERE timing_started_at IS NOT NULL ORDER BY timing_started_at")).all()
    assert len(spans) >= 8
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, f"two timings overlapped: one ended at {end}, one began {start}"


@pytest.mark.postgres
def test_campaign_on_two_workers_of_one_device(client: Any, pg_schema_url: str,
                                               tmp_path: Path) -> None:
    import feinsum
    from feinsum.database import open_database

    plan = tmp_path / "plan.txt"
    plan.write_text(PLAN)
    with open_database(pg_schema_url, include_shipped=False) as db:
        info = _seed_roofline(db)
        result = feinsum.campaign(plan, client, db=db, progress=False)
        _check_records(db, result, info)
        assert len({j.worker for j in result.jobs}) == 2  # both workers ran jobs
        peer = next(j for j in result.jobs if j.line == 4)
        assert peer.peer is not None and peer.speedup_over_peer is not None
        n = db.count(status=None)
        again = feinsum.campaign(plan, client, db=db, progress=False)  # resumed: nothing new
        assert all(j.ok and j.evaluated == 0 for j in again.jobs)
        assert db.count(status=None) == n


BROKEN_RECIPE = '''
from feinsum.recipes import Choice, ParameterSpace, Recipe


def apply(t_unit, p, e, device):
    raise RuntimeError("this recipe never builds")


RECIPE = Recipe("broken", applies=lambda e, d: None,
                space=lambda e, d: ParameterSpace(x=Choice([1, 2])),
                default=lambda e, d: {"x": 1}, apply=apply)
'''


def test_campaign_recorded_by_the_client(client: Any, tmp_path: Path) -> None:
    """Workers told to send their measurements to the client (what they do when they
    cannot reach the database): recorded once; a job whose every candidate fails is
    reported as failed, once, not retried."""
    from rich.console import Console

    import feinsum
    from feinsum.campaigns import parse_plan
    from feinsum.database import open_database

    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "broken.py").write_text(BROKEN_RECIPE)
    plan = parse_plan(
        '"ij,j->i" -s i=16,j=16 --budget 2 --recipe generic --no-peers\n'
        f'"ij,j->i" -s i=24,j=8 --budget 2 --recipe broken --recipe-path {tmp_path}/recipes '
        "--no-peers --no-baseline\n")
    out = io.StringIO()
    with open_database(tmp_path / "client.sqlite", include_shipped=False) as db:
        _seed_roofline(db)
        result = feinsum.campaign(plan, client, db=db, records="client",
                                  console=Console(file=out, width=200))
        text = out.getvalue()  # the dashboard, a bar per job and worker, the table
        assert "campaign of 2 jobs on" in text and "dask dashboard: " in text
        assert "job 1: ij,j->i @" in text and "worker 127.0.0.1:" in text
        assert "failed: every candidate failed (compile-error: 2)" in text
        assert "best recipe" in text and "2 (+0 before)" in text
        good, bad = result.jobs
        assert good.ok and good.evaluated == 2
        assert bad.status == "failed" and "every candidate failed" in bad.message
        assert bad.failures == {"compile-error": 2}
        assert db.count(status=None) == 5  # 2 + untransformed, 2 failures
        again = feinsum.campaign(plan, client, db=db, records="client", progress=False)
        assert [j.evaluated for j in again.jobs] == [0, 0]
        assert db.count(status=None) == 5


def test_cli_campaign_at_a_scheduler(client: Any, scheduler: str, tmp_path: Path) -> None:
    from feinsum.database import open_database

    db = tmp_path / "cli.sqlite"
    with open_database(db, include_shipped=False) as d:
        _seed_roofline(d)
    plan = tmp_path / "plan.txt"
    plan.write_text('"ij,j->i" -s i=8,j=8 --budget 1 --recipe generic --no-peers '
                    "--no-baseline --workers 1\n")
    cmd = [sys.executable, "-m", "feinsum.cli", "campaign", str(plan), "--scheduler",
           scheduler, "--db", str(db)]
    p = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    (job,) = json.loads(p.stdout)["jobs"]
    assert job["status"] == "ok" and job["evaluated"] == 1 and job["best_recipe"] == "generic"
    plan.write_text('"ij,j->i" -s i=8,j=8 --device "no such device"\n')
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode == 1
    (line,) = p.stderr.strip().splitlines()
    assert "line 1: --device no such device names no device of the cluster" in line


@pytest.mark.postgres
def test_campaign_survives_a_killed_worker(client: Any, workers: list[Any],
                                           pg_schema_url: str) -> None:
    import feinsum
    from feinsum.campaigns import parse_plan
    from feinsum.database import open_database

    victim = workers[1]
    address = next(w for w, info in client.scheduler_info()["workers"].items()
                   if info["name"] == "w1")
    box: dict[str, Any] = {}
    with open_database(pg_schema_url, include_shipped=False) as db:
        info = _seed_roofline(db)

        def run() -> None:
            try:
                box["result"] = feinsum.campaign(parse_plan(PLAN), client, db=db,
                                                 progress=False)
            except BaseException as exc:  # reported by the test below
                box["error"] = exc

        t = threading.Thread(target=run)
        t.start()
        deadline = time.monotonic() + 120
        running: list[str] = []
        while not (db.count(status=None) >= 1 and running):
            assert t.is_alive(), box
            assert time.monotonic() < deadline, "the campaign did not get going"
            time.sleep(0.05)
            running = list(client.processing(workers=[address]).get(address, ()))
        victim.send_signal(signal.SIGKILL)
        t.join(240)
        assert not t.is_alive(), "the campaign did not finish after a worker was killed"
        assert "error" not in box, box.get("error")
        result = box["result"]
        _check_records(db, result, info)
        for key in running:  # the jobs it was running were re-run on the other worker
            index = int(key.split("-")[2])
            assert result.jobs[index].ok and result.jobs[index].worker != address
