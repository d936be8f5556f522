"""Ranking by minimum time (schema revision 0003): best/query order, ties, the rank index,
the upgrade of a revision-0002 file, and agreement with the autotuner and the CLI."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from database_support import make_device, make_identity, make_measurement

from feinsum.database import KNOWN_VERSIONS, SCHEMA_VERSION, open_database
from feinsum.database.engine import make_engine, run_migrations, write_connection
from feinsum.database.models import VERSION_TABLE
from feinsum.errors import DatabaseError

pytest_plugins = ("database_fixtures",)

# min and median disagree: A is faster by its minimum, B by its median
A_SAMPLES = [1e-3, 5e-3, 5e-3]
B_SAMPLES = [2e-3, 2e-3, 2e-3]


def _params(records: list[Any]) -> list[Any]:
    return [r.params["p"] for r in records]


def test_min_decides_where_median_disagrees(db: Any) -> None:
    ident, dev = make_identity(), make_device()
    db.add_measurement(make_measurement(ident, dev, params={"p": "B"}, samples=B_SAMPLES))
    db.add_measurement(make_measurement(ident, dev, params={"p": "A"}, samples=A_SAMPLES))
    db.add_measurement(make_measurement(ident, dev, params={"p": "X"}, status="timeout",
                                        samples=[]))
    assert _params(db.query(ident, dev)) == ["A", "B"]
    assert _params(db.query(ident, dev, status=None)) == ["A", "B", "X"]  # untimed last
    assert _params(db.query(ident, dev, recipe="generic")) == ["A", "B"]  # filtered path
    assert _params(db.query(ident, dev, limit=1)) == ["A"]
    answer = db.best(ident, dev)
    assert answer.rung == "exact" and answer.params == {"p": "A"}
    assert answer.record.min_time == 1e-3 and answer.record.seconds == 1e-3
    assert db.best(ident, dev, recipe="generic").params == {"p": "A"}
    # gflops is the rate at the minimum time, as the tuner reports it
    assert answer.record.gflops == pytest.approx(2e9 / 1e-3 * 1e-9)


def test_min_decides_between_groups_on_the_fallback_rungs(db: Any) -> None:
    """nearest-lengths and same-vendor compare groups by their fastest minimum time."""
    dev = make_device()
    a = make_identity("a", lengths={"n0": 1000})
    for name, samples in (("mate1", B_SAMPLES), ("mate2", A_SAMPLES)):
        mate = make_identity(name, lengths={"n0": 1000})
        db.add_measurement(make_measurement(mate, dev, params={"p": name}, samples=samples))
    answer = db.best(a, dev)
    assert answer.rung == "nearest-lengths" and answer.params == {"p": "mate2"}
    other = make_device(name="another CPU")
    answer = db.best(a, other)
    assert answer.rung == "same-vendor" and answer.params == {"p": "mate2"}


def test_ties_go_to_the_median_then_insertion_order(db: Any) -> None:
    ident, dev = make_identity(), make_device()
    for p, samples in (("late-median", [1e-3, 3e-3, 3e-3]), ("first", [1e-3, 2e-3, 2e-3]),
                       ("second", [1e-3, 2e-3, 2e-3])):
        db.add_measurement(make_measurement(ident, dev, params={"p": p}, samples=samples))
    assert _params(db.query(ident, dev)) == ["first", "second", "late-median"]
    assert db.best(ident, dev).params == {"p": "first"}
    # two groups (lengths) with the same minimum: the records' medians decide
    db.add_measurement(make_measurement(ident, dev, params={"p": "other-lengths"},
                                        lengths={"n0": 9}, samples=[1e-3, 1.5e-3, 2e-3]))
    answer = db.best(ident, dev, lengths={})
    assert answer.rung == "exact" and answer.params == {"p": "other-lengths"}


def test_a_median_alone_ranks_as_the_minimum(db: Any) -> None:
    ident, dev = make_identity(), make_device()
    db.add_measurement(make_measurement(ident, dev, params={"p": "median"}, samples=[],
                                        median_time=1.5e-3))
    db.add_measurement(make_measurement(ident, dev, params={"p": "A"}, samples=A_SAMPLES))
    (first, second) = db.query(ident, dev)
    assert _params([first, second]) == ["A", "median"]
    assert second.min_time == second.median_time == 1.5e-3
    with pytest.raises(DatabaseError, match="exceeds median_time"):
        db.add_measurement(make_measurement(ident, dev, samples=[], min_time=2e-3,
                                            median_time=1e-3))


def test_shipped_and_user_records_rank_together(tmp_path: Path) -> None:
    ident, dev = make_identity(), make_device()
    ship = tmp_path / "ship.sqlite"
    with open_database(ship, include_shipped=False) as d:
        d.add_measurement(make_measurement(ident, dev, params={"p": "A"}, samples=A_SAMPLES))
        d.export(tmp_path / "shipped.jsonl")
    with open_database(tmp_path / "user.sqlite", include_shipped=[tmp_path / "shipped.jsonl"]
                       ) as d:
        d.add_measurement(make_measurement(ident, dev, params={"p": "B"}, samples=B_SAMPLES))
        assert [(r.source, r.params["p"]) for r in d.query(ident, dev)] == [
            ("shipped", "A"), ("user", "B")]
        assert d.best(ident, dev).params == {"p": "A"}


# {{{ the revision 0002 file


def _make_0002_database(url: str) -> None:
    """A database at revision 0002 (median-ranked), filled through its own tables: a record
    timed by a median alone, GFLOP/s derived from medians, one given explicitly."""
    engine = make_engine(url)
    dev, ident = make_device(), make_identity()
    t0 = dt.datetime(2026, 3, 1)
    with write_connection(engine) as conn:
        run_migrations(conn, "0002")
        meta = sa.MetaData()
        meta.reflect(conn)
        if engine.dialect.name == "postgresql":
            t0 = t0.replace(tzinfo=dt.UTC)
        rows: dict[str, list[dict[str, Any]]] = {
            "feinsum_state": [{"id": 1, "application": "feinsum", "revision": 4,
                               "created_at": t0}],
            "devices": [{
                "id": 1, "key": dev.key, "platform_name": dev.platform_name,
                "platform_version": dev.platform_version, "vendor": dev.vendor,
                "name": dev.name, "driver_version": dev.driver_version,
                "opencl_version": dev.opencl_version, "device_type": dev.device_type,
                "compute_units": 2, "max_work_group_size": 4096, "local_mem_size": 1 << 20,
                "global_mem_size": 1 << 34, "has_fp64": True,
                "info_json": json.dumps(dev.as_dict()), "created_at": t0}],
            "einsums": [{"id": 1, "canonical_key": ident.canonical_key,
                         "structure_key": ident.structure_key,
                         "canonical_text": ident.canonical_text,
                         "spec_json": ident.spec_json, "created_at": t0}],
            "recipes": [{"id": 1, "name": "generic", "version": "v1", "created_at": t0}],
            "configurations": [
                {"id": i, "params_hash": hashlib.sha256(c.encode()).hexdigest(),
                 "params_json": c}
                for i, c in enumerate(['{"p":"A"}', '{"p":"B"}', '{"p":"M"}', '{"p":"G"}'], 1)],
            "measurements": [
                _old_row(1, 1, A_SAMPLES, 2e9 / 5e-3 * 1e-9, t0),  # median-derived gflops
                _old_row(2, 2, B_SAMPLES, 2e9 / 2e-3 * 1e-9, t0),
                {**_old_row(3, 3, [], None, t0), "median_time": 4e-3, "min_time": None},
                _old_row(4, 4, [3e-3, 6e-3, 6e-3], 123.0, t0),  # explicit gflops: kept
            ],
        }
        for table, values in rows.items():
            for row in values:
                conn.execute(meta.tables[table].insert().values(**row))
            if engine.dialect.name == "postgresql":
                conn.execute(sa.text(
                    f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                    f"(SELECT max(id) FROM {table}))"))
    engine.dispose()


def _old_row(i: int, config: int, samples: list[float], gflops: float | None,
             t0: dt.datetime) -> dict[str, Any]:
    ordered = sorted(samples)
    return {
        "id": i, "uid": f"old{i}", "einsum_id": 1, "device_id": 1, "recipe_id": 1,
        "configuration_id": config, "lengths_key": '{"n0":50000}', "status": "ok",
        "sample_count": len(samples), "samples_json": json.dumps(samples),
        "min_time": ordered[0] if samples else None,
        "median_time": ordered[len(ordered) // 2] if samples else None,
        "spread": None, "flops": 2e9, "bytes": 1e8, "gflops": gflops,
        "validation_error": None, "message": None, "tiles_kept_fraction": None,
        "host": "old", "loopy_version": None, "pyopencl_version": None,
        "feinsum_version": None, "started_at": None, "measured_at": t0,
    }


def _indexes(url: str) -> dict[str, list[Any]]:
    engine = make_engine(url)
    try:
        return {ix["name"]: list(ix["column_names"])
                for ix in sa.inspect(engine).get_indexes("measurements")}
    finally:
        engine.dispose()


def test_revision_0002_file_upgrades_on_open_and_gets_the_rank_index(db_url: str) -> None:
    _make_0002_database(db_url)
    assert "ix_measurements_lookup" in _indexes(db_url)
    if not db_url.startswith("postgresql"):
        with pytest.raises(DatabaseError, match=r"0002.*python -m feinsum\.database upgrade"):
            open_database(db_url, readonly=True, include_shipped=False)
    with open_database(db_url, include_shipped=False) as d:
        assert d.schema_version() == SCHEMA_VERSION and "0003" in KNOWN_VERSIONS
        ident, dev = make_identity(), make_device()
        got = {r.params["p"]: r for r in d.query(ident, dev)}
        assert [r.params["p"] for r in d.query(ident, dev)] == ["A", "B", "G", "M"]
        assert d.best(ident, dev).params == {"p": "A"}
        assert got["M"].min_time == got["M"].median_time == 4e-3  # a median alone
        assert got["A"].gflops == pytest.approx(2e9 / 1e-3 * 1e-9)  # re-derived at the min
        assert got["B"].gflops == pytest.approx(2e9 / 2e-3 * 1e-9)
        assert got["G"].gflops == 123.0  # not derived from the median: left alone
        assert got["A"].samples == tuple(A_SAMPLES) and got["A"].host == "old"
        assert d.count() == 4 and d.revision() == 4
    indexes = _indexes(db_url)
    assert indexes["ix_measurements_rank"] == [
        "einsum_id", "device_id", "status", "retired_at", "lengths_key", "min_time",
        "median_time"]
    assert "ix_measurements_lookup" not in indexes


def test_rank_index_serves_best_on_sqlite(tmp_path: Path) -> None:
    """SQLite's plan for the fastest record of a group walks the rank index (no sort)."""
    from sqlalchemy.dialects import sqlite

    from feinsum.database.statements import FASTEST, GROUPS

    path = tmp_path / "plan.sqlite"
    open_database(path, include_shipped=False).close()
    stmt = FASTEST.params(eid=1, did=1, status="ok", lk="{}")
    sql = str(stmt.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
    engine = make_engine(path)
    with engine.connect() as conn:
        plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
        groups = GROUPS.params(eids=[1, 2], dids=[1], status="ok")
        sql = str(groups.compile(dialect=sqlite.dialect(), compile_kwargs={
            "literal_binds": True, "render_postcompile": True}))
        group_plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + sql))
    engine.dispose()
    assert "ix_measurements_rank" in plan and "TEMP B-TREE" not in plan, plan
    # best()'s grouping query never reads the table (retired records skipped in the index)
    assert "COVERING INDEX ix_measurements_rank" in group_plan, group_plan


