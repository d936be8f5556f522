"""Revalidation: records survive a recipe refactor that keeps their generated code, and only
records whose code really changed are retired (kept, ignored by queries). No device needed:
the records are made on a made-up device, as a tuning run records them."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from database_support import make_device

import feinsum as f
from feinsum.database import Database, NewMeasurement, einsum_identity, open_database
from feinsum.recipes import load_recipe_file
from feinsum.tuning.codecheck import CurrentRecipes, revalidate

pytest_plugins = ("database_fixtures",)

RECIPE = '''\
"""A recipe of the revalidation tests: the output index in work-groups of wg work-items,
the reduction loop optionally unrolled."""

import loopy as lp

from feinsum.recipes import ParameterSpace, PowersOfTwo, Recipe


def applies(e, device):
    return None if e.reduction == "sum" and e.nrows == 1 else "needs a one-row sum"


def space(e, device):
    return ParameterSpace(wg=PowersOfTwo(1, 64), unr=PowersOfTwo(1, 4))


def default(e, device):
    return {"wg": 8, "unr": 1}


def apply(t_unit, p, e, device):
    knl = t_unit.default_entrypoint
    knl = lp.split_iname(knl, e.out_indices[0], p["wg"], outer_tag="g.0", inner_tag="l.0")
    red = short_reductions(e)
    if p["unr"] > 1 and red:
        knl = lp.split_iname(knl, red[0], p["unr"], inner_tag="unr")
    return t_unit.with_kernel(knl)


def short_reductions(e):
    return [i for i in e.reduction_indices if isinstance(e.lengths[i], int)]


RECIPE = Recipe("tsplit", applies=applies, space=space, default=default, apply=apply)
'''
HELPER = '''

def short_reductions(e):
    return [i for i in e.reduction_indices if isinstance(e.lengths[i], int)]
'''
#: Edits of the recipe's source that leave the code it generates alone.
SAME_CODE = {
    "comment": lambda s: s.replace("    knl = t_unit.default_entrypoint\n",
                                   "    # the loop nest is the one generate_loopy made\n"
                                   "    knl = t_unit.default_entrypoint\n"),
    "local-variable": lambda s: s.replace("red = ", "reductions = ").replace(
        "and red:", "and reductions:").replace("red[0]", "reductions[0]"),
    "helper-moved": lambda s: s.replace(HELPER, "").replace(
        "\n\ndef apply(", HELPER + "\n\ndef apply("),
}
#: An edit that changes the generated code of every configuration.
OTHER_CODE = ('outer_tag="g.0", inner_tag="l.0")',
              'outer_tag="g.0", inner_tag="l.0", slabs=(0, 1))')
CONFIGS = [{"wg": 4, "unr": 1}, {"wg": 8, "unr": 2}, {"wg": 16, "unr": 1}]


def write_recipe(directory: Path, source: str) -> Any:
    directory.mkdir(exist_ok=True)
    path = directory / "tsplit.py"
    old = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(source)
    os.utime(path, ns=(old + 10**9, old + 10**9))  # a new file for the loader's cache
    return load_recipe_file(path)


def einsum_at() -> Any:
    e = f.einsum("ij,ej->ei", f.array("D", (8, 8), np.float64),
                 f.array("u", ("E", 8), np.float64))
    return e.with_lengths({"E": 2000})


def fingerprint(recipe: Any, params: dict[str, int]) -> str:
    """The fingerprint a tuning run records (it generates the same code on a device)."""
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.timing.fingerprint import code_fingerprint

    spec = f.canonicalize(einsum_at())
    return code_fingerprint(recipe.apply(generate_loopy(spec), params, spec, make_device()),
                            make_device())


def fill(db: Database, recipe: Any) -> None:
    for i, p in enumerate(CONFIGS):
        db.add_measurement(NewMeasurement(
            einsum=einsum_at(), device=make_device(), recipe_name="tsplit",
            recipe_version=recipe.version, params=p, samples=[1e-3 * (i + 1)] * 3,
            code_fingerprint=fingerprint(recipe, p)))


def versions(db: Database, **kw: Any) -> list[tuple[str, str | None]]:
    return sorted((r.recipe_version, r.measured_recipe_version)
                  for r in db.query(einsum_at(), make_device(), **kw))


@pytest.fixture
def recipes_dir(tmp_path: Path) -> Path:
    return tmp_path / "recipes"


# {{{ whole-database revalidation


@pytest.mark.parametrize("edit", sorted(SAME_CODE))
def test_a_refactor_that_keeps_the_code_keeps_the_records(edit: str, db: Database,
                                                          recipes_dir: Path) -> None:
    old = write_recipe(recipes_dir, RECIPE)
    fill(db, old)
    new = write_recipe(recipes_dir, SAME_CODE[edit](RECIPE))
    assert new.version != old.version  # the edit did change the recipe's version
    report = revalidate(db, recipe_path=recipes_dir, jobs=1)
    assert report.counts["kept"] == 3 and report.counts["retired"] == 0
    assert versions(db) == [(new.version, old.version)] * 3
    fps = {r.code_fingerprint for r in db.query(einsum_at(), make_device())}
    assert fps == {fingerprint(old, p) for p in CONFIGS}
    # a query for today's versions finds them: nothing to tune again
    answer = db.best(einsum_at(), make_device(), recipe_versions={"tsplit": new.version})
    assert answer.rung == "exact" and answer.params == CONFIGS[0]
    assert revalidate(db, recipe_path=recipes_dir, jobs=1).counts["current"] == 3


def test_changed_code_retires_records_and_keeps_them(db: Database, recipes_dir: Path,
                                                     tmp_path: Path) -> None:
    old = write_recipe(recipes_dir, RECIPE)
    fill(db, old)
    new = write_recipe(recipes_dir, RECIPE.replace(*OTHER_CODE))
    dry = revalidate(db, recipe_path=recipes_dir, jobs=1, dry_run=True)
    assert dry.counts["retired"] == 3 and versions(db) == [(old.version, old.version)] * 3
    report = revalidate(db, recipe_path=recipes_dir, jobs=1)
    assert report.counts["retired"] == 3 and report.counts["kept"] == 0
    assert "retired" in report.summary() and "the generated code changed" in report.summary()
    assert db.query(einsum_at(), make_device()) == []  # queries ignore them ...
    assert db.best(einsum_at(), make_device()).rung == "default"
    assert db.count() == 3  # ... but nothing was deleted
    retired = db.query(einsum_at(), make_device(), include_retired=True)
    assert len(retired) == 3
    for r in retired:
        assert r.retired_at is not None and r.recipe_version == old.version
        assert r.retired_reason == (f"the generated code changed (recipe tsplit "
                                    f"{old.version} -> {new.version})")
    # retired records do not count as measured: the autotuner measures them again
    assert db.measured_params(einsum_at(), make_device(), "tsplit", old.version) == set()
    # the export carries fingerprints and retirement, byte-stable through import/export
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    db.export(first)
    lines = [json.loads(x) for x in first.read_text().splitlines()]
    ms = [x for x in lines if x["type"] == "measurement"]
    assert all(m["retired_at"] and m["code_fingerprint"] and m["fingerprint_origin"] ==
               "measured" and m["measured_recipe_version"] == old.version for m in ms)
    with open_database(tmp_path / "copy.sqlite", include_shipped=False) as copy:
        assert copy.import_file(first).added == 3
        assert copy.query(einsum_at(), make_device()) == []
        copy.export(second)
    assert first.read_bytes() == second.read_bytes()
    # only an explicit prune deletes them
    assert db.prune(retired=True, dry_run=True) == 3 and db.count() == 3
    assert db.prune(retired=True) == 3 and db.count() == 0


def test_a_new_loopy_is_checked_even_at_the_same_recipe_version(
        db: Database, recipes_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import feinsum.timing.fingerprint as fpm

    recipe = write_recipe(recipes_dir, RECIPE)
    fill(db, recipe)
    monkeypatch.setattr(fpm, "loopy_version", lambda: "2099.1")
    report = revalidate(db, recipe_path=recipes_dir, jobs=1)  # same code: kept
    assert report.counts["kept"] == 3
    assert {r.code_loopy_version for r in db.query(einsum_at(), make_device())} == {"2099.1"}

    real = fpm.normalise_source
    monkeypatch.setattr(fpm, "loopy_version", lambda: "2099.2")
    monkeypatch.setattr(fpm, "normalise_source",
                        lambda code, names=(): real(code, names) + "\n// new loopy's line")
    report = revalidate(db, recipe_path=recipes_dir, jobs=1)
    assert report.counts["retired"] == 3
    (reason,) = {r.retired_reason for r in
                 db.query(einsum_at(), make_device(), include_retired=True)}
    assert reason is not None and "loopy 2099.1 -> 2099.2" in reason
    assert f"recipe tsplit {recipe.version}" in reason


def test_parallel_jobs_give_the_same_verdicts(db: Database, recipes_dir: Path) -> None:
    old = write_recipe(recipes_dir, RECIPE)
    fill(db, old)
    write_recipe(recipes_dir, SAME_CODE["comment"](RECIPE))
    assert revalidate(db, recipe_path=recipes_dir, jobs=2).counts["kept"] == 3


# }}}


# {{{ lazily, in queries


def test_best_and_query_revalidate_what_they_consider(db: Database,
                                                      recipes_dir: Path) -> None:
    old = write_recipe(recipes_dir, RECIPE)
    fill(db, old)
    new = write_recipe(recipes_dir, SAME_CODE["comment"](RECIPE))
    current = CurrentRecipes(recipe_path=recipes_dir)
    assert dict(current)["tsplit"] == new.version
    answer = db.best(einsum_at(), make_device(), recipe_versions=current)
    assert answer.rung == "exact" and answer.params == CONFIGS[0]
    assert answer.recipe_version == new.version
    # only the answer was checked (and written back: the database is writable)
    assert versions(db) == sorted([(new.version, old.version), (old.version, old.version),
                                   (old.version, old.version)])
    got = db.query(einsum_at(), make_device(), recipe_versions=current)
    assert [r.params for r in got] == CONFIGS
    assert versions(db) == [(new.version, old.version)] * 3


def test_read_only_and_shipped_records_are_revalidated_in_memory(
        tmp_path: Path, recipes_dir: Path) -> None:
    old = write_recipe(recipes_dir, RECIPE)
    path = tmp_path / "db.sqlite"
    with open_database(path, include_shipped=False) as db:
        fill(db, old)
        db.export(tmp_path / "shipped.jsonl")
    new = write_recipe(recipes_dir, SAME_CODE["local-variable"](RECIPE))
    current = CurrentRecipes(recipe_path=recipes_dir)
    with open_database(path, readonly=True, include_shipped=False) as ro:
        answer = ro.best(einsum_at(), make_device(), recipe_versions=current)
        assert answer.rung == "exact" and answer.recipe_version == new.version
        assert len(ro.query(einsum_at(), make_device(), recipe_versions=current)) == 3
    with open_database(path, readonly=True, include_shipped=False) as ro:
        assert versions(ro) == [(old.version, old.version)] * 3  # nothing written
    with open_database(":memory:", include_shipped=[tmp_path / "shipped.jsonl"]) as mem:
        answer = mem.best(einsum_at(), make_device(), recipe_versions=current)
        assert answer.record is not None and answer.record.source == "shipped"
        assert answer.recipe_version == new.version
    # changed code: the shipped records are left out of this process's answers
    write_recipe(recipes_dir, RECIPE.replace(*OTHER_CODE))
    changed = CurrentRecipes(recipe_path=recipes_dir)
    with open_database(":memory:", include_shipped=[tmp_path / "shipped.jsonl"]) as mem:
        assert mem.best(einsum_at(), make_device(), recipe_versions=changed).rung == "default"
        assert mem.query(einsum_at(), make_device(), recipe_versions=changed) == []


def test_shipped_verdicts_are_kept_for_later_processes(
        tmp_path: Path, recipes_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What lazy revalidation decided about the shipped records is kept beside their cached
    SQLite file: a later process (a new database object, the code generation cache
    emptied) answers without generating their code again, until a recipe changes."""
    from feinsum.tuning import codecheck

    monkeypatch.setenv("FEINSUM_CACHE_DIR", str(tmp_path / "cache"))
    old = write_recipe(recipes_dir, RECIPE)
    with open_database(tmp_path / "src.sqlite", include_shipped=False) as db:
        fill(db, old)
        db.export(tmp_path / "shipped.jsonl")
    new = write_recipe(recipes_dir, SAME_CODE["local-variable"](RECIPE))
    shipped = [tmp_path / "shipped.jsonl"]
    with open_database(":memory:", include_shipped=shipped) as mem:
        answer = mem.best(einsum_at(), make_device(),
                          recipe_versions=CurrentRecipes(recipe_path=recipes_dir))
        assert answer.record is not None and answer.record.source == "shipped"
        assert answer.recipe_version == new.version
        assert len(mem.query(einsum_at(), make_device(),
                             recipe_versions=CurrentRecipes(recipe_path=recipes_dir))) == 3
    assert list((tmp_path / "cache").glob("shipped-*.verdicts.json"))

    codecheck._CACHE.clear()
    generated: list[int] = []
    real = codecheck.CurrentRecipes.fingerprints

    def counting(self: Any, items: Any) -> Any:
        generated.append(len(items))
        return real(self, items)

    monkeypatch.setattr(codecheck.CurrentRecipes, "fingerprints", counting)
    with open_database(":memory:", include_shipped=shipped) as mem:
        answer = mem.best(einsum_at(), make_device(),
                          recipe_versions=CurrentRecipes(recipe_path=recipes_dir))
        assert answer.record is not None and answer.recipe_version == new.version
        assert len(mem.query(einsum_at(), make_device(),
                             recipe_versions=CurrentRecipes(recipe_path=recipes_dir))) == 3
    assert generated == []
    # changed code: a new recipe version, decided again (and left out)
    write_recipe(recipes_dir, RECIPE.replace(*OTHER_CODE))
    with open_database(":memory:", include_shipped=shipped) as mem:
        changed = CurrentRecipes(recipe_path=recipes_dir)
        assert mem.best(einsum_at(), make_device(), recipe_versions=changed).rung == "default"
    assert generated


