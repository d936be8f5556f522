"""The timing database: schema, writes, queries, the fallback chain, errors (both backends)."""

from __future__ import annotations

import datetime as dt
import json
import math
import sqlite3
from pathlib import Path

import pytest
from database_support import make_device, make_identity, make_measurement, utc

import feinsum
from feinsum.database import (
    SCHEMA_VERSION,
    Answer,
    Database,
    NewMeasurement,
    best,
    open_database,
    params_key,
    query,
)
from feinsum.errors import DatabaseError

pytest_plugins = ("database_fixtures",)


def test_new_database_has_current_schema(db: Database) -> None:
    assert db.schema_version() == SCHEMA_VERSION
    assert db.revision() == 0
    assert db.count() == 0
    assert db.query(make_identity(), make_device()) == []


def test_measurement_round_trip(db: Database) -> None:
    dev = make_device()
    ident = make_identity()
    started = utc(2026, 1, 2, 3, 4, 5)
    mid = db.add_measurement(make_measurement(
        ident, dev, params={"tile": 16, "order": ["i", "j"], "vec": True},
        samples=[2e-3, 1e-3, 4e-3], validation_error=1e-12, tiles_kept_fraction=0.25,
        started_at=started, message="fine",
    ))
    assert isinstance(mid, int)
    (r,) = db.query(ident, dev)
    assert r.id == mid and r.source == "user" and len(r.uid) == 32
    assert r.canonical_key == ident.canonical_key and r.structure_key == ident.structure_key
    assert r.lengths == {"n0": 50000}
    assert r.params == {"tile": 16, "order": ["i", "j"], "vec": True}
    assert r.samples == (2e-3, 1e-3, 4e-3) and r.sample_count == 3
    assert r.min_time == 1e-3 and r.median_time == 2e-3
    assert r.spread == pytest.approx((4e-3 - 1e-3) / 2e-3)
    assert r.gflops == pytest.approx(2e9 / 1e-3 * 1e-9)  # at min_time, the figure of merit
    assert r.flops == 2e9 and r.bytes == 1e8
    assert r.validation_error == 1e-12 and r.tiles_kept_fraction == 0.25
    assert r.device_key == dev.key and r.device_vendor == "GenuineIntel"
    assert r.device_type == "CPU" and r.driver_version == "3.1"
    assert (r.recipe_name, r.recipe_version) == ("generic", "v1")
    assert r.status == "ok" and r.message == "fine"
    assert r.started_at == started and r.started_at.tzinfo is not None
    assert r.measured_at.tzinfo is not None
    assert abs(r.measured_at - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=5)
    assert r.feinsum_version == feinsum.__version__
    from importlib import metadata

    assert r.loopy_version == metadata.version("loopy")
    assert r.pyopencl_version == metadata.version("pyopencl")
    assert r.host
    assert r.params_key == params_key(r.params)


def test_query_orders_by_speed_and_filters(db: Database) -> None:
    dev, other = make_device(), make_device(name="gfx90a", vendor="AMD", device_type="GPU")
    ident = make_identity()
    for i, t in enumerate([3e-3, 1e-3, 2e-3]):
        db.add_measurement(make_measurement(ident, dev, params={"i": i}, median=t))
    db.add_measurement(make_measurement(ident, dev, recipe="other", params={"i": 9},
                                        median=5e-4, loopy_version="2024.1"))
    db.add_measurement(make_measurement(ident, dev, params={"i": 7}, status="timeout",
                                        samples=[], message="too slow"))
    db.add_measurement(make_measurement(ident, other, params={"i": 0}, median=1e-4))
    db.add_measurement(make_measurement(ident, dev, params={"i": 0}, median=1e-5,
                                        lengths={"n0": 1000}))
    db.add_measurement(make_measurement(make_identity("b"), dev, median=1e-6))

    times = [r.median_time for r in db.query(ident, dev)]
    assert times == sorted(times) and len(times) == 5
    assert [r.params["i"] for r in db.query(ident, dev, recipe="generic",
                                            lengths={"n0": 50000})] == [1, 2, 0]
    assert len(db.query(ident, dev, recipe=("generic", "v2"))) == 0
    assert [r.status for r in db.query(ident, dev, status="timeout")] == ["timeout"]
    assert len(db.query(ident, dev, status=None)) == 6
    assert len(db.query(ident, dev, status=["ok", "timeout"])) == 6
    assert [r.recipe_name for r in db.query(ident, dev, loopy_version="2024.1")] == ["other"]
    assert len(db.query(ident, None)) == 6
    assert len(db.query(ident, None, driver_version="3.1")) == 6
    assert len(db.query(ident, dev, limit=2)) == 2
    assert len(db.query(ident, dev, max_age=dt.timedelta(hours=1))) == 5
    assert len(db.query(make_identity("zzz"), dev)) == 0
    assert len(db.query(ident, make_device(name="unknown"))) == 0
    # by canonical key, and every record with einsum=None
    assert len(db.query(ident.canonical_key, dev.key)) == 5
    assert len(db.query(None, None)) == 7


