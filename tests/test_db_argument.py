"""One way to name a database everywhere: every public ``db=`` takes a Database, a path, an
SQLAlchemy URL or None (the default), through one resolver; and the hook, the direct path and
the autotuner revalidate the records they use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from database_support import make_device

import feinsum as f
from feinsum.database import Database, NewMeasurement, open_database, resolve_database
from feinsum.errors import DatabaseError

TEST_RECIPES = Path(__file__).parent / "recipes_for_tests"


def local_operator() -> Any:
    return f.einsum("ij,ej->ei", f.array("D", (8, 8), np.float64),
                    f.array("u", ("E", 8), np.float64))


def spellings(path: Path) -> list[Any]:
    """The same SQLite file named five ways."""
    return [str(path), path, f"sqlite:///{path}",
            sa.engine.URL.create("sqlite", database=str(path)),
            open_database(path, include_shipped=False)]


def test_one_resolver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "named.sqlite"
    opened = [resolve_database(db) for db in spellings(path)]
    assert all(d.path == path for d in opened)
    assert opened[0] is opened[1] is opened[2] is opened[3]  # opened once per process
    monkeypatch.setenv("FEINSUM_DB", str(tmp_path / "default.sqlite"))
    assert resolve_database(None).path == tmp_path / "default.sqlite"
    for bad in (3, True, {"url": "x"}, ["a.sqlite"], b"a.sqlite"):
        with pytest.raises(DatabaseError, match="a path, an SQLAlchemy URL, or None"):
            resolve_database(bad)


def _one_record(path: Path) -> Any:
    from feinsum.recipes import get_recipe

    e = local_operator().with_lengths({"E": 1000})
    generic = get_recipe("generic")
    dev = make_device()
    params = generic.default(f.canonicalize(e), dev)
    with open_database(path, include_shipped=False) as db:
        db.add_measurement(NewMeasurement(einsum=e, device=dev, recipe_name="generic",
                                          recipe_version=generic.version, params=params,
                                          samples=[1e-4] * 3))
    return e, dev, params


def test_query_best_and_revalidate_take_every_spelling(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite"
    e, dev, params = _one_record(path)
    for db in spellings(path):
        assert [r.params for r in f.query(e, dev, db=db)] == [params]
        assert f.best(e, dev, db=db).params == params
        assert f.revalidate(db, jobs=1).counts["fingerprinted"] in (0, 1)
    with pytest.raises(DatabaseError, match="a path, an SQLAlchemy URL"):
        f.query(e, dev, db=42)


def test_the_hook_and_its_mixin_take_a_path(tmp_path: Path) -> None:
    from feinsum.hook import FeinsumTransformMixin, transform_program

    path = tmp_path / "hook.sqlite"
    e, dev, params = _one_record(path)
    t_unit = e.with_lengths({"E": 1000})
    from feinsum.lowering.kernel import generate_loopy

    program = generate_loopy(t_unit)
    for db in (str(path), f"sqlite:///{path}"):
        _, rep = transform_program(program, device=dev, db=db, cache=False)
        assert rep.groups[0].rung == "exact" and dict(rep.groups[0].params or {}) == params

    class Compiler(FeinsumTransformMixin):
        pass

    c = Compiler(feinsum_device=dev, feinsum_db=path)
    c.transform_loopy_program(program)
    assert c.feinsum_last_report is not None
    assert c.feinsum_last_report.groups[0].rung == "exact"


def test_compile_takes_a_path(cl_device: Any, tmp_path: Path) -> None:
    path = tmp_path / "direct.sqlite"
    compiled = f.compile(local_operator(), device=cl_device, db=str(path))
    assert compiled.choice({"E": 1000}).rung == "default"
    assert resolve_database(str(path)).path == path


def test_autotune_takes_a_path_and_records_what_revalidation_recomputes(
        cl_device: Any, tmp_path: Path) -> None:
    """The issue's failure (``autotune(db="path")`` raised AttributeError), and the
    fingerprints a tuning run records are those a device-free revalidation computes."""
    path = tmp_path / "tuned.sqlite"
    r = f.autotune(local_operator(), lengths={"E": 1000}, device=cl_device, db=str(path),
                   recipes=["split"], strategy="exhaustive", budget=2, peers=False,
                   progress=False, recipe_path=TEST_RECIPES, min_time=0.01, min_samples=3)
    assert r.best is not None
    with open_database(path, include_shipped=False) as db:
        records = db.query(None, None, status=None)
        assert len(records) == 3  # two configurations and the untransformed kernel
        assert all(rec.code_fingerprint and rec.fingerprint_origin == "measured"
                   for rec in records)
    report = f.revalidate(path, recipe_path=TEST_RECIPES, everything=True, jobs=1)
    assert report.counts["current"] == 3 and report.counts["retired"] == 0


def test_the_hook_revalidates_a_record_of_an_older_version(tmp_path: Path) -> None:
    """A record timed with an older recipe version replays when its code is unchanged
    (and moves to the current version); with changed code it is retired."""
    from feinsum.hook import transform_program
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.recipes import get_recipe
    from feinsum.timing.fingerprint import code_fingerprint

    e = local_operator().with_lengths({"E": 1000})
    spec, dev = f.canonicalize(e), make_device()
    generic = get_recipe("generic")
    params = dict(generic.default(spec, dev))
    same = code_fingerprint(generic.apply(generate_loopy(spec), params, spec, dev), dev)
    program = generate_loopy(e)
    for fingerprint, rung in ((same, "exact"), ("c1-" + "0" * 40, "default")):
        path = tmp_path / f"{rung}.sqlite"
        with open_database(path, include_shipped=False) as db:
            db.add_measurement(NewMeasurement(
                einsum=e, device=dev, recipe_name="generic", recipe_version="0ld0ld0ld0ld0ld0",
                params=params, samples=[1e-4] * 3, code_fingerprint=fingerprint))
        _, rep = transform_program(program, device=dev, db=path, cache=False)
        assert rep.groups[0].rung == rung
        with open_database(path, include_shipped=False) as db:
            (r,) = db.query(e, dev, include_retired=True)
            if rung == "exact":
                assert r.recipe_version == generic.version and r.retired_at is None
            else:
                assert r.retired_at is not None and "generated code changed" in str(
                    r.retired_reason)


def test_database_objects_pass_through(tmp_path: Path) -> None:
    db = Database(tmp_path / "x.sqlite", include_shipped=False)
    assert resolve_database(db) is db
    db.close()