def test_lazily_retired_records_are_written_back(db: Database, recipes_dir: Path) -> None:
    old = write_recipe(recipes_dir, RECIPE)
    fill(db, old)
    write_recipe(recipes_dir, RECIPE.replace(*OTHER_CODE))
    current = CurrentRecipes(recipe_path=recipes_dir)
    assert db.best(einsum_at(), make_device(), recipe_versions=current).rung == "default"
    retired = db.query(einsum_at(), make_device(), include_retired=True)
    assert len(retired) == 3 and all(r.retired_at is not None for r in retired)


# }}}


# {{{ a database of the previous schema revision


def _rows_0003(recipe: Any) -> dict[str, list[dict[str, Any]]]:
    """Rows of a database tuned before fingerprints: three records of the current recipe
    version, one of an older version, one compile error."""
    dev = make_device()
    ident = einsum_identity(einsum_at())
    t0 = dt.datetime(2026, 11, 1)
    configs = [json.dumps(p, sort_keys=True, separators=(",", ":"))
               for p in [*CONFIGS, {"wg": 32, "unr": 1}]]

    def m(i: int, rid: int, cid: int, status: str = "ok") -> dict[str, Any]:
        t = None if status != "ok" else 1e-3 * i
        return {"id": i, "uid": f"old{i}", "einsum_id": 1, "device_id": 1, "recipe_id": rid,
                "configuration_id": cid, "lengths_key": '{"n0":2000}', "status": status,
                "sample_count": 0 if t is None else 1,
                "samples_json": "[]" if t is None else f"[{t}]", "min_time": t,
                "median_time": t, "loopy_version": "2025.2", "measured_at": t0}

    return {
        "devices": [{"id": 1, "key": dev.key, "platform_name": dev.platform_name,
                     "platform_version": dev.platform_version, "vendor": dev.vendor,
                     "name": dev.name, "driver_version": dev.driver_version,
                     "opencl_version": dev.opencl_version, "device_type": dev.device_type,
                     "compute_units": dev.compute_units,
                     "max_work_group_size": dev.max_work_group_size,
                     "local_mem_size": dev.local_mem_size,
                     "global_mem_size": dev.global_mem_size, "has_fp64": dev.has_fp64,
                     "info_json": json.dumps(dev.as_dict()), "created_at": t0}],
        "einsums": [{"id": 1, "canonical_key": ident.canonical_key,
                     "structure_key": ident.structure_key,
                     "canonical_text": ident.canonical_text, "spec_json": ident.spec_json,
                     "created_at": t0}],
        "recipes": [{"id": 1, "name": "tsplit", "version": recipe.version, "created_at": t0},
                    {"id": 2, "name": "tsplit", "version": "0ld0ld0ld0ld0ld0",
                     "created_at": t0}],
        "configurations": [{"id": i + 1, "params_hash": hashlib.sha256(c.encode()).hexdigest(),
                            "params_json": c} for i, c in enumerate(configs)],
        "measurements": [m(1, 1, 1), m(2, 1, 2), m(3, 1, 3), m(4, 2, 4),
                         m(5, 1, 4, "compile-error")],
        "feinsum_state": [{"id": 1, "application": "feinsum", "revision": 5,
                           "created_at": t0}],
    }