def test_best_fallback_chain(db: Database) -> None:
    dev = make_device()
    twin = make_device(driver_version="3.2")  # same hardware, other driver
    sibling = make_device(name="pthread-AMD EPYC", compute_units=64)  # same vendor and type
    gpu = make_device(vendor="NVIDIA Corporation", name="H100", device_type="GPU")
    a = make_identity("a", "s", {"n0": 50000})
    a_small = make_identity("a", "s", {"n0": 1000})
    mate = make_identity("a-short-20", "s", {"n0": 50000})  # same structure, other key
    unknown = make_identity("x", "x")

    assert db.best(a, dev).rung == "default"
    ans = db.best(a, dev)
    assert ans.record is None and ans.recipe is None and ans.params is None and ans.is_default

    # same-vendor: another device of the vendor/type; same device name preferred
    db.add_measurement(make_measurement(a, sibling, params={"p": "sibling"}, median=1e-5))
    db.add_measurement(make_measurement(a, twin, params={"p": "twin"}, median=1e-3))
    db.add_measurement(make_measurement(a, gpu, params={"p": "gpu"}, median=1e-7))
    ans = db.best(a, dev)
    assert ans.rung == "same-vendor" and ans.params == {"p": "twin"}
    assert db.best(a, make_device(vendor="Other")).rung == "default"
    assert db.best(a, make_device(vendor="NVIDIA Corporation", name="A100",
                                  device_type="GPU")).params == {"p": "gpu"}

    # nearest lengths: a structure mate on this device, then the same key at other lengths
    db.add_measurement(make_measurement(mate, dev, params={"p": "mate"}, median=1e-6))
    assert db.best(a, dev).rung == "nearest-lengths"
    assert db.best(a, dev).params == {"p": "mate"}
    db.add_measurement(make_measurement(a, dev, params={"p": "4000"}, median=2e-3,
                                        lengths={"n0": 4000}))
    db.add_measurement(make_measurement(a, dev, params={"p": "20000"}, median=9e-3,
                                        lengths={"n0": 20000}))
    ans = db.best(a, dev)
    assert ans.rung == "nearest-lengths" and ans.params == {"p": "20000"}
    assert ans.distance == pytest.approx(math.log2(50000 / 20000))
    assert db.best(a_small, dev).params == {"p": "4000"}

    # exact: fastest ok record at these lengths; failures never count
    db.add_measurement(make_measurement(a, dev, params={"p": "slow"}, median=5e-3))
    db.add_measurement(make_measurement(a, dev, params={"p": "fast"}, median=4e-3))
    db.add_measurement(make_measurement(a, dev, params={"p": "broken"}, status="wrong-result",
                                        median=1e-9, validation_error=float("nan")))
    ans = db.best(a, dev)
    assert isinstance(ans, Answer)
    assert ans.rung == "exact" and ans.params == {"p": "fast"} and ans.distance == 0
    assert ans.recipe == "generic" and ans.recipe_version == "v1"
    assert ans.record is not None and ans.record.median_time == 4e-3
    assert ans.lengths == {"n0": 50000}
    # explicit lengths, recipe version filters
    assert db.best(a, dev, lengths={"n0": 4000}).rung == "exact"
    assert db.best(a, dev, recipe_versions={"generic": "v2"}).rung == "default"
    db.add_measurement(make_measurement(a, dev, version="v2", params={"p": "v2"}, median=6e-3))
    assert db.best(a, dev, recipe_versions={"generic": "v2"}).params == {"p": "v2"}
    assert db.best(a, dev, recipe="generic").params == {"p": "fast"}
    # by key
    assert db.best(a.canonical_key, dev, lengths={"n0": 50000}).params == {"p": "fast"}
    assert db.best(unknown, dev).rung == "default"
    assert db.best("fek1-nothing", dev).rung == "default"


def test_measured_params(db: Database) -> None:
    dev, ident = make_device(), make_identity()
    assert db.measured_params(ident, dev, "generic", "v1") == set()
    db.add_measurement(make_measurement(ident, dev, params={"b": 1, "a": 2}))
    db.add_measurement(make_measurement(ident, dev, params={"a": 3}, status="compile-error",
                                        samples=[], message="error: boom"))
    db.add_measurement(make_measurement(ident, dev, params={"a": 4}, lengths={"n0": 7}))
    db.add_measurement(make_measurement(ident, dev, params={"a": 5}, version="v2"))
    assert db.measured_params(ident, dev, "generic", "v1") == {'{"a":2,"b":1}', '{"a":3}'}
    assert db.measured_params(ident, dev, "generic", "v1", {"n0": 7}) == {'{"a":4}'}
    assert db.measured_params(ident, dev, "generic", "v2") == {'{"a":5}'}
    assert params_key({"b": 1, "a": 2}) == '{"a":2,"b":1}'


