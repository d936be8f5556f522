"""Transforming in the background (:mod:`feinsum.hook.background`) under a real array
compiler: the first call of a compiled program runs it untransformed while a real worker
process transforms it; the next call after the worker is done runs the transformed
program; a failing worker leaves the program untransformed with one warning; a later
process (here: a cleared in-process cache) finds the program in the persistent cache."""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_arraycontext import require_arraycontext

from feinsum.hook import background
from feinsum.hook.report import HookWarning

E = 500


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_arraycontext()
    from feinsum.hook.program import clear_cache

    monkeypatch.setenv("FEINSUM_CACHE", str(tmp_path / "programs"))
    clear_cache()


def _step(actx: Any, D: Any, u: Any) -> Any:
    return actx.np.sin(actx.einsum("ij,ej->ei", D, u)) + 2 * u


def _program(cl_queue: Any, **options: Any) -> tuple[Any, Any, dict[str, Any], np.ndarray]:
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

    rng = np.random.default_rng(3)
    host = {"D": rng.random((35, 35)), "u": rng.random((E, 35))}
    ref = np.sin(host["u"] @ host["D"].T) + 2 * host["u"]
    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False, **options)
    arrays = {k: actx.from_numpy(v) for k, v in host.items()}
    return actx, actx.compile(lambda **kw: _step(actx, **kw)), arrays, ref


def _close(out: Any, ref: np.ndarray) -> bool:
    return bool(np.abs(out - ref).max() <= 1e-12 * np.abs(ref).max())


def test_first_call_untransformed_then_transformed(cl_queue: Any) -> None:
    actx, step, arrays, ref = _program(cl_queue, feinsum_background=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HookWarning)
        assert _close(actx.to_numpy(step(**arrays)), ref)
        first = actx.feinsum_last_report
        assert first.mode == "background" and not first.changed, first
        assert "in the background" in first.note
        assert actx.feinsum_wait(600)
        assert first is actx.feinsum_last_report  # the switch happens at the next call
        assert _close(actx.to_numpy(step(**arrays)), ref)
    report = actx.feinsum_last_report
    assert report.mode == "transform" and report.transformed == 1, report
    assert re.search(r"from a background process, .* in use from call \d", report.note), \
        report.note
    assert _close(actx.to_numpy(step(**arrays)), ref)

    # a new process finds the worker's program in the persistent cache: no worker then
    from feinsum.hook.program import clear_cache

    clear_cache()
    actx2, step2, arrays2, _ = _program(cl_queue, feinsum_background=True)
    assert _close(actx2.to_numpy(step2(**arrays2)), ref)
    assert actx2.feinsum_last_report.mode == "background"
    assert actx2.feinsum_wait(600)
    (tiered,) = actx2._feinsum_tiered
    assert tiered.preparation.job is None  # no worker process
    assert _close(actx2.to_numpy(step2(**arrays2)), ref)
    again = actx2.feinsum_last_report
    assert again.cached and again.cache == "disk" and again.transformed == 1, again
    assert "from the disk cache" in again.note


BROKEN_WORKERS = {
    # the worker process fails, saying why on standard error
    "fails": ("echo 'SystemError: the worker is broken' >&2\nexit 3",
              "status 3: SystemError: the worker is broken"),
    # it ends well but leaves a corrupt result ($3: the job directory)
    "corrupt result": ("printf 'not a pickle' > \"$3/result.pickle\"\nexit 0",
                       "its result could not be read"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_WORKERS))