def test_downgrade_restores_the_lookup_index(tmp_path: Path) -> None:
    from alembic import command

    from feinsum.database.engine import _alembic_config

    url = str(tmp_path / "down.sqlite")
    with open_database(url, include_shipped=False) as d:
        d.add_measurement(make_measurement(samples=A_SAMPLES))
    engine = make_engine(url)
    with write_connection(engine) as conn:
        command.downgrade(_alembic_config(conn), "0002")
        version = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
        gflops = conn.execute(sa.text("SELECT gflops FROM measurements")).scalar()
    engine.dispose()
    assert version == "0002"
    assert gflops == pytest.approx(2e9 / 5e-3 * 1e-9)  # back to the median's rate
    indexes = _indexes(url)
    assert "ix_measurements_lookup" in indexes and "ix_measurements_rank" not in indexes


# }}}


# {{{ the autotuner and `feinsum best` agree


def test_tuner_and_feinsum_best_agree(tmp_path: Path, cl_device: Any,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Records whose min and median disagree: ``autotune`` (resuming from them, measuring
    nothing new) and ``feinsum best`` name the same configuration, the min winner."""
    import numpy as np

    import feinsum as f
    from feinsum.cli import main
    from feinsum.database import NewMeasurement
    from feinsum.devices.opencl import device_info
    from feinsum.recipes import get_recipe
    from feinsum.timing.roofline import Roofline
    from feinsum.tuning import autotune

    recipes = Path(__file__).parent / "recipes_for_tests"
    e = f.einsum("ij,ej->ei", f.array("D", (35, 35), np.float64),
                 f.array("u", ("E", 35), np.float64))
    at = e.with_lengths({"E": 2000})
    info = device_info(cl_device)
    split = get_recipe("split", recipes)
    path = tmp_path / "agree.sqlite"
    with open_database(path, include_shipped=False) as d:
        d.set_roofline(info, Roofline(info.key, 2e10, 2e10, {"float64": 5e10}).as_dict())
        for wg, samples in ((8, B_SAMPLES), (16, A_SAMPLES)):
            d.add_measurement(NewMeasurement(
                einsum=at, device=info, recipe_name="split", recipe_version=split.version,
                params={"wg": wg, "unr": 1}, samples=samples, flops=2.0 * 35 * 35 * 2000))
        result = autotune(e, lengths={"E": 2000}, db=d, recipes=["split"], budget=2,
                          peers=False, baseline=False, progress=False, recipe_path=recipes)
    assert result.measurements == [] and result.previous == 2
    assert result.best is not None and result.best.params == {"wg": 16, "unr": 1}
    printed = str(result)  # the table `feinsum tune` prints
    assert "wg=16" in printed and "wg=8" not in printed and "1.000" in printed
    capsys.readouterr()
    assert main(["best", "ij,ej->ei", "-s", "i=35,j=35,e=E", "-l", "E=2000", "--device",
                 info.name, "--db", str(path), "--json", "--recipe-path", str(recipes)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rung"] == "exact" and out["record"]["params"] == result.best.params
    assert out["record"]["min_time"] == result.best.seconds == 1e-3
    assert out["record"]["gflops"] == pytest.approx(result.best.gflops)
    assert main(["query", "ij,ej->ei", "-s", "i=35,j=35,e=E", "--db", str(path),
                 "--json"]) == 0
    assert [r["params"]["wg"] for r in json.loads(capsys.readouterr().out)] == [16, 8]
    assert main(["best", "ij,ej->ei", "-s", "i=35,j=35,e=E", "-l", "E=2000", "--device",
                 info.name, "--db", str(path), "--any-version"]) == 0
    text = capsys.readouterr().out
    assert "wg=16" in text and "1 ms min (median 5 ms)" in text


# }}}


def test_no_inserted_id_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """A driver that reports no new primary key: a DatabaseError, and nothing stored."""
    from sqlalchemy.engine import CursorResult

    with open_database(tmp_path / "pk.sqlite", include_shipped=False) as d:
        monkeypatch.setattr(CursorResult, "inserted_primary_key", property(lambda self: None))
        with pytest.raises(DatabaseError, match="returned no id for the new measurement"):
            d.add_measurement(make_measurement())
        monkeypatch.undo()
        assert d.count() == 0
        assert isinstance(d.add_measurement(make_measurement()), int)