def test_revision_changes_on_every_write(db: Database) -> None:
    seen = {db.revision()}
    db.add_measurement(make_measurement())
    seen.add(db.revision())
    db.set_roofline(make_device(), {"bandwidth": 1e10})
    seen.add(db.revision())
    db.add_measurements([make_measurement(params={"i": i}) for i in range(3)])
    seen.add(db.revision())
    assert len(seen) == 4
    other = open_database(db.url, include_shipped=False)
    try:
        before = db.revision()
        other.add_measurement(make_measurement())  # another connection (or process)
        assert db.revision() != before
    finally:
        other.close()


def test_rooflines_and_devices(db: Database) -> None:
    dev = make_device()
    assert db.get_roofline(dev) is None
    did = db.add_device(dev)
    assert db.add_device(dev) == did
    db.set_roofline(dev, {"bandwidth_gbs": 20.5, "peak": {"float32": 1e12}})
    assert db.get_roofline(dev) == {"bandwidth_gbs": 20.5, "peak": {"float32": 1e12}}
    db.set_roofline(dev, {"bandwidth_gbs": 21.0})
    assert db.get_roofline(dev) == {"bandwidth_gbs": 21.0}
    assert db.get_roofline(make_device(name="other")) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"status": "great"}, "unknown status"),
        ({"samples": [1e-3, float("nan")]}, "not finite"),
        ({"samples": [-1.0]}, "negative"),
        ({"samples": []}, "needs samples"),
        ({"params": {"f": object()}}, "not storable as JSON"),
        ({"params": {1: 2}}, "not storable as JSON"),
        ({"params": {"x": float("inf")}}, "not storable as JSON"),
        ({"lengths": {"n0": 2.5}}, "not a non-negative integer"),
        ({"recipe": ""}, "recipe_name"),
        ({"uid": "has space"}, "invalid measurement uid"),
    ],
)
def test_invalid_measurements_are_refused(db: Database, kwargs: dict, message: str) -> None:
    with pytest.raises(DatabaseError, match=message):
        db.add_measurement(make_measurement(**kwargs))
    assert db.count() == 0


def test_sql_injection_is_data(db: Database) -> None:
    evil = "'); DROP TABLE measurements; --"
    ident = make_identity(name="x'y")
    db.add_measurement(make_measurement(ident, make_device(name=evil), recipe=evil,
                                        params={evil: evil}, message=evil))
    (r,) = db.query(ident, None, recipe=evil)
    assert r.params == {evil: evil} and r.device_name == evil and r.message == evil
    assert db.count() == 1


def test_numpy_values_and_tuples_are_stored_as_json(db: Database) -> None:
    import numpy as np

    db.add_measurement(make_measurement(params={"t": np.int64(4), "v": (1, 2), "f": np.float32(
        0.5), "b": np.bool_(True)}, samples=[np.float64(1e-3)]))
    (r,) = db.query(make_identity(), make_device())
    assert r.params == {"t": 4, "v": [1, 2], "f": 0.5, "b": True}


def test_module_level_query_and_best(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_database(db_url, include_shipped=False) as d:
        d.add_measurement(make_measurement(median=2e-3))
    monkeypatch.setenv("FEINSUM_DB", db_url)
    monkeypatch.setenv("FEINSUM_CACHE_DIR", "/nonexistent-unused")
    assert len(query(make_identity(), make_device())) == 1
    assert best(make_identity(), make_device()).rung == "exact"
    assert len(feinsum.query(make_identity(), make_device(), db_url)) == 1
    assert feinsum.best(make_identity(), make_device(), db_url).rung == "exact"
    assert feinsum.open_database is open_database


def test_readonly(db_url: str) -> None:
    with open_database(db_url, include_shipped=False) as d:
        d.add_measurement(make_measurement())
    with open_database(db_url, readonly=True, include_shipped=False) as ro:
        assert ro.count() == 1
        if ro.path is not None:  # SQLite enforces it itself
            with pytest.raises(DatabaseError, match="read-only"):
                ro.add_measurement(make_measurement())
        with pytest.raises(DatabaseError, match="read-only"):
            ro.set_roofline(make_device(), {})


def test_readonly_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="no database"):
        open_database(tmp_path / "none.sqlite", readonly=True)


