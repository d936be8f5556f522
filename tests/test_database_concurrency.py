"""Concurrent writers and a writer killed mid-run (both backends)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from database_support import make_identity

from feinsum.database import open_database

WRITER = Path(__file__).parent / "database_writer.py"

pytest_plugins = ("database_fixtures",)


def _writer(url: str, writer: int, count: int) -> subprocess.Popen[str]:
    env = dict(os.environ)
    src = str(Path(__file__).parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, str(WRITER), url, str(writer), str(count)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def test_concurrent_writers(db_url: str) -> None:
    """4 processes x 200 inserts, one transaction each: every row is there."""
    open_database(db_url, include_shipped=False).close()  # create the schema first
    procs = [_writer(db_url, w, 200) for w in range(4)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        assert len(out.split()) == 200
    ids = [int(x) for out, _ in outputs for x in out.split()]
    assert len(set(ids)) == 800
    with open_database(db_url, include_shipped=False) as db:
        assert db.count() == 800
        records = db.query(make_identity(), None)
        assert {r.uid for r in records} == {f"w{w}-{i}" for w in range(4) for i in range(200)}
        assert {r.id for r in records} == set(ids)
        assert db.revision() == 800
        assert len({r.params_key for r in records}) == 800


def test_writer_killed_mid_run(db_url: str) -> None:
    """SIGKILL a writer in the middle of its inserts: the database opens and every
    measurement it reported committed is intact."""
    open_database(db_url, include_shipped=False).close()
    proc = _writer(db_url, 7, 0)
    assert proc.stdout is not None
    committed: list[int] = []
    deadline = time.monotonic() + 60
    while len(committed) < 60 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed.append(int(line))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert len(committed) >= 60, proc.stderr.read() if proc.stderr else ""
    # the writer ran on while we stopped reading: its echoes wait in the pipe
    committed += [int(x) for x in proc.stdout.read().split()]
    with open_database(db_url, include_shipped=False) as db:
        ids = {r.id for r in db.query(make_identity(), None, status=None)}
        assert set(committed) <= ids
        assert len(ids) - len(committed) <= 1  # at most the one committed but not echoed
        db.add_measurement(__import__("database_support").make_measurement())
        if db.path is not None:
            with db.user_store.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
