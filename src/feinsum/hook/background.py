"""Transforming in the background (tiered compilation): a program's first calls run it
untransformed, as the array context would have, while a worker process
(:mod:`feinsum.hook.worker`) transforms it exactly as :func:`feinsum.transform_program`
would, stores it in the persistent cache and builds it for the device; the transformed
program takes over at the first call after the worker is done.

So the first result comes as fast as without feinsum, and a later process finds the
transformed program in the cache. A worker that fails leaves the program untransformed,
with one :class:`~feinsum.hook.report.HookWarning`; a worker still running when its
process ends finishes and stores its program for the next process.

``FEINSUM_BACKGROUND=0`` (or an array context's ``feinsum_background=False``) makes every
transformation happen at the first call instead.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from feinsum.hook.report import HookReport, HookWarning, KernelReport

#: The environment variable that switches background transformation off ("0").
ENV = "FEINSUM_BACKGROUND"
_OFF = ("0", "no", "off", "false")
#: The Python interpreter that runs the worker (this process's).
PYTHON = sys.executable


def enabled(setting: bool | None = None) -> bool:
    """Whether programs are transformed in the background: *setting* if not None, else
    ``$FEINSUM_BACKGROUND`` (on unless "0", "no", "off" or "false")."""
    if setting is not None:
        return bool(setting)
    return os.environ.get(ENV, "1").strip().lower() not in _OFF


def worker_options(options: dict[str, Any]) -> dict[str, Any] | None:
    """*options* of :func:`feinsum.transform_program` as a worker process can take them
    (the device as its platform and device indices), or None where it cannot: a database
    given as an open object, tuning (the worker's timings would compete with the
    program's own kernels), a device that is not a ``pyopencl.Device``."""
    import pyopencl as cl

    from feinsum.devices.opencl import _indices

    db, device = options.get("db"), options.get("device")
    if not (db is None or db is False or isinstance(db, (str, os.PathLike))):
        return None
    if options.get("on_miss") == "tune" or not isinstance(device, cl.Device):
        return None
    try:
        platform, index = _indices(device)
    except Exception:  # a device of no platform here: transform at the call
        return None
    return {**options, "db": db if isinstance(db, (bool, type(None))) else os.fspath(db),
            "device": f"{platform}:{index}"}


class BackgroundJob:
    """One program being transformed by a worker process."""

    def __init__(self, t_unit: Any, options: dict[str, Any]) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="feinsum-background-"))
        (self.directory / "job.pickle").write_bytes(pickle.dumps(
            {"t_unit": t_unit, "options": options}, protocol=pickle.HIGHEST_PROTOCOL))
        import feinsum

        env = dict(os.environ)
        root = str(Path(feinsum.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        self.started = time.perf_counter()
        with open(self.directory / "stderr", "wb") as err:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "feinsum.hook.worker", str(self.directory)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
        self.seconds: float | None = None
        self._outcome: tuple[Any, HookReport] | str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def done(self) -> bool:
        """Whether the worker has ended (without waiting)."""
        if self.process.poll() is None:
            return False
        if self.seconds is None:
            self.seconds = time.perf_counter() - self.started
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait at most *timeout* seconds (None: until it ends); whether it has ended."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return self.done()

    def outcome(self) -> tuple[Any, HookReport] | str:
        """The transformed program and its report, or why there is none (the worker
        must have ended)."""
        if self._outcome is None:
            self._outcome = self._read()
            shutil.rmtree(self.directory, ignore_errors=True)
        return self._outcome

    def _read(self) -> tuple[Any, HookReport] | str:
        result = self.directory / "result.pickle"
        if self.process.returncode == 0 and result.exists():
            try:
                t_unit, report = pickle.loads(result.read_bytes())
                return t_unit, report
            except Exception as exc:  # an unreadable result: say so, keep the program
                return f"its result could not be read ({type(exc).__name__}: {exc})"
        try:
            lines = (self.directory / "stderr").read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "no message")
        return f"the worker process ended with status {self.process.returncode}: {last[:300]}"


def pending_report(t_unit: Any, device: str, job: BackgroundJob, seconds: float
                   ) -> HookReport:
    """The report of a program whose transformation runs in *job* (*seconds*: what
    looking up the caches and starting the job took)."""
    from feinsum.hook.kernels import kernel_names

    names = tuple(kernel_names(t_unit))
    return HookReport(
        device=device, database=None, kernels=names, mode="background", seconds=seconds,
        kernel_reports=tuple(KernelReport(n, "unchanged") for n in names),
        note=(f"transforming in a background process (pid {job.pid}): until it is done "
              "the program runs untransformed"))


class TieredExecutor:
    """A loopy executor that runs *first* until *job* is done, then the program the job
    made (built for *context*). *on_switch* is told the job's report and at which call
    the transformed program took over (None: it did not; the report's note says why)."""

    def __init__(self, first: Any, job: BackgroundJob, context: Any,
                 on_switch: Callable[[HookReport | None, str | None], None]) -> None:
        self.current = first
        self.job: BackgroundJob | None = job
        self.context = context
        self.on_switch = on_switch
        self.calls = 0

    @property
    def t_unit(self) -> Any:
        return self.current.t_unit

    @property
    def entrypoint(self) -> str:
        return self.current.entrypoint  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "current":
            raise AttributeError(name)
        return getattr(self.current, name)

    def __call__(self, queue: Any, **kwargs: Any) -> Any:
        if self.job is not None and self.job.done():
            self._switch()
        self.calls += 1
        return self.current(queue, **kwargs)

    def _switch(self) -> None:
        job, self.job = self.job, None
        if job is None:
            return
        outcome = job.outcome()
        if isinstance(outcome, str):
            return self._failed(outcome)
        t_unit, report = outcome
        if not report.changed:
            self.on_switch(report, None)
            return None
        try:
            new = t_unit.executor(self.context, entrypoint=self.current.entrypoint)
            if not new.has_runtime_typed_args:  # build now: a failure keeps the first
                new.translation_unit_info(None)
        except Exception as exc:  # never worse than the untransformed program
            return self._failed(f"its program could not be built here "
                                f"({type(exc).__name__}: {str(exc)[:200]})")
        self.current = new
        note = (f"transformed in a background process in {job.seconds or 0:.1f} s; in use "
                f"from call {self.calls + 1}")
        self.on_switch(_noted(report, note), None)
        return None

    def _failed(self, why: str) -> None:
        text = (f"the background transformation failed ({why}); the program keeps running "
                "untransformed")
        warnings.warn(f"feinsum: {text}", HookWarning, stacklevel=4)
        self.on_switch(None, text)


def _noted(report: HookReport, note: str) -> HookReport:
    from dataclasses import replace

    return replace(report, note="; ".join(n for n in (report.note, note) if n))