def test_a_database_of_revision_0003_upgrades_and_revalidates(db_url: str,
                                                              recipes_dir: Path) -> None:
    from feinsum.database.engine import make_engine, run_migrations, write_connection

    recipe = write_recipe(recipes_dir, RECIPE)
    engine = make_engine(db_url)
    with write_connection(engine) as conn:
        run_migrations(conn, "0003")
        meta = sa.MetaData()
        meta.reflect(conn)
        assert "code_fingerprint" not in meta.tables["measurements"].c
        for table, rows in _rows_0003(recipe).items():
            for row in rows:
                conn.execute(meta.tables[table].insert().values(**row))
            if engine.dialect.name == "postgresql":  # explicit ids: move the sequences on
                conn.execute(sa.text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                     f"(SELECT max(id) FROM {table}))"))
    engine.dispose()
    with open_database(db_url, include_shipped=False) as db:  # upgraded here
        assert db.count() == 5
        assert {r.code_fingerprint for r in db.query(None, None, status=None)} == {None}
        assert {r.uid: r.measured_recipe_version for r in db.query(None, None, status=None)
                } == {"old1": recipe.version, "old2": recipe.version,
                      "old3": recipe.version, "old4": "0ld0ld0ld0ld0ld0",
                      "old5": recipe.version}
        report = revalidate(db, recipe_path=recipes_dir, jobs=1)
        assert report.counts == {"current": 1, "kept": 0, "fingerprinted": 3, "retired": 0,
                                 "unverifiable": 1, "skipped": 0}
        by_uid = {r.uid: r for r in db.query(None, None, status=None)}
        for uid, p in zip(("old1", "old2", "old3"), CONFIGS, strict=True):
            assert by_uid[uid].code_fingerprint == fingerprint(recipe, p)
            assert by_uid[uid].fingerprint_origin == "revalidated"
        assert by_uid["old4"].code_fingerprint is None  # older version: nothing to compare
        adopted = revalidate(db, recipe_path=recipes_dir, jobs=1, adopt=True)
        assert adopted.counts["fingerprinted"] == 1
        old4 = next(r for r in db.query(None, None, status=None) if r.uid == "old4")
        assert old4.fingerprint_origin == "adopted" and old4.recipe_version == recipe.version
        # then a refactor: every record whose code is unchanged is kept
        new = write_recipe(recipes_dir, SAME_CODE["helper-moved"](RECIPE))
        report = revalidate(db, recipe_path=recipes_dir, jobs=1)
        assert report.counts["kept"] == 4 and report.counts["retired"] == 0
        assert len(db.query(einsum_at(), make_device(),
                            recipe_versions={"tsplit": new.version})) == 4


