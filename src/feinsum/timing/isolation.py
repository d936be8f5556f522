"""Worker processes that build, validate and time candidates, with timeouts.

A candidate that crashes the compiler, segfaults in the OpenCL driver, hangs or computes a
wrong result becomes a recorded failure with a category (see
:data:`feinsum.timing.measurement.FAILURE_CATEGORIES`) and a message; the run goes on.

:class:`WorkerPool` keeps warm workers (fresh interpreters that have imported loopy and
pyopencl once, each with its own context and profiling queue on the device) and replaces
one that died or was killed. Each candidate goes through two steps in one worker:

* **prepare** (code generation, OpenCL build, first run, validation) runs in parallel
  workers;
* **time** runs one at a time per device and, when the device is a CPU, never while
  another worker prepares or starts: those are suspended (``SIGSTOP``) for the timing and
  resumed after it (their compilations would share the cores being timed), and their
  time suspended does not count against their timeout. With a *timing lock* (what a
  campaign passes: one per physical device, shared by every process that times on it) a
  candidate is timed only while the pool holds the lock; the wall-clock interval it held
  it is part of the measurement.

Workers die with the process that started them (``PR_SET_PDEATHSIG`` on Linux), so a
pool whose owner is killed leaves no worker behind, not even a suspended one.

A worker that dies is classified by the step it had reported: code generation, build and
the first run (where PoCL compiles) are ``compile-error`` when its stderr names the
compiler, else ``runtime-error``; a step past its timeout is ``timeout`` (the worker is
killed).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from feinsum.errors import TuningError
from feinsum.timing.hashseed import CODE_HASH_SEED
from feinsum.timing.measurement import (
    Candidate,
    CandidateFailure,
    DeviceState,
    Measurement,
    Prepared,
    finish,
    prepare,
    time_prepared,
)

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.timing.roofline import Roofline

# argv: the socket's fd, the pid whose death kills the worker (0: none; Linux only). The
# kill is asked for first of all: a worker suspended while starting must not outlive it.
_WORKER_CODE = """\
import sys
if int(sys.argv[2]) and sys.platform.startswith("linux"):
    import ctypes, os, signal
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != int(sys.argv[2]):
        os._exit(1)
