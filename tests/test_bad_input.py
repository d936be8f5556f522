"""Bad input: every row of docs/bad-input.csv (the table of docs/bad-input.rst) run as
written, and the neighbours of each: the values just inside the ranges pass, files the
table leaves untouched stay byte for byte, each store fails under its own name, and the
roofline's sanity checks, records and report marks (tests/bad_input.py makes the files)."""

from __future__ import annotations

import datetime as dt
import gzip
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from bad_input import Row, damage, device, einsum, make_files, roofline, rows
from cli_support import run_cli

import feinsum
import feinsum.campaigns
from feinsum import checks, hook
from feinsum.errors import ArgumentError, DatabaseError, RooflineWarning

ROWS = rows()
COMMANDS = [r for r in ROWS if r.surface != "API"]
CALLS = [r for r in ROWS if r.surface == "API"]
#: "within seconds", with room for a shared machine
LIMIT_S = 60


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_files(tmp_path_factory.mktemp("bad-input") / "files")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shipped-cache")


@pytest.fixture
def here(files: Path, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the files, with a copy of records.jsonl as the shipped records."""
    d = tmp_path / "run"
    shutil.copytree(files, d)
    monkeypatch.setenv("FEINSUM_SHIPPED", str(d / "team.jsonl"))
    monkeypatch.setenv("FEINSUM_CACHE_DIR", str(cache))
    monkeypatch.delenv("FEINSUM_DB", raising=False)
    return d


def _shell(command: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    script = 'feinsum() { "$FEINSUM_PYTHON" -m feinsum.cli "$@"; }\n' + command
    t0 = time.monotonic()
    p = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True,
                       timeout=240, env={**os.environ, "FEINSUM_PYTHON": sys.executable})
    return p, time.monotonic() - t0


# {{{ the table


def test_the_table_has_every_surface() -> None:
    assert {r.surface for r in ROWS} == {"CLI", "PLAN", "file", "API"}
    assert len([r for r in COMMANDS if _reported(r)]) == 4
    assert all(r.message for r in ROWS)
    assert len({r.input for r in ROWS}) == len(ROWS)


def _check(row: Row, code: int, out: str, err: str, seconds: float, here: Path) -> None:
    """One line on stderr with the message and the exit code of the table (exit 0: the
    message in the output), within seconds; no store blamed for another's failure."""
    out, err = out.replace(str(here), "PATH"), err.replace(str(here), "PATH")
    assert code == int(row.result), out + err
    assert seconds < LIMIT_S
    assert "Traceback" not in out + err
    if code == 0:
        assert row.message in out + err
        return
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert row.message in lines[0]
    if "shipped" not in row.message:
        assert "shipped records" not in lines[0]


@pytest.mark.parametrize("row", COMMANDS, ids=lambda r: r.id)
def test_command(row: Row, here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The row as written: what comes before its ``feinsum`` command in a shell, the command
    through feinsum's entry point in this process (quicker than an interpreter per row;
    test_commands_in_a_shell runs some in a real one)."""
    import shlex

    *setup, command = row.input.split("; ")
    if setup:
        subprocess.run(["bash", "-c", "; ".join(setup)], cwd=here, check=True)
    argv = shlex.split(command)
    assert argv[0] == "feinsum"
    monkeypatch.chdir(here)
    t0 = time.monotonic()
    code, out, err = run_cli(*argv[1:])
    _check(row, code, out, err, time.monotonic() - t0, here)


def _reported(r: Row) -> bool:
    """The cases reported in the issue this table answers."""
    return ((r.surface == "CLI" and "--workers -2" in r.input)
            or (r.surface == "PLAN" and "--workers -1" in r.input)
            or r.input == ": > z.jsonl; feinsum db revalidate z.jsonl"
            or (r.input.startswith("feinsum best ") and "damaged.sqlite" in r.input))


@pytest.mark.parametrize("row", [r for r in COMMANDS if _reported(r)], ids=lambda r: r.id)
def test_commands_in_a_shell(row: Row, here: Path) -> None:
    """The reported cases as a user types them: ``--workers -2`` (it hung), a PLAN line with
    ``--workers -1`` (its job hung), an empty export revalidated (it became a database), a
    damaged user's database (the shipped records were blamed)."""
    p, seconds = _shell(row.input, here)
    _check(row, p.returncode, p.stdout, p.stderr, seconds, here)


@pytest.mark.parametrize("row", CALLS, ids=lambda r: r.id)
def test_call(row: Row, here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exception of the table, its message in one line."""
    monkeypatch.chdir(here)
    names = {"feinsum": feinsum, "datetime": dt, "e": einsum(), "dev": device(),
             "A": feinsum.array("A", (4, 4)), "x": feinsum.array("x", 4)}
    expected = getattr(feinsum.errors, row.result, None) or getattr(hook, row.result)
    t0 = time.monotonic()
    if issubclass(expected, Warning):  # the hook keeps the user's program running
        with pytest.warns(expected) as caught:
            eval(row.input, names)
        text = "\n".join(str(w.message) for w in caught if w.category is expected)
    else:
        with pytest.raises(expected) as info:
            eval(row.input, names)
        text = str(info.value)
    assert time.monotonic() - t0 < LIMIT_S
    text = text.replace(str(here), "PATH")
    assert row.message in text and len(text.splitlines()) == 1
    if "shipped" not in row.message:
        assert "shipped records" not in text


# }}}


# {{{ the neighbours: what is just inside the ranges passes


@pytest.mark.parametrize("argv", [
    ["tune", "ij,j->i", "-s", "i=1,j=2147483647", "--workers", "1", "--budget", "1",
     "--time-limit", "0.5", "--seed", "0", "--rows", "256"],
    ["tune", "ij,ej->ei", "-s", "i=4,j=4,e=E", "-l", "E=1", "--workers", "256", "--seed",
     "4294967295"],
    ["tune", "ij,ej->ei", "-s", "i=4,j=4,e=E", "-l", "E=2147483647"],
    ["query", "ij,j->i", "-s", "i=4,j=4", "--limit", "1"],
    ["list", "--min-records", "1"],
    ["db", "revalidate", "--jobs", "1"],
    ["db", "prune", "--older-than-days", "0.5"],
    ["campaign", "plan.txt", "--workers-per-device", "1", "--budget", "1"],
])
def test_values_at_the_edges_of_the_ranges_parse(argv: list[str]) -> None:
    from feinsum.cli.main import build_parser

    build_parser().parse_args(argv)


def test_plan_lines_at_the_edges_of_the_ranges() -> None:
    (job,) = feinsum.campaigns.parse_plan(
        '"ij,ej->ei" -s i=4,j=4,e=E -l E=1 --workers 1 --budget 1 --time-limit 0.5').jobs
    assert (job.workers, job.budget, job.time_limit, job.lengths) == (1, 1, 0.5, {"E": 1})
    (job,) = feinsum.campaigns.parse_plan('"ij,j->i" -s i=4,j=4 --workers 256').jobs
    assert job.workers == 256


def test_checks_take_numbers_and_their_text_alike() -> None:
    import numpy as np

    assert checks.count("n", np.int64(3)) == 3 and checks.count("n", "3") == 3
    assert checks.processes("workers", None) is None and checks.processes("workers", 256) == 256
    assert checks.seconds("t", "0.5") == 0.5 and checks.seconds("t", 0, zero=True) == 0.0
    assert checks.lengths("lengths", {"E": 2**31 - 1}) == {"E": 2**31 - 1}
    for bad in (True, 2.5, "2.5", "", None, float("inf")):
        with pytest.raises(ArgumentError, match=r"^n must be a whole number"):
            checks.count("n", bad)
    for bad in (float("nan"), float("inf"), -1e-9, 0, "x", True):
        with pytest.raises(ArgumentError, match=r"^t must be a finite positive number"):
            checks.seconds("t", bad)
    with pytest.raises(ArgumentError, match="must map length symbols"):
        checks.lengths("lengths", [("E", 3)])  # type: ignore[arg-type]


def test_measure_options_and_hook_options_check_their_fields() -> None:
    from feinsum.hook.planning import Options
    from feinsum.timing.measurement import MeasureOptions

    MeasureOptions(min_samples=1, warmup=0, min_time=0, race=0)
    with pytest.raises(ArgumentError, match=r"max_samples \(2\) must be at least min_samples"):
        MeasureOptions(min_samples=5, max_samples=2)
    with pytest.raises(ArgumentError, match="race must be a finite number, 0 or more"):
        MeasureOptions(race=-1)
    base = {"on_miss": "default", "on_busy": "wait", "budget": None, "time_limit": None,
            "lengths": (), "prefer": None, "wait_timeout": None}
    Options(**{**base, "budget": 1, "wait_timeout": 0, "lengths": (("E", 1),)})
    with pytest.raises(ArgumentError, match="wait_timeout must be"):
        Options(**{**base, "wait_timeout": -1})
    with pytest.raises(ArgumentError, match="lengths: E must be"):
        Options(**{**base, "lengths": (("E", 0),)})


def test_no_worker_count_below_one_reaches_the_pool() -> None:
    from feinsum.timing.isolation import WorkerPool
    from feinsum.tuning.codecheck import CurrentRecipes

    for bad in (-2, 0):
        with pytest.raises(ArgumentError, match="size must be a whole number from 1"):
            WorkerPool(device(), bad)
        with pytest.raises(ArgumentError, match="jobs must be a whole number from 1"):
            CurrentRecipes([], jobs=bad)
    assert CurrentRecipes([], jobs=1).jobs == 1


# }}}


# {{{ files: untouched when current, rewritten beside when changed, never of another kind


def _state(path: Path) -> tuple[int, int, bytes]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


@pytest.mark.parametrize("name", ["records.sqlite", "records.jsonl", "records.jsonl.gz"])
def test_revalidation_leaves_a_current_file_untouched(name: str, here: Path) -> None:
    if name.endswith(".gz"):
        (here / name).write_bytes(gzip.compress((here / "records.jsonl").read_bytes()))
    before = _state(here / name)
    time.sleep(0.01)  # a rewrite would show in the modification time
    report = feinsum.revalidate(here / name, jobs=1)
    assert report.note == "nothing changed: left as it was" and report.counts["current"]
    p, _ = _shell(f"feinsum db revalidate {name}", here)
    assert p.returncode == 0 and "nothing changed: left as it was" in p.stdout
    assert _state(here / name) == before
    assert sorted(f.name for f in here.iterdir() if f.name.startswith(".")) == []


def test_revalidation_rewrites_a_changed_export_beside_it_keeping_its_kind(here: Path
                                                                            ) -> None:
    from feinsum.database.files import file_kind, is_gzip

    path = here / "fresh.jsonl.gz"
    path.write_bytes(gzip.compress((here / "fresh.jsonl").read_bytes()))
    inode = path.stat().st_ino
    report = feinsum.revalidate(path, jobs=1)
    assert report.counts["fingerprinted"] == 2 and report.note == "rewritten in place"
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert is_gzip(path) and file_kind(path) == "export"
    assert feinsum.revalidate(path, jobs=1).note == "nothing changed: left as it was"
    plain = here / "fresh.jsonl"
    feinsum.revalidate(plain, jobs=1)
    assert file_kind(plain) == "export" and not is_gzip(plain)
    assert gzip.decompress(path.read_bytes()) == plain.read_bytes()


def test_a_failed_export_writes_nothing(here: Path) -> None:
    p, _ = _shell("feinsum db export out.jsonl --db damaged.sqlite", here)
    assert p.returncode == 1
    assert not [f for f in here.iterdir() if "out.jsonl" in f.name]


def test_an_export_may_replace_an_export_or_an_empty_file(here: Path) -> None:
    from feinsum.database import open_database

    with open_database(here / "records.sqlite", include_shipped=False) as db:
        assert db.export(here / "z.jsonl") == 302  # empty before
        assert db.export(here / "fresh.jsonl") == 302  # an export before
        before = _state(here / "records.jsonl")
        db.export(here / "records.jsonl", only_if_changed=True)
        assert _state(here / "records.jsonl") == before


# }}}


# {{{ each store fails under its own name


def _shipped_cache(cache: Path) -> Path:
    (found,) = cache.glob("shipped-*.sqlite")
    return found


@pytest.mark.parametrize("damaged", ["user", "shipped", "both"])
def test_each_store_fails_under_its_own_name(damaged: str, here: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from feinsum.database import open_database

    cache = tmp_path / "cache"
    monkeypatch.setenv("FEINSUM_CACHE_DIR", str(cache))
    user = here / ("damaged.sqlite" if damaged in ("user", "both") else "records.sqlite")
    with open_database(user, readonly=True) as db:
        assert db.shipped_store is not None  # builds the cache of team.jsonl
    if damaged in ("shipped", "both"):
        damage(_shipped_cache(cache))
    e = einsum().with_lengths({"E": 1024})
    for run in (lambda db: db.best(e, device()), lambda db: db.query(e),
                lambda db: db.count("ok", include_shipped=True)):
        with open_database(user, readonly=True) as db, pytest.raises(DatabaseError) as info:
            run(db)
        text = str(info.value)
        assert ("damaged.sqlite" in text) == (damaged in ("user", "both")), text
        assert ("shipped records (team.jsonl)" in text) == (damaged in ("shipped", "both"))
        assert len(text.splitlines()) == 1


# }}}


# {{{ the roofline


def _roof(f32: float, f64: float, bw: float = 2e10, **kw: Any) -> Any:
    from feinsum.timing.roofline import Roofline

    return Roofline(device().key, bw, bw, {"float32": f32, "float64": f64},
                    measured_at="2026-11-20T00:00:00+00:00", **kw)


def test_sanity_checks_of_a_roofline() -> None:
    from dataclasses import replace

    from feinsum.devices.models import MODELS
    from feinsum.timing.roofline import roofline_problems

    cpu = device()  # 8 float lanes to 4 double lanes
    assert roofline_problems(_roof(2e11, 1e11), cpu) == []
    (why,) = roofline_problems(_roof(1e11, 1e11), cpu)
    assert "float32 peak (100.0 GFLOP/s) is not above the float64 peak" in why
    assert "8 native float lanes to 4 double lanes" in why
    assert roofline_problems(_roof(1e11, 1e11), replace(cpu, native_vector_width_float=4,
                                                        preferred_vector_width_float=4)) == []
    h100 = MODELS["h100"].info
    (why,) = roofline_problems(_roof(3e13, 3e13), h100)
    assert "runs float64 at 0.5 of the float32 rate" in why
    (why,) = roofline_problems(_roof(9e13, 3e13), h100)
    assert "exceeds the NVIDIA H100 SXM5 80GB datasheet" in why
    (why,) = roofline_problems(_roof(2e11, 1e11, bw=5e9), cpu, previous=_roof(2e11, 1e11))
    assert why.startswith("the bandwidth (5.0 GB/s) is 25% of the 20.0 GB/s measured 2026")


@pytest.fixture
def fake_microbenchmarks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """run_microbenchmarks returning the rooflines put in the list, in turn (with their
    problems, as the real one computes them)."""
    from dataclasses import replace

    from feinsum.timing import roofline as rl

    queue: list[Any] = []

    def fake(dev: Any, *, quick: bool = False, previous: Any = None, **kw: Any) -> Any:
        roof = queue.pop(0)
        return replace(roof, problems=tuple(rl.roofline_problems(roof, device(), previous)))

    monkeypatch.setattr(rl, "run_microbenchmarks", fake)
    monkeypatch.setattr("feinsum.devices.opencl.device_info", lambda d: device())
    return queue


def test_measure_roofline_records_sound_and_flags_suspicious_measurements(
        fake_microbenchmarks: list[Any], tmp_path: Path) -> None:
    from feinsum.database import open_database
    from feinsum.timing.roofline import measure_roofline

    path = tmp_path / "roof.sqlite"
    fake_microbenchmarks += [_roof(1e11, 1e11), _roof(2e11, 1e11), _roof(2e11, 1e11, bw=5e9)]
    with pytest.warns(RooflineWarning, match="float32 peak .* is not above the float64"):
        first = measure_roofline(db=path, refresh=True)  # nothing recorded: recorded, flagged
    with open_database(path) as db:
        assert db.get_roofline(device())["problems"] == list(first.problems)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = measure_roofline(db=path)  # the recorded one is suspicious: measured again
        assert measure_roofline(db=path) == second  # sound: read back, not measured
    assert second.problems == () and len(fake_microbenchmarks) == 1
    with pytest.warns(RooflineWarning, match="not recorded: the bandwidth .* is 25% of"):
        kept = measure_roofline(db=path, refresh=True)
    assert kept == second  # the recorded one stays
    with open_database(path) as db:
        assert db.get_roofline(device())["copy_bandwidth"] == 2e10


def test_feinsum_devices_roofline(fake_microbenchmarks: list[Any], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import feinsum.devices.opencl as ocl

    (real, _), *_ = ocl.all_devices()
    monkeypatch.setattr(ocl, "all_devices", lambda: [(real, None)])
    db = str(tmp_path / "roof.sqlite")
    fake_microbenchmarks += [_roof(2e11, 1e11), _roof(2e11, 1e11, bw=5e9), _roof(1e11, 1e11)]
    code, out, err = run_cli("devices", "--roofline", "--db", db)
    assert code == 0 and "recorded" in out and "suspicious" not in out, out + err
    code, out, _ = run_cli("devices", "--roofline", "--db", db)
    assert "NOT recorded: the bandwidth (5.0 GB/s) is 25% of the 20.0 GB/s" in out
    assert "the recorded roofline stays" in out
    code, out, _ = run_cli("devices", "--roofline", "--db", db, "--json")
    (entry,) = json.loads(out)
    assert entry["recorded"] and entry["measured"]["problems"] == entry["roofline_problems"]
    code, out, _ = run_cli("devices", "--db", db)
    assert code == 0 and "(suspicious: the float32 peak" in out
    (entry,) = json.loads(run_cli("devices", "--db", db, "--json")[1])
    assert entry["roofline_problems"][0].startswith(
        "the float32 peak (100.0 GFLOP/s) is not above the float64 peak (100.0 GFLOP/s)")


def test_rounds_go_on_while_a_check_fails(monkeypatch: pytest.MonkeyPatch, cl_device: Any
                                          ) -> None:
    from feinsum.timing import roofline as rl

    f32 = iter([1e11, 1.2e11, 2e11, 2e11, 2e11, 2e11])

    class Bench:
        def __init__(self, *args: Any) -> None:
            pass

        def bandwidths(self) -> tuple[float, float]:
            return 2e10, 2e10

        def peak(self, dtype: str) -> float:
            return next(f32) if dtype == "float32" else 1e11

        def release(self) -> None:
            pass

    monkeypatch.setattr(rl, "_Bench", Bench)
    monkeypatch.setattr(rl, "roofline_problems",
                        lambda roof, info, previous=None: ["equal"] if
                        roof.peak_flops["float32"] < 1.5 * roof.peak_flops["float64"] else [])
    roof = rl.run_microbenchmarks(cl_device, rounds=1)
    assert roof.rounds == 3 and roof.peak_flops["float32"] == 2e11 and roof.problems == ()
    f32 = iter([1e11] * 10)
    roof = rl.run_microbenchmarks(cl_device)
    assert roof.rounds == rl.MAX_ROUNDS and roof.problems == ("equal",)


def test_report_says_why_a_point_is_above_its_roof(here: Path) -> None:
    import json

    code, out, _ = run_cli("report", "--no-plot", "--json", "--db", str(here / "busy.sqlite"))
    d = json.loads(out)
    (panel,) = d["panels"]
    assert panel["roofline_problems"] and "not above the float64" in panel["roofline_problems"][0]
    (point,) = d["points"]
    assert point["above_roof"].startswith("263% of its roof: the roofline of Test Device 9000")
    code, out, _ = run_cli("report", "-o", str(here / "r.png"), "--html",
                           str(here / "r.html"), "--db", str(here / "busy.sqlite"))
    assert code == 0 and "WARNING: point 1, ij,ej->ei" in out
    html = (here / "r.html").read_text()
    assert '<p class="warning">WARNING: suspicious roofline' in html
    assert 'class="latest above"' in html and "above its roof: 263%" in html


@pytest.mark.parametrize(("roof", "why"), [
    (dict(f32=2e11, f64=1e11, bandwidth=5e9), "cache"),  # 128 KiB of arrays
    (dict(f32=2e10, f64=1e10, bandwidth=1e12), "peak measured low"),
])
def test_reasons_a_point_is_above_its_roof(roof: dict[str, float], why: str, here: Path
                                           ) -> None:
    from feinsum.cli.report_data import collect
    from feinsum.database import open_database

    with open_database(here / "records.sqlite", include_shipped=False) as db:
        db.set_roofline(device(), roofline(**roof))
        (panel,) = collect(db)
    (point,) = panel.points
    assert point.above_roof is not None and point.above_roof[0] == why, point.above_roof


def test_large_arrays_above_the_memory_roof_mean_a_low_bandwidth() -> None:
    from dataclasses import replace

    from feinsum.cli.report_data import Panel, Point, above_roof
    from feinsum.timing.roofline import Roofline

    roof = Roofline(device().key, 1e10, 1e10, {"float64": 1e12})
    panel = Panel(device().key, "d", "float64", roof)
    point = Point(device().key, "d", "float64", "k", "e", "-", "generic", "user#1", "user",
                  dt.datetime(2026, 1, 1, tzinfo=dt.UTC), seconds=0.1, gflops=20.0,
                  intensity=1.0, roof=10.0)  # 2 GB of arrays at 20 GB/s
    label, text = above_roof(point, panel, device())
    assert label == "bandwidth measured low" and text.startswith("200% of its roof")
    small = replace(point, seconds=1e-6)  # 20 kB: caches
    assert above_roof(small, panel, device())[0] == "cache"  # type: ignore[index]
    assert "smaller than the roofline's streams (256 MiB)" in above_roof(
        small, panel, device())[1]  # type: ignore[index]
    assert above_roof(replace(point, gflops=9.0), panel, device()) is None


# }}}


def test_skips_are_counted_by_reason() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "root_conftest", Path(__file__).resolve().parents[1] / "conftest.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]

    class Report:
        def __init__(self, reason: str) -> None:
            self.longrepr = ("f.py", 1, f"Skipped: {reason}")

    lines: list[str] = []

    class Terminal:
        def __init__(self) -> None:
            self.stats = {"skipped": [Report("no PostgreSQL"), Report("no browser"),
                                      Report("no PostgreSQL")]}

        def write_sep(self, sep: str, title: str) -> None:
            lines.append(title)

        def write_line(self, line: str) -> None:
            lines.append(line)

    module.pytest_terminal_summary(Terminal(), 0, None)
    assert lines == ["3 skipped, by reason", "     2  no PostgreSQL", "     1  no browser"]