# }}}


# {{{ the command line


def test_feinsum_db_revalidate(tmp_path: Path, recipes_dir: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from feinsum.cli.main import main

    old = write_recipe(recipes_dir, RECIPE)
    path, export = tmp_path / "db.sqlite", tmp_path / "records.jsonl"
    with open_database(path, include_shipped=False) as db:
        fill(db, old)
        db.export(export)
    before = export.read_bytes()
    args = ["db", "revalidate", "--recipe-path", str(recipes_dir), "--jobs", "1"]
    assert main([*args, str(export), "--all", "--json"]) == 0
    (target,) = json.loads(capsys.readouterr().out)["targets"]
    assert target["counts"]["current"] == 3
    assert export.read_bytes() == before  # nothing changed: the same bytes
    new = write_recipe(recipes_dir, SAME_CODE["comment"](RECIPE))
    assert main([*args, "--db", str(path), "--dry-run"]) == 0
    assert "3 would be kept under the current recipe version" in capsys.readouterr().out
    assert main([*args, "--db", str(path), str(export)]) == 0
    out = capsys.readouterr().out
    assert out.count("3 kept under the current recipe version") == 2
    with open_database(path, include_shipped=False) as db:
        assert versions(db) == [(new.version, old.version)] * 3
    kept = [json.loads(x) for x in export.read_text().splitlines()]
    assert {m["recipe_version"] for m in kept if m["type"] == "measurement"} == {new.version}
    assert main([*args, str(tmp_path / "missing.sqlite")]) == 1
    assert "no database or export" in capsys.readouterr().err


# }}}

# vim: foldmethod=marker
