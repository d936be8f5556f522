"""One process at a time transforms a program (feinsum.hook.program's lock next to the
persistent cache): the others wait for its entry; a dead holder, ``cached_program``, a
cache directory without room for locks, no persistent cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNEL = textwrap.dedent('''
    lp.make_kernel(
        "{[e, i, j]: 0 <= e < nelements and 0 <= i, j < 35}",
        "mass[e, i] = sum(j, massm[i, j] * u[e, j])",
        [lp.GlobalArg("massm,u,mass", np.float64, shape=lp.auto),
         lp.ValueArg("nelements", np.int32)], name="mass", lang_version=(2018, 2))
''')

# Transforms the mass kernel; its transformation marks work/in-PID and stops until
# work/release exists; waiting for the lock marks work/waiting-PID.
WORKER = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    import numpy as np, loopy as lp
    import feinsum.hook.locks as hl
    import feinsum.hook.program as hp
    from feinsum.hook import transform_program

    work = Path(sys.argv[1])
    real, real_acquire = hp._transformed, hl.FileLock.acquire

    def slow(*args, **kw):
        (work / f"in-{os.getpid()}").touch()
        while not (work / "release").exists():
            time.sleep(0.05)
        return real(*args, **kw)

    def acquire(self, *, wait=False, **kw):
        if wait:
            (work / f"waiting-{os.getpid()}").touch()
        return real_acquire(self, wait=wait, **kw)

    hp._transformed, hl.FileLock.acquire = slow, acquire
    new, rep = transform_program(KERNEL, db=False)
    from feinsum.devices.opencl import get_device, get_queue
    queue = get_queue(get_device())
    rng = np.random.default_rng(0)
    m, u = rng.random((35, 35)), rng.random((300, 35))
    _, out = new.executor(queue.context)(queue, massm=m, u=u, nelements=300)
    err = float(np.abs(np.asarray(out[0]) - u @ m.T).max())
    print(json.dumps({"pid": os.getpid(), "cached": rep.cached, "cache": rep.cache,
                      "wait": rep.timings["wait"], "note": rep.note, "error": err}))
''').replace("KERNEL", KERNEL.strip())


def mass_kernel() -> Any:
    import loopy as lp

    return eval(KERNEL.strip(), {"lp": lp, "np": np})


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory for the workers' marks, with the persistent cache in ``programs/``."""
    from feinsum.hook import clear_cache

    monkeypatch.setenv("FEINSUM_CACHE", str(tmp_path / "programs"))
    (tmp_path / "worker.py").write_text(WORKER)
    clear_cache()
    yield tmp_path
    clear_cache()