def test_broken_worker_keeps_the_program(broken: str, cl_queue: Any, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    body, message = BROKEN_WORKERS[broken]
    script = tmp_path / "broken-python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setattr(background, "PYTHON", str(script))
    actx, step, arrays, ref = _program(cl_queue, feinsum_background=True)
    # the worker ends at once: the first call or the next one notices
    with pytest.warns(HookWarning, match=re.escape(message)):
        assert _close(actx.to_numpy(step(**arrays)), ref)
        assert actx.feinsum_wait(60)
        assert _close(actx.to_numpy(step(**arrays)), ref)
    report = actx.feinsum_last_report
    assert report.mode == "transform" and not report.changed
    assert "keeps running untransformed" in report.note
    with warnings.catch_warnings():  # one warning, not one per call
        warnings.simplefilter("error", HookWarning)
        assert _close(actx.to_numpy(step(**arrays)), ref)


def test_background_off(cl_queue: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEINSUM_BACKGROUND", "0")
    actx, step, arrays, ref = _program(cl_queue)
    assert _close(actx.to_numpy(step(**arrays)), ref)
    assert actx.feinsum_last_report.mode == "transform"
    assert actx.feinsum_last_report.transformed == 1
    assert not actx._feinsum_tiered


def test_slow_untransformed_programs_are_transformed_at_once(
        cl_queue: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A program whose untransformed call is predicted slow (here: any) is transformed at
    its first call: the first calls of a right-hand side that runs a minute untransformed
    are not worth the wait."""
    from feinsum.hook import payoff

    monkeypatch.setattr(payoff, "BACKGROUND_RUN_LIMIT", 0.0)
    actx, step, arrays, ref = _program(cl_queue, feinsum_background=True)
    assert _close(actx.to_numpy(step(**arrays)), ref)
    assert actx.feinsum_last_report.mode == "transform"
    assert actx.feinsum_last_report.transformed == 1
    assert not actx._feinsum_tiered


def test_loop_iterations() -> None:
    """Statements times their loops, each reduction's terms (nested ones multiplied out);
    None for lengths known only at run time."""
    import loopy as lp

    from feinsum.hook.payoff import loop_iterations, untransformed_seconds

    knl = lp.make_kernel(
        "{[e, i, j, k]: 0 <= e < 10 and 0 <= i, j < 4 and 0 <= k < 3}",
        """
        out[e, i] = sum(j, A[i, j] * sum(k, B[k, j] * u[e, k])) + sum(k, C[i, k])
        v[e] = 2 * u[e, 0]
        """, [lp.GlobalArg("A,B,C,u", np.float64, shape=lp.auto), ...],
        lang_version=(2018, 2))
    # out: 40 points x (1 + 4 x (1 + 3) + 3); v: 10 points
    assert loop_iterations(knl) == 40 * (1 + 4 * 4 + 3) + 10
    assert untransformed_seconds(knl, cpu=True) == pytest.approx(810 / 1e9)
    assert untransformed_seconds(knl, cpu=False) == pytest.approx(810 / 1e7)
    sized = lp.make_kernel("{[e]: 0 <= e < n}", "out[e] = 2 * u[e]", lang_version=(2018, 2))
    assert loop_iterations(sized) is None


def test_programs_run_once_are_not_sent(cl_queue: Any) -> None:
    actx, _, arrays, ref = _program(cl_queue, feinsum_background=True)
    out = actx.to_numpy(actx.freeze(_step(actx, **arrays)))
    assert _close(out, ref)
    assert actx.feinsum_last_report.mode == "schedule"
    assert not actx._feinsum_tiered


def test_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import pyopencl as cl

    from feinsum.database import open_database
    from feinsum.devices.opencl import get_device

    for value, on in (("0", False), ("off", False), ("No", False), ("1", True), ("", True)):
        monkeypatch.setenv("FEINSUM_BACKGROUND", value)
        assert background.enabled() is on
        assert background.enabled(not on) is (not on)
    device = get_device()
    assert isinstance(device, cl.Device)
    options = {"device": device, "db": None, "on_miss": "default"}
    sent = background.worker_options(options)
    assert sent is not None and sent["device"].count(":") == 1
    assert background.worker_options({**options, "on_miss": "tune"}) is None
    with open_database(tmp_path / "own.sqlite", include_shipped=False) as db:
        assert background.worker_options({**options, "db": db}) is None
    assert background.worker_options({**options, "device": "cpu"}) is None


CHILD = """
import sys, time
import numpy as np
sys.path.insert(0, {tests!r})
from feinsum.devices.opencl import get_device, get_queue
from test_background import _program
actx, step, arrays, ref = _program(get_queue(get_device()), feinsum_background=True)
actx.to_numpy(step(**arrays))
actx.to_numpy(step(**arrays))  # the second call starts the preparation
(tiered,) = actx._feinsum_tiered
while tiered.preparation.job is None:
    time.sleep(0.01)
print(tiered.preparation.job.directory, flush=True)
"""


def test_worker_outlives_its_process(cl_queue: Any) -> None:
    """The user's process ends while its worker transforms: the worker finishes, stores
    the program for the next process and removes its job directory."""
    import subprocess

    tests = str(Path(__file__).parent)
    proc = subprocess.run([sys.executable, "-c", CHILD.format(tests=tests)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [tests, os.environ.get("PYTHONPATH")]))})
    assert proc.returncode == 0, proc.stderr[-2000:]
    directory = Path(proc.stdout.strip().splitlines()[-1])
    assert directory.name.startswith("feinsum-background-")
    import time

    end = time.monotonic() + 300
    while directory.exists() and time.monotonic() < end:
        time.sleep(0.2)
    assert not directory.exists(), "the orphaned worker did not finish"
    actx, step, arrays, ref = _program(cl_queue, feinsum_background=True)
    assert _close(actx.to_numpy(step(**arrays)), ref)
    assert actx.feinsum_wait(120)
    assert _close(actx.to_numpy(step(**arrays)), ref)
    report = actx.feinsum_last_report
    assert report.cached and report.cache == "disk" and report.transformed == 1, report


EXIT_AT_ONCE = """
import numpy as np
from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
from feinsum.devices.opencl import get_device, get_queue
actx = FeinsumPytatoPyOpenCLArrayContext(get_queue(get_device()), feinsum_db=False,
                                         feinsum_background=True)
mats = [actx.from_numpy(np.random.default_rng(i).random((16, 16))) for i in range(5)]
chain = actx.compile(lambda *a: actx.einsum("ab,bc,cd,de,ef->af", *a))
actx.to_numpy(chain(*mats))
actx.to_numpy(chain(*mats))  # the second call starts the preparation
"""


def test_process_ends_while_the_program_is_prepared(tmp_path: Path) -> None:
    """A process that ends right after its first call, while its thread prepares the
    transformed program (cold: starting the worker; warm: building the cached program),
    ends normally (PoCL aborted such a process before the threads' OpenCL calls were
    fenced off at exit)."""
    import subprocess

    env = {**os.environ, "POCL_CACHE_DIR": str(tmp_path / "pocl"),
           "PYOPENCL_CACHE_DIR": str(tmp_path / "cl")}
    for _ in range(4):
        proc = subprocess.run([sys.executable, "-c", EXIT_AT_ONCE],
                              capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "terminate called" not in proc.stderr
