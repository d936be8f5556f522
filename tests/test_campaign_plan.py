"""Campaign PLANs: what a line means, and the one-line errors of bad PLANs and of a
scheduler that cannot be reached (no cluster needed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from feinsum.campaigns import parse_plan, read_plan
from feinsum.errors import PlanError

KERNEL_FILE = '''
import numpy as np
import loopy as lp

knl = lp.make_kernel(
    "{[iel, idof, jdof]: 0 <= iel < nelements and 0 <= idof, jdof < 8}",
    """
    out[iel, idof] = sum(jdof, mat[idof, jdof] * u[iel, jdof])  {id=apply}
    nrm[iel] = sum(jdof, u[iel, jdof] * u[iel, jdof])  {id=norm}
    """,
    [lp.GlobalArg("mat,u,out,nrm", np.float64, shape=lp.auto),
     lp.ValueArg("nelements", np.int32)],
    name="volume", lang_version=(2018, 2))
'''


def test_plan_lines_are_tune_arguments() -> None:
    plan = parse_plan("""
        # a comment line, then two jobs
        "ij,ej->ei" -s i=8,j=8,e=E -l E=1000 --budget 4 --device gpu  # trailing comment
        'ij,j->i' -s i=16,j=16 --no-peers --recipe generic --strategy random --seed 3
    """, budget=7)
    a, b = plan.jobs
    assert (a.line, a.budget, a.device, a.lengths, a.peers) == (3, 4, "gpu", {"E": 1000}, True)
    assert (b.line, b.budget, b.recipes, b.strategy, b.seed, b.peers) == (
        4, 7, ("generic",), "random", 3, False)
    assert a.label == "ij,ej->ei E=1000"
    assert b.tune_options()["recipes"] == ["generic"]


def test_runs_on_names_devices_by_type_or_name() -> None:
    from database_support import make_device

    (job,) = parse_plan('"ij,j->i" -s i=4,j=4 --device xeon').jobs
    cpu = make_device()
    gpu = make_device(name="NVIDIA H100", device_type="GPU")
    assert job.runs_on(cpu) and not job.runs_on(gpu)
    (job,) = parse_plan('"ij,j->i" -s i=4,j=4 --device GPU').jobs
    assert job.runs_on(gpu) and not job.runs_on(cpu)
    (job,) = parse_plan('"ij,j->i" -s i=4,j=4').jobs
    assert job.runs_on(gpu) and job.runs_on(cpu)


def test_kernel_lines_are_every_einsum_of_the_kernel(tmp_path: Path) -> None:
    f = tmp_path / "kernel.py"
    f.write_text(KERNEL_FILE)
    plan = parse_plan(f"--kernel {f} -l nelements=500 --budget 2\n"
                      f"--kernel {f}:knl -l nelements=500 --budget 2\n")
    # two einsums; the second line repeats the first with the same options: tuned once
    assert [j.line for j in plan.jobs] == [1, 1]
    assert [j.lengths for j in plan.jobs] == [{"nelements": 500}] * 2
    assert len({j.canonical_key for j in plan.jobs}) == 2
    assert plan.merged == ((2, 1), (2, 1))
    with pytest.raises(PlanError, match=r"line 1: --lengths: m is a length symbol of no "):
        parse_plan(f"--kernel {f} -l nelements=5,m=3")
    with pytest.raises(PlanError, match=r"line 1: give SUBSCRIPTS or --kernel, not both"):
        parse_plan(f'"ij,j->i" --kernel {f} -l nelements=5')


@pytest.mark.parametrize(("text", "message"), [
    ('"ij,j->i" -s i=4,j=4\n"ij,j->i" -s i=4', r"line 2: no length for index j"),
    ('"ij,j->i" -s i=4,j=4 --bogus', r"line 1: unrecognized arguments: --bogus"),
    ('"ij,j->i" -s i=4,j=4 --db x.sqlite', r"line 1: --db belongs on the `feinsum campaign`"),
    ('"ij,j->i" -s i=4,j=4 --json', r"line 1: --json belongs"),
    ('"ij,j->i" -s i=4,j=4 --budget 0',
     r"line 1: argument --budget: must be a whole number of at least 1, got '0'"),
    ('"ij,j->i" -s i=4,j=4 --workers -1',
     r"line 1: argument --workers: must be a whole number from 1 to 256, got '-1'"),
    ('"ij,j->i" -s i=4,j=4 --strategy best', r"line 1: argument --strategy: invalid choice"),
    ('"ij,j->i" -s i=4,j=4 --recipe nosuch', r"line 1: .*nosuch"),
    ('"ij,j->i" -s i=4,j=4 --device 0:1', r"line 1: --device 0:1: indices differ"),
    ('"ij,ej->ei" -s i=4,j=4,e=E', r"line 1: tuning needs a value .* -l E=\.\.\."),
    ('"ij,ej->ei" -s i=4,j=4,e=E -l F=3', r"line 1: --lengths: F is not a length symbol"),
    ('"ij,j->i -s i=4', r"line 1: No closing quotation"),
    ('"ij,j->i" -s i=4,j=4 --help', r"line 1: unrecognized arguments: --help"),
    ('"ij,j->i" -s i=4,j=4 --budget 2\n"ab,b->a" -s a=4,b=4 --budget 3',
     r"line 2: ab,b->a is the einsum of line 1 .* other options"),
    ("# only a comment\n\n", r"holds no job"),
    ('--kernel nosuch.py -l n=3', r"line 1: kernel file 'nosuch.py' does not exist"),
])
def test_bad_plans_name_the_line_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        parse_plan(text)


def test_read_plan_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="cannot read the PLAN"):
        read_plan(tmp_path / "missing.txt")
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PlanError, match="not a text file"):
        read_plan(tmp_path / "bin")


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FEINSUM_DB"}
    return subprocess.run([sys.executable, "-m", "feinsum.cli", "campaign", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_cli_rejects_a_bad_plan_before_connecting(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text('"ij,j->i" -s i=4,j=4\n\n"ij,j->i" -s i=4 --no-peers\n')
    # the scheduler address is never used: the PLAN is checked first
    p = _cli(str(plan), "--scheduler", "tcp://127.0.0.1:9")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        "feinsum campaign: error: " + f"{plan}, line 3: no length for index j: add e.g. "
        "-s j=16"]


def test_cli_unreachable_scheduler_is_a_one_line_error(tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="campaigns need dask.distributed")
    plan = tmp_path / "plan.txt"
    plan.write_text('"ij,j->i" -s i=4,j=4\n')
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    p = _cli(str(plan), "--scheduler", f"tcp://127.0.0.1:{port}", "--db", ":memory:")
    assert time.monotonic() - t0 < 30
    assert p.returncode == 1
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith(f"feinsum campaign: error: cannot reach the dask scheduler at "
                           f"tcp://127.0.0.1:{port} within 5 s")
    from feinsum.campaigns.cluster import connect
    from feinsum.errors import SchedulerUnreachableError

    with pytest.raises(SchedulerUnreachableError, match="'node1' is not a scheduler address"):
        connect("node1")