@pytest.fixture
def start(work: Path) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """Starts a worker process; every one still running at the end is killed."""
    procs: list[subprocess.Popen[str]] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}

    def one() -> subprocess.Popen[str]:
        p = subprocess.Popen([sys.executable, str(work / "worker.py"), str(work)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    yield one
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()


def marks(work: Path, what: str) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in work.glob(f"{what}-*"))


def until(ok: Callable[[], bool], procs: list[subprocess.Popen[str]]) -> None:
    """Wait (at most five minutes) until *ok*; fail when a worker stopped before."""
    deadline = time.monotonic() + 300
    while not ok():
        for p in procs:
            if p.poll() is not None:
                _, err = p.communicate()
                pytest.fail(f"a worker stopped early:\n{err[-3000:]}")
        assert time.monotonic() < deadline, "the workers did not get there in time"
        time.sleep(0.05)


def result(p: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


def entries(directory: Path) -> int:
    from feinsum.hook.store import ProgramCache

    return len(ProgramCache(directory))


def test_one_process_transforms_the_other_waits(work: Path, start: Any) -> None:
    procs = [start(), start()]
    until(lambda: len(marks(work, "in")) == 1 and len(marks(work, "waiting")) == 1, procs)
    (work / "release").touch()
    results = {r["pid"]: r for r in map(result, procs)}
    (did,), (waited,) = marks(work, "in"), marks(work, "waiting")
    assert did != waited and marks(work, "in") == [did]
    assert not results[did]["cached"] and results[did]["wait"] == 0
    other = results[waited]
    assert other["cached"] and other["cache"] == "disk", other
    assert other["wait"] > 0 and "waited" in other["note"] and "another process" in other["note"]
    assert all(r["error"] < 1e-10 for r in results.values()), results
    assert entries(work / "programs") == 1


def test_a_killed_holder_releases_the_lock(work: Path, start: Any) -> None:
    holder = start()
    until(lambda: len(marks(work, "in")) == 1, [holder])
    waiter = start()
    until(lambda: len(marks(work, "waiting")) == 1, [holder, waiter])
    holder.kill()  # SIGKILL: no Python cleanup, the kernel drops its flock
    holder.communicate()
    (work / "release").touch()
    r = result(waiter)
    assert marks(work, "in") == sorted([holder.pid, waiter.pid])
    assert not r["cached"] and r["wait"] > 0 and r["error"] < 1e-10, r
    assert entries(work / "programs") == 1


def test_cached_program_never_waits(work: Path, start: Any, cl_device: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import feinsum.hook.program as hp
    from feinsum.hook.locks import FileLock
    from feinsum.hook.program import cached_program

    holder = start()
    until(lambda: len(marks(work, "in")) == 1, [holder])
    (path,) = (work / "programs" / "locks").glob("*.lock")
    assert not FileLock(path, "test").acquire()  # the holder has it
    keys: list[str] = []
    real = hp._lookup
    monkeypatch.setattr(hp, "_lookup", lambda key, *a: keys.append(key) or real(key, *a))
    t0 = time.perf_counter()
    assert cached_program(mass_kernel(), device=cl_device, db=False) is None
    assert time.perf_counter() - t0 < 60
    assert [k[:32] for k in keys] == [path.stem]  # the program the holder transforms


def test_no_room_for_locks_transforms_unlocked(work: Path, cl_device: Any) -> None:
    from feinsum.hook import transform_program
    from feinsum.hook.store import CacheWarning, ProgramCache

    ProgramCache(work / "programs")
    (work / "programs" / "locks").write_text("a file where the lock directory would be")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, rep = transform_program(mass_kernel(), device=cl_device, db=False)
    mine = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(mine) == 1 and "cannot create the lock" in mine[0], mine
    assert rep.transformed == 1 and not rep.cached
    assert entries(work / "programs") == 1


def test_the_lock_is_released_when_the_hook_fails(work: Path, cl_device: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import feinsum.hook.program as hp
    from feinsum.hook import HookWarning, transform_program
    from feinsum.hook.locks import FileLock

    def broken(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(hp, "_transformed", broken)
    with pytest.warns(HookWarning, match="broken on purpose"):
        transform_program(mass_kernel(), device=cl_device, db=False)
    (path,) = (work / "programs" / "locks").glob("*.lock")
    lock = FileLock(path, "test")
    assert lock.acquire()
    lock.release()


def test_no_persistent_cache_no_lock(monkeypatch: pytest.MonkeyPatch, work: Path,
                                     cl_device: Any) -> None:
    import feinsum.hook.locks as hl
    from feinsum.hook import HookWarning, transform_program

    def no(*args: Any, **kw: Any) -> None:
        raise AssertionError("no lock without the persistent cache")

    monkeypatch.setattr(hl.FileLock, "__init__", no)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, rep = transform_program(mass_kernel(), device=cl_device, db=False, cache=False)
        assert rep.transformed == 1
        monkeypatch.setenv("FEINSUM_CACHE", "none")
        _, rep = transform_program(mass_kernel(), device=cl_device, db=False)
        assert rep.transformed == 1 and not rep.cached
    assert not [w for w in caught if issubclass(w.category, HookWarning)]


def test_a_lock_removed_before_its_flock_is_taken_afresh(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `feinsum cache clear` removes the file between this process's open and its flock:
    # the flock on the removed file would exclude nobody, so acquire takes a new file
    import feinsum.hook.locks as hl

    path = tmp_path / "locks" / "key.lock"
    real_open, opened = os.open, []

    def open_then_cleared(p: Any, *args: Any) -> int:
        fd = real_open(p, *args)
        if Path(p) == path and not opened:
            opened.append(fd)
            assert hl.remove_unheld(path.parent) == (1, 0)
        return fd

    monkeypatch.setattr(hl.os, "open", open_then_cleared)
    lock = hl.FileLock(path, "test")
    assert lock.acquire() and opened
    monkeypatch.undo()
    assert path.exists() and hl.remove_unheld(path.parent) == (0, 1)
    other = hl.FileLock(path, "another process")
    assert not other.acquire()
    lock.release()
    assert other.acquire()
    other.release()