def test_url_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from feinsum.database import default_path, resolve_url

    monkeypatch.delenv("FEINSUM_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_path() == tmp_path / "data" / "feinsum" / "feinsum.sqlite"
    assert resolve_url(None).database == str(default_path())
    monkeypatch.setenv("FEINSUM_DB", str(tmp_path / "env.sqlite"))
    assert resolve_url(None).database == str(tmp_path / "env.sqlite")
    monkeypatch.setenv("FEINSUM_DB", "postgresql+psycopg://u:secret@h:5/db")
    url = resolve_url(None)
    assert url.get_backend_name() == "postgresql" and url.database == "db"
    assert resolve_url(tmp_path / "p.sqlite").database == str(tmp_path / "p.sqlite")
    assert resolve_url("rel.sqlite").database == str(Path("rel.sqlite").absolute())
    monkeypatch.setenv("FEINSUM_DB", str(tmp_path / "made" / "here.sqlite"))
    with open_database(include_shipped=False) as d:
        assert d.path == tmp_path / "made" / "here.sqlite"
        assert "secret" not in repr(d)


def test_password_is_hidden_in_messages() -> None:
    with pytest.raises(DatabaseError) as info:
        open_database("postgresql+psycopg://u:topsecret@127.0.0.1:1/db", include_shipped=False)
    assert "topsecret" not in str(info.value)


def test_sqlite_settings(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    with open_database(path, include_shipped=False) as d:
        with d.user_store.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        d.add_measurement(make_measurement())
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys = ON")
    with pytest.raises(sqlite3.IntegrityError):  # foreign keys are real
        con.execute("DELETE FROM devices")
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"ix_measurements_rank", "ix_einsums_structure_key", "ix_devices_vendor_type"} <= names
    con.close()


# {{{ refusing foreign, damaged and newer databases


def _write_db(path: Path) -> None:
    with open_database(path, include_shipped=False) as d:
        d.add_measurements([make_measurement(params={"i": i}, message="x" * 2000)
                            for i in range(200)])
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()


def test_foreign_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(DatabaseError, match=r"not a feinsum database.*customers"):
        open_database(path, include_shipped=False)
    con = sqlite3.connect(path)  # untouched
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["customers"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello, this is a text file\n" * 10, "not a SQLite file"),
        (b'{"format":"feinsum-timings"}\n', "JSON-lines export"),
        (bytes(range(256)) * 40, "not a SQLite file"),
        (b"SQLite format 3\x00" + b"\x10\x00", "truncated"),
    ],
)
def test_not_a_database(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.sqlite"
    path.write_bytes(content)
    with pytest.raises(DatabaseError, match=message):
        open_database(path, include_shipped=False)


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    _write_db(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatabaseError, match="truncated"):
        open_database(path, include_shipped=False)


def test_corrupt_pages(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    _write_db(path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xa5" * (len(data) - page)  # keep page 1 (the schema), ruin the rest
    path.write_bytes(bytes(data))
    with pytest.raises(DatabaseError, match=r"damaged|malformed"), \
            open_database(path, include_shipped=False) as d:
        d.query(make_identity(), make_device())  # never a silent empty answer


def test_newer_schema_is_refused(db_url: str) -> None:
    import sqlalchemy as sa

    from feinsum.database.engine import make_engine

    open_database(db_url, include_shipped=False).close()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE feinsum_alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(DatabaseError) as info:
        open_database(db_url, include_shipped=False)
    msg = str(info.value)
    assert "0099" in msg and SCHEMA_VERSION in msg and "pip install -U feinsum" in msg


def test_server_database_shared_with_other_tables(pg_schema_url: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(pg_schema_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE app_users (id integer primary key)")
    with open_database(pg_schema_url, include_shipped=False) as d:  # may live beside others
        d.add_measurement(make_measurement())
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE feinsum_alembic_version")
    engine.dispose()
    with pytest.raises(DatabaseError, match="not a feinsum database"):
        open_database(pg_schema_url, include_shipped=False)


# }}}


def test_real_einsums(db: Database) -> None:
    """Keys from feinsum.spec.canonical: one record serves every long length (nearest rung)."""
    e = feinsum.einsum("ij,ej->ei", feinsum.array("A", (35, 35)),
                       feinsum.array("u", (50000, 35)))
    e2 = e.with_lengths({"E": 10000}) if "E" in e.lengths.values() else feinsum.einsum(
        "ij,ej->ei", feinsum.array("A", (35, 35)), feinsum.array("u", (10000, 35)))
    dev = make_device()
    db.add_measurement(NewMeasurement(einsum=e, device=dev, recipe_name="generic",
                                      recipe_version="v1", params={"t": 1}, samples=[1e-3]))
    (r,) = db.query(e2, dev)  # same canonical key: long lengths are abstracted
    assert list(r.lengths.values()) == [50000]
    assert json.loads(r.params_key) == {"t": 1}
    assert db.best(e, dev).rung == "exact"
    assert db.best(e2, dev).rung == "nearest-lengths"
    assert db.measured_params(e, dev, "generic", "v1") == {'{"t":1}'}
    assert db.measured_params(e2, dev, "generic", "v1") == set()
