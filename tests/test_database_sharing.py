"""Sharing: JSON-lines export/import, merging, pruning, the shipped records, clear errors."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import pytest
from database_support import make_device, make_identity, make_measurement, utc

from feinsum.database import FORMAT_VERSION, Database, open_database
from feinsum.database.__main__ import main as cli
from feinsum.errors import DatabaseError

pytest_plugins = ("database_fixtures",)


def _fill(d: Database) -> None:
    cpu, gpu = make_device(), make_device(vendor="NVIDIA Corporation", name="H100",
                                          device_type="GPU")
    a, b = make_identity("a"), make_identity("b", "t", {"n0": 1000, "n1": 300})
    d.add_measurement(make_measurement(a, cpu, params={"t": 1}, median=2e-3,
                                       started_at=utc(2026, 3, 1, 12), validation_error=0.0))
    d.add_measurement(make_measurement(a, cpu, params={"t": 2, "order": ["i", "j"]},
                                       median=1e-3, tiles_kept_fraction=0.3))
    d.add_measurement(make_measurement(a, gpu, recipe="dg", version="abc", params={"t": 2},
                                       median=1e-5))
    d.add_measurement(make_measurement(b, gpu, params={"w": 64}, status="wrong-result",
                                       validation_error=float("inf"), message="max err inf"))
    d.add_measurement(make_measurement(b, cpu, params={"w": 1}, status="compile-error",
                                       samples=[], message="error: 'x' undeclared \u00e9"))
    d.set_roofline(gpu, {"bandwidth": 3.0e12, "peak": {"float32": 5e13}})


def _comparable(d: Database) -> list[tuple]:
    return sorted(
        (r.uid, r.canonical_key, r.device_key, r.recipe_name, r.recipe_version,
         json.dumps(r.params, sort_keys=True), json.dumps(dict(r.lengths), sort_keys=True),
         r.status, r.samples, r.median_time, r.min_time, r.spread, r.gflops,
         r.validation_error, r.message, r.tiles_kept_fraction, r.host, r.loopy_version,
         r.measured_at, r.started_at)
        for r in d.query(None, None, status=None)
    )


def test_export_import_round_trip(db: Database, tmp_path: Path) -> None:
    _fill(db)
    first = tmp_path / "first.jsonl"
    assert db.export(first) == 5
    lines = first.read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "feinsum-timings",
                                    "format_version": FORMAT_VERSION, "type": "header"}
    assert json.loads(lines[-1]) == {"type": "end"}
    assert [json.loads(x)["type"] for x in lines[1:-1]] == (
        ["device"] * 2 + ["einsum"] * 2 + ["roofline"] + ["measurement"] * 5
    )
    with open_database(tmp_path / "copy.sqlite", include_shipped=False) as copy:
        report = copy.import_file(first)
        assert (report.added, report.skipped, report.devices, report.einsums,
                report.rooflines) == (5, 0, 2, 2, 1)
        assert _comparable(copy) == _comparable(db)
        gpu = make_device(vendor="NVIDIA Corporation", name="H100", device_type="GPU")
        assert copy.get_roofline(gpu) == {"bandwidth": 3.0e12, "peak": {"float32": 5e13}}
        second = tmp_path / "second.jsonl"
        copy.export(second)
    assert second.read_bytes() == first.read_bytes()  # deterministic: diffs like code


def test_gzip_and_filtered_export(db: Database, tmp_path: Path) -> None:
    _fill(db)
    path = tmp_path / "ok.jsonl.gz"
    assert db.export(path, status="ok") == 3
    with gzip.open(path) as f:
        assert f.read().startswith(b'{"format":"feinsum-timings"')
    assert db.export(tmp_path / "gpu.jsonl", device=make_device(
        vendor="NVIDIA Corporation", name="H100", device_type="GPU")) == 2
    with open_database(":memory:", include_shipped=False) as mem:
        assert mem.import_file(path).added == 3
        assert mem.count() == 3


def test_merge_is_idempotent(db_url: str, tmp_path: Path) -> None:
    with open_database(db_url, include_shipped=False) as a, \
            open_database(tmp_path / "b.sqlite", include_shipped=False) as b:
        _fill(a)
        b.merge(a)  # b now holds a's records ...
        b.add_measurement(make_measurement(params={"only": "b"}))  # ... and one of its own
        b.add_measurement(make_measurement(params={"only": "b2"}))
        report = a.merge(b)
        assert (report.added, report.skipped) == (2, 5)
        assert a.count(status=None) == 7
        again = a.merge(b)
        assert (again.added, again.skipped) == (0, 7)
        assert a.count(status=None) == 7
        assert _comparable(a) == _comparable(b)
        export = tmp_path / "a.jsonl"
        a.export(export)
        assert a.merge(export).added == 0  # an export file, merged twice
        assert a.merge(str(tmp_path / "b.sqlite")).added == 0  # a database path
        assert a.count(status=None) == 7


def test_prune(db: Database) -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=400)
    db.add_measurement(make_measurement(params={"p": "old"}, measured_at=old))
    db.add_measurement(make_measurement(params={"p": "old-loopy"}, loopy_version="2024.1"))
    db.add_measurement(make_measurement(params={"p": "newer-loopy"}, loopy_version="2025.10"))
    db.add_measurement(make_measurement(params={"p": "old-recipe"}, version="v0"))
    db.add_measurement(make_measurement(params={"p": "failed"}, status="timeout", samples=[]))
    db.add_measurement(make_measurement(params={"p": "keep"}, loopy_version="2025.2"))
    with pytest.raises(DatabaseError, match="needs a criterion"):
        db.prune()
    rev = db.revision()
    assert db.prune(older_than=dt.timedelta(days=365), dry_run=True) == 1
    assert db.revision() == rev and db.count(status=None) == 6
    assert db.prune(older_than=dt.timedelta(days=365)) == 1
    assert db.prune(loopy_below="2025.2") == 1  # 2024.1 goes; 2025.10 > 2025.2 stays
    assert db.prune(recipe_versions={"generic": "v1"}) == 1
    assert db.prune(status="timeout") == 1
    assert sorted(r.params["p"] for r in db.query(None, None, status=None)) == [
        "keep", "newer-loopy"]
    assert db.revision() > rev


def test_cli_export_import_prune(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst, out = tmp_path / "src.sqlite", tmp_path / "dst.sqlite", tmp_path / "x.jsonl"
    with open_database(src, include_shipped=False) as d:
        _fill(d)
    assert cli(["--db", str(src), "export", str(out)]) == 0
    assert cli(["--db", str(dst), "import", str(out)]) == 0
    assert cli(["--db", str(dst), "import", str(out)]) == 0
    assert cli(["--db", str(dst), "merge", str(src)]) == 0
    assert cli(["--db", str(dst), "prune", "--status", "compile-error", "--dry-run"]) == 0
    assert cli(["info", str(dst)]) == 0
    text = capsys.readouterr().out
    assert "5 measurements added" in text and "0 measurements added, 5 already" in text
    assert "would delete 1" in text and "measurements:    5" in text
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nonsense\n")
    assert cli(["--db", str(dst), "import", str(bad)]) == 1
    assert "not a feinsum export" in capsys.readouterr().err


# {{{ refusing truncated, corrupt and foreign files


def _export(tmp_path: Path) -> Path:
    path = tmp_path / "good.jsonl"
    with open_database(tmp_path / "src.sqlite", include_shipped=False) as d:
        _fill(d)
        d.export(path)
    return path


def _mutations(good: str) -> dict[str, tuple[str | bytes, str]]:
    lines = good.splitlines(keepends=True)
    meas = [i for i, x in enumerate(lines) if '"type":"measurement"' in x]
    m0 = json.loads(lines[meas[0]])
    return {
        "cut mid-line": (good[: len(good) - 40], "truncated"),
        "cut at a line end": ("".join(lines[:-2]), "no end line"),
        "empty": ("", "empty file"),
        "foreign json": ('{"name": "x", "value": 1}\n{"type":"end"}\n', "not a feinsum export"),
        "csv": ("uid,median\nabc,0.1\n", "not a feinsum export"),
        "binary": (bytes(range(256)) * 8, "not a feinsum export|not a line"),
        "array line": (lines[0] + "[1, 2]\n" + lines[-1], "expected a JSON object"),
        "newer format": (good.replace(f'"format_version":{FORMAT_VERSION}',
                                      '"format_version":99', 1),
                         "newer than this feinsum"),
        "unknown type": (lines[0] + '{"type":"macro","code":"import os"}\n' + lines[-1],
                         "unknown line type"),
        "after end": (good + lines[meas[0]], "after the end line"),
        "two headers": (good + good, "concatenated"),
        "nan": (good.replace('"min_time":', '"min_time":NaN,"x":', 1), "not a line"),
        "undefined device": (
            good.replace(lines[meas[0]], json.dumps({**m0, "device": "nowhere"}) + "\n"),
            "not defined above"),
        "bad status": (
            good.replace(lines[meas[0]], json.dumps({**m0, "status": "great"}) + "\n"),
            "unknown status"),
        "bad samples": (
            good.replace(lines[meas[0]], json.dumps({**m0, "samples": ["fast"]}) + "\n"),
            "not a finite number"),
        "missing field": (
            good.replace(lines[meas[0]], json.dumps(
                {k: v for k, v in m0.items() if k != "measured_at"}) + "\n"),
            "missing field 'measured_at'"),
        "params not an object": (
            good.replace(lines[meas[0]], json.dumps({**m0, "params": "x"}) + "\n"),
            "wrong type"),
    }


@pytest.mark.parametrize("case", list(_mutations('{"type":"measurement"}\n{"type":"end"}\n'
                                                 '{"type":"end"}\n').keys()))
def test_bad_exports_are_refused_whole(tmp_path: Path, case: str) -> None:
    good = _export(tmp_path).read_text()
    content, message = _mutations(good)[case]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    with open_database(tmp_path / "dst.sqlite", include_shipped=False) as d:
        with pytest.raises(DatabaseError, match=message):
            d.import_file(bad)
        assert d.count(status=None) == 0  # nothing half-imported
        assert d.revision() == 0


def test_sqlite_file_given_to_import(tmp_path: Path) -> None:
    _export(tmp_path)
    with open_database(tmp_path / "dst.sqlite", include_shipped=False) as d:
        with pytest.raises(DatabaseError, match="is a SQLite database"):
            d.import_file(tmp_path / "src.sqlite")
        assert d.merge(tmp_path / "src.sqlite").added == 5  # merge takes either


def test_truncated_gzip(tmp_path: Path) -> None:
    good = _export(tmp_path)
    gz = tmp_path / "x.jsonl.gz"
    gz.write_bytes(gzip.compress(good.read_bytes())[:-30])
    with open_database(":memory:", include_shipped=False) as d:
        with pytest.raises(DatabaseError, match=r"truncated|cannot read"):
            d.import_file(gz)
        assert d.count(status=None) == 0


# }}}


# {{{ shipped records


def test_shipped_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEINSUM_CACHE_DIR", str(tmp_path / "cache"))
    shipped = tmp_path / "db"
    shipped.mkdir()
    with open_database(tmp_path / "team.sqlite", include_shipped=False) as team:
        _fill(team)
        team.export(shipped / "cpu.jsonl")
    original = (shipped / "cpu.jsonl").read_bytes()
    a, cpu = make_identity("a"), make_device()

    with open_database(tmp_path / "user.sqlite", include_shipped=shipped) as user:
        assert user.count(include_shipped=True) == 5 and user.count() == 0
        (r0, r1) = user.query(a, cpu)
        assert r0.source == r1.source == "shipped"
        assert user.best(a, cpu).params == {"t": 2, "order": ["i", "j"]}
        assert user.measured_params(a, cpu, "generic", "v1") == {
            '{"t":1}', '{"order":["i","j"],"t":2}'}
        rev = user.revision()
        assert rev == 5  # the shipped records count
        user.add_measurement(make_measurement(a, cpu, params={"t": 3}, median=5e-4))
        assert user.revision() > rev
        assert [r.source for r in user.query(a, cpu)] == ["user", "shipped", "shipped"]
        assert user.best(a, cpu).params == {"t": 3}
        assert user.query(a, cpu, include_shipped=False)[0].params == {"t": 3}
        assert user.get_roofline(make_device(vendor="NVIDIA Corporation", name="H100",
                                             device_type="GPU"))["bandwidth"] == 3.0e12
        shipped_store = user.shipped_store
        assert shipped_store is not None and shipped_store.readonly
        with pytest.raises(DatabaseError, match="read-only"):
            shipped_store.add_device(cpu)
    assert (shipped / "cpu.jsonl").read_bytes() == original  # untouched
    caches = list((tmp_path / "cache").glob("shipped-*.sqlite"))
    assert len(caches) == 1
    with open_database(tmp_path / "user.sqlite", include_shipped=shipped) as again:
        assert len(again.query(a, cpu)) == 3  # from the cache
    # a changed file gets a new cache; a corrupt one is a clear error on first use
    (shipped / "cpu.jsonl").write_text((shipped / "cpu.jsonl").read_text()[:-20])
    with open_database(tmp_path / "user.sqlite", include_shipped=shipped) as broken, \
            pytest.raises(DatabaseError, match=r"cpu\.jsonl.*truncated"):
        broken.query(a, cpu)


def test_shipped_records_without_a_writable_cache(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEINSUM_CACHE_DIR", "/proc/feinsum-no-cache-here")
    with open_database(tmp_path / "team.sqlite", include_shipped=False) as team:
        _fill(team)
        team.export(tmp_path / "s.jsonl")
    with open_database(":memory:", include_shipped=tmp_path / "s.jsonl") as user:
        assert user.count(include_shipped=True) == 5  # loaded into memory instead


def test_default_shipped_locations(monkeypatch: pytest.MonkeyPatch) -> None:
    import feinsum
    from feinsum.database.shipped import default_shipped_dirs, shipped_files

    monkeypatch.delenv("FEINSUM_SHIPPED", raising=False)  # conftest hides shipped records
    dirs = default_shipped_dirs()
    pkg = Path(feinsum.__file__).resolve().parent
    assert dirs[0] == pkg / "_shipped" / "db"
    if (pkg.parents[1] / "pyproject.toml").is_file():  # a source checkout
        assert dirs[1] == pkg.parents[1] / "db"
    for f in shipped_files(True):  # whatever the repository ships must load
        assert f.suffix in (".jsonl", ".gz")
    with pytest.raises(DatabaseError, match="no shipped records"):
        shipped_files("/nonexistent/db")


def test_repository_shipped_records_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """The records committed in db/ (if any) are valid exports, and the default database
    sees them."""
    from feinsum.database.shipped import shipped_files

    monkeypatch.setenv("FEINSUM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FEINSUM_SHIPPED", raising=False)
    with open_database(":memory:") as d:
        d.revision()  # loads them (or finds none)
        shipped = d.shipped_store
        assert (shipped is None) == (not shipped_files(True))
    monkeypatch.setenv("FEINSUM_SHIPPED", "none")
    with open_database(":memory:") as d:
        assert d.shipped_store is None


def test_shipped_env_var_names_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from feinsum.database.shipped import shipped_files

    f = tmp_path / "team.jsonl"
    f.write_text("")
    monkeypatch.setenv("FEINSUM_SHIPPED", str(tmp_path))
    assert shipped_files(True) == [f.resolve()]
    monkeypatch.setenv("FEINSUM_SHIPPED", "off")
    assert shipped_files(True) == []


# }}}


def test_single_sample_records_round_trip_to_the_same_bytes(db: Database,
                                                            tmp_path: Path) -> None:
    """A record whose minimum is its median (one sample: what a raced candidate leaves)
    exports, imports and exports again to the same bytes, its GFLOP/s to the last digit."""
    from feinsum.database import NewMeasurement

    for t, flops in ((0.059142464000000006, 2147483648.0), (0.014411571000000001, 315e6),
                     (0.155047177, 2147483648.0), (0.11478655200000001, 6615e6)):
        db.add_measurement(NewMeasurement(make_identity(), make_device(), "r", "v",
                                          {"t": t}, samples=[t], flops=flops,
                                          code_fingerprint="c1-" + "a" * 40))
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    db.export(first)
    with open_database(tmp_path / "copy.sqlite", include_shipped=False) as copy:
        copy.import_file(first)
        copy.export(second)
    assert first.read_bytes() == second.read_bytes()
