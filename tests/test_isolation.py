"""Worker processes: planted crashing, hanging, wrong and invalid candidates are recorded
with their category and the pool goes on; timings never overlap builds on a CPU device."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import feinsum as f
from feinsum.recipes import load_recipe_file
from feinsum.timing.isolation import WorkerPool
from feinsum.timing.measurement import Candidate, MeasureOptions, Target

PLANTED = Path(__file__).parent / "recipes_for_tests" / "planted.py"


@pytest.fixture(scope="module")
def target() -> Target:
    D = f.array("D", (35, 35), np.float64)
    u = f.array("u", ("E", 35), np.float64)
    return Target.make(f.einsum("ij,ej->ei", D, u), {"E": 2000})


@pytest.fixture(scope="module")
def pool(cl_device):  # type: ignore[no-untyped-def]
    from feinsum.devices.opencl import device_info

    with WorkerPool(device_info(cl_device), size=2) as p:
        yield p


def candidate(target: Target, mode: str, wg: int = 2, **opts: object) -> Candidate:
    options = MeasureOptions(min_time=0.01, build_timeout=3.0, run_timeout=10.0).with_overrides(
        **opts)
    return Candidate.make(target, load_recipe_file(PLANTED), {"mode": mode, "wg": wg}, options)


def test_planted_failures_are_categorised_and_the_pool_goes_on(pool, target):
    modes = ["abort", "ok", "segfault", "hang", "wrong", "invalid", "compile"]
    for mode in modes:
        pool.submit(candidate(target, mode))
    results = {m.params["mode"]: m for m in pool.drain()}
    assert set(results) == set(modes)
    expected = {
        "ok": "ok",
        "abort": "compile-error",  # the process died while generating code
        "segfault": "compile-error",
        "hang": "timeout",
        "wrong": "wrong-result",
        "invalid": "invalid",
        "compile": "compile-error",
    }
    got = {mode: m.status for mode, m in results.items()}
    assert got == expected, {k: results[k].message for k in got}
    assert "SIGABRT" in results["abort"].message
    assert "SIGSEGV" in results["segfault"].message
    assert "3 s" in results["hang"].message and "codegen" in results["hang"].message
    assert "relative error" in results["wrong"].message
    assert "planted" in results["invalid"].message
    assert "no-such-option" in results["compile"].message
    assert results["ok"].timing is not None and results["ok"].timing.median > 0
    assert pool.replaced == 3  # abort, segfault and the killed hang
    # the replacements work
    again = pool.measure(candidate(target, "ok", wg=4))
    assert again.ok, again.message


def test_timings_never_overlap_builds_on_a_cpu(pool, target, cl_device):
    if not pool.exclusive:
        pytest.skip("not a CPU device: timings may overlap builds")
    start = len(pool.timeline)
    for wg in (2, 4):
        pool.submit(candidate(target, "ok", wg))
    pool.submit(candidate(target, "wrong", 4))
    done = pool.drain()
    assert [m.status for m in done].count("ok") == 2
    spans = pool.timeline[start:]
    timings = [(a, b) for state, a, b in spans if state == "timing"]
    builds = [(a, b) for state, a, b in spans if state in ("preparing", "starting")]
    assert len(timings) == 2 and len(builds) >= 3
    for t0, t1 in timings:
        for b0, b1 in builds:
            assert b1 <= t0 or b0 >= t1, f"build {b0:.3f}-{b1:.3f}, timing {t0:.3f}-{t1:.3f}"


def _running(pid: int) -> bool:
    try:  # a zombie (state Z) has exited
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_the_process_that_started_them(cl_device, tmp_path):  # type: ignore[no-untyped-def]
    """A pool's owner SIGKILLed (a campaign's worker killed): its workers go too, even one
    suspended while another times."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "owner.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from feinsum.devices.opencl import device_info, get_device\n"
        "from feinsum.timing.isolation import WorkerPool\n"
        "pool = WorkerPool(device_info(get_device()), size=2)\n"
        "while any(w.state == 'starting' for w in pool._workers):\n"
        "    pool._receive(pool._workers[0], []); pool._receive(pool._workers[1], [])\n"
        "    time.sleep(0.1)\n"
        "pids = [w.proc.pid for w in pool._workers]\n"
        "os.kill(pids[1], signal.SIGSTOP)\n"
        "print(*pids, flush=True)\n"
        "time.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 10
        alive = pids
        while alive and time.monotonic() < deadline:
            alive = [p for p in pids if _running(p)]
            time.sleep(0.1)
        assert not alive, f"workers {alive} outlived their pool's process"
    finally:
        owner.kill()
