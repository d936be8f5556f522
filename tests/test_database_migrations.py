"""Schema versions: migrations agree with the models; older databases upgrade, losing nothing."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from database_support import make_device, make_identity, make_measurement

from feinsum.database import KNOWN_VERSIONS, SCHEMA_VERSION, open_database
from feinsum.database.engine import (
    create_schema,
    make_engine,
    run_migrations,
    write_connection,
)
from feinsum.database.models import VERSION_TABLE, Base
from feinsum.errors import DatabaseError

DUMP_0001 = Path(__file__).parent / "data" / "feinsum-schema-0001.sql"

pytest_plugins = ("database_fixtures",)


def _diff(engine: sa.Engine) -> list[Any]:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as conn:
        mc = MigrationContext.configure(
            conn, opts={"compare_type": True, "version_table": VERSION_TABLE}
        )
        return list(compare_metadata(mc, Base.metadata))


def _version(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))]


def test_revisions_are_the_known_versions() -> None:
    from alembic.script import ScriptDirectory

    from feinsum.database.engine import _alembic_config

    script = ScriptDirectory.from_config(_alembic_config(None))
    chain = [s.revision for s in reversed(list(script.walk_revisions()))]
    assert tuple(chain) == KNOWN_VERSIONS
    assert script.get_current_head() == SCHEMA_VERSION == KNOWN_VERSIONS[-1]


def test_migrations_build_the_models_schema(db_url: str) -> None:
    """Running every migration and create_all + stamp give the same schema."""
    engine = make_engine(db_url)
    with write_connection(engine) as conn:
        run_migrations(conn)
    assert _version(engine) == [SCHEMA_VERSION]
    assert _diff(engine) == []
    with write_connection(engine) as conn:
        for t in reversed(Base.metadata.sorted_tables):
            t.drop(conn)
        conn.exec_driver_sql(f"DROP TABLE {VERSION_TABLE}")
        create_schema(conn)
    assert _version(engine) == [SCHEMA_VERSION]
    assert _diff(engine) == []
    engine.dispose()


def _old_rows() -> dict[str, list[dict[str, Any]]]:
    cpu = make_device()
    gpu = make_device(vendor="NVIDIA Corporation", name="NVIDIA H100", device_type="GPU")
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def dev(i: int, d: Any) -> dict[str, Any]:
        return {
            "id": i, "key": d.key, "platform_name": d.platform_name,
            "platform_version": d.platform_version, "vendor": d.vendor, "name": d.name,
            "driver_version": d.driver_version, "opencl_version": d.opencl_version,
            "device_type": d.device_type, "compute_units": d.compute_units,
            "max_work_group_size": d.max_work_group_size, "local_mem_size": d.local_mem_size,
            "global_mem_size": d.global_mem_size, "has_fp64": d.has_fp64,
            "info_json": json.dumps(d.as_dict()), "created_at": t0,
        }

    configs = ['{"tile":8}', '{"tile":16}']
    base = {
        "sample_count": 2, "spread": 0.1, "flops": 2e9, "bytes": 1e8, "gflops": 1.0,
        "validation_error": None, "message": None, "host": "old-host",
        "loopy_version": "2024.1", "pyopencl_version": "2024.2", "feinsum_version": "0.0.9",
        "started_at": None,
    }
    measurements = [
        {**base, "id": 1, "uid": "u1", "einsum_id": 1, "device_id": 1, "recipe_id": 1,
         "configuration_id": 1, "lengths_key": '{"n0":50000}', "status": "ok",
         "samples_json": "[0.002,0.0021]", "min_time": 0.002, "median_time": 0.00205,
         "measured_at": t0 + dt.timedelta(days=1)},
        {**base, "id": 2, "uid": "u2", "einsum_id": 1, "device_id": 1, "recipe_id": 1,
         "configuration_id": 2, "lengths_key": '{"n0":50000}', "status": "ok",
         "samples_json": "[0.001,0.0011]", "min_time": 0.001, "median_time": 0.00105,
         "measured_at": t0 + dt.timedelta(days=2)},
        {**base, "id": 3, "uid": "u3", "einsum_id": 1, "device_id": 2, "recipe_id": 1,
         "configuration_id": 2, "lengths_key": '{"n0":50000}', "status": "timeout",
         "samples_json": "[]", "sample_count": 0, "min_time": None, "median_time": None,
         "message": "timed out", "measured_at": t0 + dt.timedelta(days=3)},
    ]
    ident = make_identity()
    return {
        "devices": [dev(1, cpu), dev(2, gpu)],
        "einsums": [{"id": 1, "canonical_key": ident.canonical_key,
                     "structure_key": ident.structure_key,
                     "canonical_text": ident.canonical_text, "spec_json": ident.spec_json,
                     "created_at": t0}],
        "recipes": [{"id": 1, "name": "generic", "version": "v1", "created_at": t0}],
        "configurations": [
            {"id": i + 1, "params_hash": hashlib.sha256(c.encode()).hexdigest(),
             "params_json": c} for i, c in enumerate(configs)
        ],
        "measurements": measurements,
        "feinsum_state": [{"id": 1, "application": "feinsum", "revision": 3,
                           "created_at": t0}],
    }


def _make_0001_database(url: str) -> None:
    """A database of the first released schema (revision 0001), filled through its own
    tables (not today's models)."""
    engine = make_engine(url)
    with write_connection(engine) as conn:
        run_migrations(conn, "0001")
        meta = sa.MetaData()
        meta.reflect(conn)
        assert "rooflines" not in meta.tables
        assert "tiles_kept_fraction" not in meta.tables["measurements"].c
        for table, rows in _old_rows().items():
            t = meta.tables[table]
            for row in rows:
                if engine.dialect.name == "sqlite":  # naive UTC, as the schema stores it
                    row = {k: (v.replace(tzinfo=None) if isinstance(v, dt.datetime) else v)
                           for k, v in row.items()}
                conn.execute(t.insert().values(**row))
            if engine.dialect.name == "postgresql":  # explicit ids: move the sequences on
                conn.execute(sa.text(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                    f"(SELECT max(id) FROM {table}))"
                ))
    assert _version(engine) == ["0001"]
    engine.dispose()


def test_old_database_is_upgraded_without_loss(db_url: str) -> None:
    _make_0001_database(db_url)
    with open_database(db_url, include_shipped=False) as d:
        assert d.schema_version() == SCHEMA_VERSION
        assert d.count() == 3 and d.count("ok") == 2 and d.count("timeout") == 1
        ident, cpu = make_identity(), make_device()
        fast, slow = d.query(ident, cpu)
        assert fast.uid == "u2" and fast.params == {"tile": 16} and fast.median_time == 0.00105
        assert slow.uid == "u1" and slow.samples == (0.002, 0.0021)
        assert fast.loopy_version == "2024.1" and fast.host == "old-host"
        assert fast.tiles_kept_fraction is None
        assert fast.measured_at == dt.datetime(2026, 1, 3, tzinfo=dt.UTC)
        (t,) = d.query(ident, None, status="timeout")
        assert t.message == "timed out" and t.device_name == "NVIDIA H100"
        assert d.best(ident, cpu).params == {"tile": 16}
        assert d.revision() == 3
        # the new schema works on the upgraded file
        d.add_measurement(make_measurement(ident, cpu, median=1e-4, tiles_kept_fraction=0.5))
        d.set_roofline(cpu, {"bandwidth": 1.0})
        assert d.best(ident, cpu).record.tiles_kept_fraction == 0.5
        assert d.revision() > 3
    engine = make_engine(db_url)
    assert _diff(engine) == []
    engine.dispose()


def test_committed_first_schema_file_upgrades(tmp_path: Path) -> None:
    """A database file made by the first released schema (kept as an SQL dump)."""
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(DUMP_0001.read_text())
    con.close()
    _assert_readonly_refusal(path)
    with open_database(path, include_shipped=False) as d:
        assert d.schema_version() == SCHEMA_VERSION
        records = d.query(None, None, status=None)
        assert len(records) == 5
        by_uid = {r.uid[-1]: r for r in records}
        assert by_uid["1"].samples == (0.002, 0.001, 0.003)
        assert by_uid["1"].params == {"tile": 8} and by_uid["1"].lengths == {"n0": 50000}
        assert by_uid["3"].status == "compile-error" and by_uid["3"].message == "error: no vec"
        assert by_uid["4"].lengths == {"n0": 1000, "n1": 300}
        assert by_uid["4"].device_name == "NVIDIA H100" and by_uid["4"].recipe_name == "dg"
        assert by_uid["5"].validation_error == 0.5
        assert by_uid["5"].measured_at == dt.datetime(2026, 2, 2, 9, 0, 1, tzinfo=dt.UTC)
        assert d.revision() == 5
        d.add_measurement(make_measurement())
    engine = make_engine(path)
    assert _diff(engine) == []
    engine.dispose()


def _assert_readonly_refusal(path: Path) -> None:
    """Opening the old file read-only names the upgrade command and changes nothing."""
    with pytest.raises(DatabaseError) as info:
        open_database(path, readonly=True, include_shipped=False)
    msg = str(info.value)
    assert "0001" in msg and "python -m feinsum.database upgrade" in msg
    con = sqlite3.connect(path)
    assert con.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [("0001",)]
    con.close()


def test_upgrade_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from feinsum.database.__main__ import main

    path = tmp_path / "old.sqlite"
    _make_0001_database(str(path))
    assert main(["upgrade", str(path)]) == 0
    assert SCHEMA_VERSION in capsys.readouterr().out
    with open_database(path, readonly=True, include_shipped=False) as d:
        assert d.schema_version() == SCHEMA_VERSION and d.count() == 3


def test_concurrent_openers_upgrade_once(tmp_path: Path) -> None:
    """Two databases opening the same old file: one upgrades, the other sees the result."""
    import threading

    path = tmp_path / "old.sqlite"
    _make_0001_database(str(path))
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            open_database(path, include_shipped=False).close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with open_database(path, include_shipped=False) as d:
        assert d.schema_version() == SCHEMA_VERSION and d.count() == 3
