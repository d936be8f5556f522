"""Transforming in the background (tiered compilation): a compiled program's first calls
run it untransformed, as the array context would have. Once the second call's kernels
have run (the first result comes as fast as without feinsum, and a program called once is
not worth transforming), a thread of this process makes the transformed program: from the
hook's caches if they hold it, else by a worker process (:mod:`feinsum.hook.worker`) that
transforms it exactly as :func:`feinsum.transform_program` would, stores it in the
persistent cache and builds it for the device. The thread then builds it here too, and
the first call after that runs it. Only programs quick to run untransformed are treated
so (:func:`quick_untransformed`).

A worker that fails leaves the program untransformed, with one
:class:`~feinsum.hook.report.HookWarning`; a worker still running when its process ends
finishes and stores its program for the next process.

``FEINSUM_BACKGROUND=0`` (or an array context's ``feinsum_background=False``) makes every
transformation happen at the first call instead.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from feinsum.devices.opencl import _indices
from feinsum.hook import payoff
from feinsum.hook.kernels import kernel_names
from feinsum.hook.program import cached_program
from feinsum.hook.report import HookReport, HookWarning, KernelReport

#: The environment variable that switches background transformation off ("0").
ENV = "FEINSUM_BACKGROUND"
_OFF = ("0", "no", "off", "false")
#: The Python interpreter that runs the worker (this process's).
PYTHON = sys.executable
#: Worker processes a process runs at once (the others queue): each program's own would
#: oversubscribe the machine that also runs the user's program.
WORKERS = 1
_SLOTS = threading.BoundedSemaphore(WORKERS)


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


def quick_untransformed(t_unit: Any, device: Any) -> bool:
    """Whether *t_unit* is quick enough untransformed on *device* to run so while it is
    transformed in the background (:data:`feinsum.hook.payoff.BACKGROUND_RUN_LIMIT`)."""
    import pyopencl as cl

    cpu = bool(device.type & cl.device_type.CPU)
    seconds = payoff.untransformed_seconds(t_unit, cpu)
    return seconds is not None and seconds <= payoff.BACKGROUND_RUN_LIMIT


class BackgroundJob:
    """One program being transformed by a worker process."""

    def __init__(self, t_unit: Any, options: dict[str, Any]) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="feinsum-background-"))
        (self.directory / "job.pickle").write_bytes(pickle.dumps(
            {"t_unit": t_unit, "options": options, "parent": os.getpid()},
            protocol=pickle.HIGHEST_PROTOCOL))
        import feinsum

        env = dict(os.environ)
        root = str(Path(feinsum.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        with open(self.directory / "stderr", "wb") as err:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "feinsum.hook.worker", str(self.directory)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
        self._outcome: tuple[Any, HookReport] | str | None = None

    def wait(self) -> None:
        """Wait until the worker has ended."""
        self.process.wait()

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


def pending_report(t_unit: Any, device: str, seconds: float) -> HookReport:
    """The report of a program whose transformation is left to the background
    (*seconds*: what deciding so took)."""
    names = tuple(kernel_names(t_unit))
    return HookReport(
        device=device, database=None, kernels=names, mode="background", seconds=seconds,
        kernel_reports=tuple(KernelReport(n, "unchanged") for n in names),
        note=("transformed in the background from the second call on: until that is done "
              "the program runs untransformed"))


class Preparation:
    """The transformed program of *t_unit*, made in a thread of this process: from the
    hook's caches if they hold it, else by a :class:`BackgroundJob`; then built for
    *context* (an executor of *entrypoint*), so that switching to it costs the caller
    nothing. *options*: :func:`feinsum.transform_program`'s; *job_options*: the same as
    :func:`worker_options` made them."""

    def __init__(self, t_unit: Any, entrypoint: str, context: Any, options: dict[str, Any],
                 job_options: dict[str, Any], after: Any = None) -> None:
        self.job: BackgroundJob | None = None
        self.executor: Any = None
        self.report: HookReport | None = None
        self.failure: str | None = None
        self.started = time.perf_counter()
        self.seconds = 0.0
        self._args: tuple[Any, ...] = (t_unit, entrypoint, context, options, job_options,
                                       after)
        self.thread = threading.Thread(target=self._run, name="feinsum-background",
                                       daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        self.thread.join(timeout)
        return self.done()

    def _run(self) -> None:
        t_unit, entrypoint, context, options, job_options, after = self._args
        self._args = ()
        try:
            if after is not None:  # the call's kernels first: they share the cores
                _wait_for(after)
            with _opencl():
                found = cached_program(t_unit, **options)
            if found is None:
                with _SLOTS:
                    self.job = BackgroundJob(t_unit, job_options)
                    self.job.wait()
                found_or_why = self.job.outcome()
                if isinstance(found_or_why, str):
                    self.failure = found_or_why
                    return
                found = found_or_why
            new, self.report = found
            if self.report.changed:
                with _opencl():
                    executor: Any = new.executor(context, entrypoint=entrypoint)
                    if not executor.has_runtime_typed_args:  # built here, not at the call
                        executor.translation_unit_info(None)
                self.executor = executor
        except _Closing:
            self.failure = "the process ended first"
        except BaseException as exc:  # never worse than the untransformed program
            self.failure = f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            self.seconds = time.perf_counter() - self.started


#: Set when the process ends: the preparation threads then stop before their next OpenCL
#: call, and the process waits for the one under way (an OpenCL implementation can abort
#: a process that ends while a thread is inside it: PoCL does).
_CLOSING = threading.Event()
_OPENCL_CALLS = threading.Lock()


class _Closing(Exception):
    """The process is ending."""


@contextlib.contextmanager
def _opencl() -> Iterator[None]:
    """A section of a preparation thread that calls OpenCL (or loopy, which may)."""
    with _OPENCL_CALLS:
        if _CLOSING.is_set():
            raise _Closing
        yield


@atexit.register
def _close() -> None:
    _CLOSING.set()
    with _OPENCL_CALLS:
        pass


def _wait_for(event: Any) -> None:
    """Wait until *event* (a ``pyopencl.Event``) has completed or failed."""
    while True:
        with _opencl():
            if event.command_execution_status <= 0:  # CL_COMPLETE, or an error
                return
        time.sleep(0.005)


class TieredExecutor:
    """A loopy executor that runs *first* (the untransformed program) and, from its second
    call on (or :meth:`wait`), prepares the transformed program (:class:`Preparation`, with
    *prepare*'s arguments); the first call after that is ready runs it. *on_switch* is told
    the report of the transformed program (None: there is none; then the text says why)."""

    def __init__(self, first: Any, prepare: tuple[Any, ...],
                 on_switch: Callable[[HookReport | None, str | None], None]) -> None:
        self.current = first
        self.prepare: tuple[Any, ...] | None = prepare
        self.preparation: Preparation | None = None
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
        if self.preparation is not None and self.preparation.done():
            self._switch(self.preparation)
        self.calls += 1
        result = self.current(queue, **kwargs)
        if self.prepare is not None and self.calls >= 2:
            event = result[0] if isinstance(result, tuple) and result else None
            self._start(event if callable(getattr(event, "wait", None)) else None)
        return result

    def _start(self, after: Any) -> None:
        """Start the preparation, once *after* (an OpenCL event, or None) has completed."""
        prepare, self.prepare = self.prepare, None
        if prepare is None:
            return
        t_unit, context, options, job_options = prepare
        self.preparation = Preparation(t_unit, self.current.entrypoint, context, options,
                                       job_options, after=after)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the preparation (started now if the program has run but not yet
        started it); whether it has ended (True too where nothing was started)."""
        if self.prepare is not None and self.calls >= 1:
            self._start(None)
        return self.preparation is None or self.preparation.wait(timeout)

    def _switch(self, done: Preparation) -> None:
        self.preparation = None
        if done.failure is not None:
            text = (f"the background transformation failed ({done.failure}); the program "
                    "keeps running untransformed")
            warnings.warn(f"feinsum: {text}", HookWarning, stacklevel=4)
            self.on_switch(None, text)
            return
        if done.report is None:
            return
        if done.executor is None:
            self.on_switch(done.report, None)
            return
        self.current = done.executor
        made = ("a background process" if done.job is not None
                else f"the {done.report.cache} cache")
        self.on_switch(_noted(done.report, (
            f"transformed program from {made}, ready {done.seconds:.1f} s after the first "
            f"call; in use from call {self.calls + 1}")), None)


def _noted(report: HookReport, note: str) -> HookReport:
    from dataclasses import replace

    return replace(report, note="; ".join(n for n in (report.note, note) if n))