from feinsum.timing.isolation import worker_main
worker_main(int(sys.argv[1]))
"""
#: seconds a new worker may take to import and open its device
START_TIMEOUT = 120.0
_COMPILER_WORDS = ("LLVM", "llvm", "clang", "pocl", "PoCL", "error:", "Assertion")


# {{{ the worker process


def worker_main(fd: int) -> None:
    """A worker's loop over the socket *fd*: ``("init", device, log)``, then ``("prepare",
    candidate)`` and ``("time", cutoff)`` pairs, until ``("stop",)`` or the parent goes
    away. It answers ``("phase", step)`` as each step starts, then ``("prepared", ...)``,
    ``("timed", ...)`` or ``("failed", category, message)``."""
    from feinsum.devices.opencl import DeviceInfo

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    conn = Connection(fd)
    _, info_dict, log_path = conn.recv()

    def phase(name: str) -> None:
        conn.send(("phase", name))

    def noted(fingerprint: str) -> None:
        conn.send(("fingerprint", fingerprint))

    state = DeviceState.open(DeviceInfo.from_dict(info_dict))

    conn.send(("ready", os.getpid()))
    prepared: Prepared | None = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "stop":
            return
        try:
            if msg[0] == "prepare":
                os.truncate(log_path, 0)
                prepared = None
                prepared = prepare(state, msg[1], phase, noted)
                conn.send(("prepared", prepared.validation_error, prepared.phase_times))
            elif msg[0] == "time":
                if prepared is None:
                    raise CandidateFailure("runtime-error", "nothing prepared to time")
                samples, note = time_prepared(state, prepared, msg[1])
                conn.send(("timed", samples, prepared.phase_times, note))
                prepared = None
        except CandidateFailure as exc:
            prepared = None
            conn.send(("failed", exc.category, exc.message))
        except Exception as exc:  # a bug or a failure outside the protocol's own checks
            prepared = None
            conn.send(("failed", "", f"{type(exc).__name__}: {exc}"))


# }}}


# {{{ the parent side


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    conn: Connection
    log_path: str
    state: str = "starting"  # starting, idle, preparing, prepared, timing
    candidate: Candidate | None = None
    phase: str = "start"
    deadline: float = 0.0
    started_at: float = 0.0
    #: when the worker entered its state, or was last resumed (monotonic)
    since: float = field(default_factory=time.monotonic)
    #: when it was suspended (None: running), and the seconds its deadline had left
    paused_at: float | None = None
    remaining: float = 0.0
    validation_error: float | None = None
    phase_times: dict[str, float] = field(default_factory=dict)
    #: wall-clock time at which it started timing (with the timing lock held)
    timing_from: float = 0.0
    #: the fingerprint of the candidate's generated code, once the worker sent it
    fingerprint: str | None = None

    @property
    def busy_cpu(self) -> bool:
        """Compiling or starting: work that must not overlap a CPU timing."""
        return self.state in ("starting", "preparing")

    def log_tail(self, limit: int = 1500) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                text = f.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return text


class WorkerPool:
    """Warm worker processes for one device (see the module docstring).

    :arg size: parallel builds (default: the CPU count, at most 4).
    :arg exclusive_timing: never time while another worker builds (default: when the device
        is a CPU).
    :arg timing_lock: held while a candidate is timed (``acquire(blocking=False)`` is tried
        when one is ready, ``release()`` follows its timing): a ``threading.Lock``, or the
        ``distributed.Lock`` of a physical device that other processes time on too.
    :arg die_with_parent: workers are killed when the thread that started them ends (on
        Linux; pass False for a pool that outlives its creating thread).
    """

    def __init__(self, device: DeviceInfo, size: int | None = None, *,
                 exclusive_timing: bool | None = None, roofline: Roofline | None = None,
                 timing_lock: Any = None, die_with_parent: bool = True) -> None:
        from feinsum.checks import processes

        self.device = device
        self.size = processes("size", size) or max(1, min(4, os.cpu_count() or 1))
        self.exclusive = device.is_cpu if exclusive_timing is None else exclusive_timing
        self.roofline = roofline
        self.timing_lock = timing_lock
        self._locked = False
        self._die_with_parent = die_with_parent
        self._tmp = tempfile.TemporaryDirectory(prefix="feinsum-workers-")
        self._queue: collections.deque[Candidate] = collections.deque()
        self._workers: list[_Worker] = []
        self._nstarted = 0
        self._closed = False
        #: the best time per target so far (the racing cutoff's reference)
        self._best: dict[str, float] = {}
        #: workers replaced (they died or were killed)
        self.replaced = 0
        #: (state, start, end) of every worker's starting/preparing/timing spans (monotonic)
        self.timeline: list[tuple[str, float, float]] = []
        for _ in range(self.size):
            self._workers.append(self._start())

    def _start(self) -> _Worker:
        """A new worker: a fresh interpreter (not a fork of this process, whose OpenCL
        runtime must not be inherited, and not multiprocessing, which would re-run the
        caller's main script), talking over a socket pair."""
        self._nstarted += 1
        log = os.path.join(self._tmp.name, f"worker{self._nstarted}.log")
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        # loopy's code for some kernels depends on the hash seed (the order of its sets):
        # one seed, so that the code timed is the code revalidation regenerates
        env["PYTHONHASHSEED"] = CODE_HASH_SEED
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(theirs.fileno()),
                 str(os.getpid() if self._die_with_parent else 0)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        theirs.close()
        conn = Connection(ours.detach())
        conn.send(("init", self.device.as_dict(), log))
        return _Worker(proc, conn, log, deadline=time.monotonic() + START_TIMEOUT)

    def _replace(self, w: _Worker) -> None:
        self._resume(w)
        self._set_state(w, "dead")
        _kill(w)
        self._workers[self._workers.index(w)] = self._start()
        self.replaced += 1

    # {{{ public API

    def submit(self, candidate: Candidate) -> None:
        if self._closed:
            raise TuningError("the worker pool is closed")
        self._queue.append(candidate)

    @property
    def in_flight(self) -> int:
        """Candidates queued or in a worker."""
        return len(self._queue) + sum(w.candidate is not None for w in self._workers)

    def capacity(self) -> int:
        """How many more candidates keep every worker busy."""
        return max(0, self.size - self.in_flight)

    def poll(self, timeout: float = 0.1) -> list[Measurement]:
        """Advance the workers for up to *timeout* seconds; the finished measurements."""
        done: list[Measurement] = []
        end = time.monotonic() + timeout
        while True:
            self._dispatch()
            now = time.monotonic()
            busy = [w for w in self._workers if w.state != "idle" or w.candidate is not None]
            if not busy:
                return done
            wake = min([end, *(w.deadline for w in busy)])
            ready = wait([w.conn for w in busy], max(0.0, wake - now))
            for w in list(busy):
                if w.conn in ready:
                    self._receive(w, done)
            now = time.monotonic()
            for w in list(self._workers):
                if (w.state != "idle" or w.candidate is not None) and now >= w.deadline:
                    self._fail_timeout(w, done)
            if done or time.monotonic() >= end:
                return done

    def measure(self, candidate: Candidate, roofline: Roofline | None = None) -> Measurement:
        """Measure one candidate and wait for it."""
        saved = self.roofline
        if roofline is not None:
            self.roofline = roofline
        try:
            self.submit(candidate)
            while True:
                for m in self.poll(1.0):
                    if m.params == candidate.params and m.recipe_name == candidate.recipe_name:
                        return m
        finally:
            self.roofline = saved

    def drain(self) -> list[Measurement]:
        """Wait for everything submitted."""
        out: list[Measurement] = []
        while self.in_flight:
            out.extend(self.poll(1.0))
        return out

    def note_best(self, target_key: str, seconds: float) -> None:
        """Tell the racing cutoff of a best time measured elsewhere (an earlier run)."""
        if seconds > 0 and seconds < self._best.get(target_key, math.inf):
            self._best[target_key] = seconds

    def cancel(self) -> list[Candidate]:
        """Drop the queued candidates (those in workers finish); returns them."""
        dropped = list(self._queue)
        self._queue.clear()
        return dropped

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for w in self._workers:
            self._resume(w)
        self._release_timing()
        for w in self._workers:
            with contextlib.suppress(Exception):
                w.conn.send(("stop",))
        deadline = time.monotonic() + 2
        for w in self._workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(max(0.0, deadline - time.monotonic()))
            _kill(w)
        self._tmp.cleanup()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # }}}

    # {{{ scheduling

    def _dispatch(self) -> None:
        now = time.monotonic()
        timing = any(w.state == "timing" for w in self._workers)
        waiting = sorted((w for w in self._workers if w.state == "prepared"),
                         key=lambda w: w.since)
        if not timing and waiting and self._acquire_timing():
            if self.exclusive:  # builds stop while the CPU device times
                for other in self._workers:
                    if other.busy_cpu:
                        self._pause(other)
            w = waiting[0]
            c = _held(w)
            self._resume(w)
            best = self._best.get(c.target.key)
            w.conn.send(("time", c.options.race * best if c.options.race and best else None))
            self._set_state(w, "timing")
            w.timing_from = time.time()
            w.phase = "time"
            w.deadline = now + c.options.run_timeout
            timing = True
        if self.exclusive and (timing or waiting):
            return  # builds wait until the device has timed what is ready
        for w in self._workers:
            self._resume(w)
        for w in self._workers:
            if not self._queue:
                break
            if w.candidate is None and w.state in ("idle", "starting"):
                c = self._queue.popleft()
                w.candidate, w.started_at = c, time.time()
                w.validation_error, w.phase_times, w.fingerprint = None, {}, None
                w.conn.send(("prepare", c))
                if w.state == "idle":
                    self._set_state(w, "preparing")
                    w.phase = "codegen"
                    w.deadline = now + c.options.build_timeout
                else:  # still starting: its start timeout runs, then the build's
                    w.deadline = now + START_TIMEOUT + c.options.build_timeout

    def _acquire_timing(self) -> bool:
        """Hold the timing lock (if any); False: another process times on the device."""
        if self.timing_lock is None or self._locked:
            return True
        self._locked = bool(self.timing_lock.acquire(blocking=False))
        return self._locked

    def _release_timing(self) -> None:
        if self._locked:
            self._locked = False
            self.timing_lock.release()

    def _pause(self, w: _Worker) -> None:
        """Suspend a worker (SIGSTOP): its compilation must not share the CPU with a timing.
        Its time stopped does not count against its timeout."""
        if w.paused_at is not None:
            return
        now = time.monotonic()
        with contextlib.suppress(OSError):
            os.kill(w.proc.pid, signal.SIGSTOP)
        self.timeline.append((w.state, w.since, now))
        w.paused_at, w.remaining, w.deadline = now, w.deadline - now, math.inf

    def _resume(self, w: _Worker) -> None:
        if w.paused_at is None:
            return
        now = time.monotonic()
        with contextlib.suppress(OSError):
            os.kill(w.proc.pid, signal.SIGCONT)
        w.since, w.deadline, w.paused_at = now, now + w.remaining, None

    def _receive(self, w: _Worker, done: list[Measurement]) -> None:
        while True:
            try:
                if not w.conn.poll():
                    if w.proc.poll() is not None:
                        self._fail_died(w, done)
                    return
                msg = w.conn.recv()
            except (EOFError, OSError):
                self._fail_died(w, done)
                return
            kind = msg[0]
            now = time.monotonic()
            if kind == "ready":
                if w.candidate is None:
                    self._set_state(w, "idle")
                else:
                    self._set_state(w, "preparing")
                    w.deadline = now + w.candidate.options.build_timeout
            elif kind == "fingerprint":
                w.fingerprint = msg[1]
            elif kind == "phase":
                w.phase = msg[1]
                if w.state == "preparing" and w.candidate is not None:  # a step's deadline
                    w.deadline = now + w.candidate.options.build_timeout
            elif kind == "prepared":
                self._set_state(w, "prepared")
                w.validation_error, w.phase_times = msg[1], msg[2]
                # waiting for the device is not the candidate's fault: no deadline
                w.deadline = w.remaining = math.inf
            elif kind == "timed":
                c = _held(w)
                m = finish(c, "ok", msg[3], msg[1], w.validation_error, msg[2],
                           w.started_at, time.time() - w.started_at, self.roofline,
                           w.fingerprint, held=(w.timing_from, time.time()))
                if m.seconds:
                    self.note_best(c.target.key, m.seconds)
                done.append(m)
                self._reset(w)
            elif kind == "failed":
                category = msg[1] or _category_for(w.phase, "")
                self._record_failure(w, category, msg[2], done)
                self._reset(w)

    def _set_state(self, w: _Worker, state: str) -> None:
        now = time.monotonic()
        if w.state in ("starting", "preparing", "timing") and w.paused_at is None:
            self.timeline.append((w.state, w.since, now))
        if w.state == "timing" and state != "timing":
            self._release_timing()
        w.state, w.since = state, now

    def _reset(self, w: _Worker) -> None:
        self._set_state(w, "idle")
        w.candidate, w.phase = None, "idle"

    def _record_failure(self, w: _Worker, category: str, message: str,
                        done: list[Measurement]) -> None:
        if w.candidate is None:
            return
        now = time.time()
        done.append(finish(w.candidate, category, message, started_at=w.started_at,
                           wall_time=now - w.started_at, fingerprint=w.fingerprint,
                           held=(w.timing_from, now) if w.state == "timing" else (0.0, 0.0)))

    def _fail_died(self, w: _Worker, done: list[Measurement]) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.proc.wait(5)
        code = w.proc.returncode
        how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exit code {code}")
        tail = w.log_tail()
        msg = f"worker died ({how}) during {w.phase}" + (f"; its stderr: {tail}" if tail else "")
        if w.state == "starting":  # not the candidate's fault: the set-up is broken
            raise TuningError(f"a worker could not start: {msg}")
        self._record_failure(w, _category_for(w.phase, tail), msg, done)
        self._replace(w)

    def _fail_timeout(self, w: _Worker, done: list[Measurement]) -> None:
        if w.state == "starting":
            raise TuningError(f"a worker did not start within {START_TIMEOUT:.0f} s")
        c = _held(w)
        limit = c.options.run_timeout if w.state == "timing" else c.options.build_timeout
        self._record_failure(w, "timeout", f"no answer within {limit:g} s during {w.phase}",
                             done)
        self._replace(w)

    # }}}


def _held(w: _Worker) -> Candidate:
    """The candidate a busy worker holds."""
    if w.candidate is None:
        raise TuningError(f"internal error: worker in state {w.state!r} holds no candidate")
    return w.candidate


def _category_for(phase: str, log: str) -> str:
    if phase in ("start", "codegen", "build"):
        return "compile-error"
    if phase == "first-run" and any(word in log for word in _COMPILER_WORDS):
        return "compile-error"
    return "runtime-error"


def _kill(w: _Worker) -> None:
    with contextlib.suppress(OSError):
        w.proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        w.proc.wait(5)
    with contextlib.suppress(OSError):
        w.conn.close()


_shared: dict[str, WorkerPool] = {}


def shared_pool(device: DeviceInfo, size: int | None = None) -> WorkerPool:
    """A pool kept for the process's life (what :func:`feinsum.measure` uses)."""
    pool = _shared.get(device.key)
    if pool is None or pool._closed:
        pool = _shared[device.key] = WorkerPool(device, size, die_with_parent=False)
    return pool


@atexit.register
def _close_shared() -> None:
    for pool in _shared.values():
        pool.close()


# }}}

# vim: foldmethod=marker
