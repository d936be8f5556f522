"""The hook's persistent cache of transformed programs (feinsum.hook.store): damaged entries,
what invalidates an entry, the size bound, ``feinsum cache`` (many processes at once:
tests/test_transform_lock.py)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def mass_kernel(n: int = 35) -> Any:
    import loopy as lp

    return lp.make_kernel(
        f"{{[e, i, j]: 0 <= e < nelements and 0 <= i, j < {n}}}",
        "mass[e, i] = sum(j, massm[i, j] * u[e, j])  {id=mass}",
        [lp.GlobalArg("massm,u,mass", np.float64, shape=lp.auto),
         lp.ValueArg("nelements", np.int32)],
        name="mass", lang_version=(2018, 2))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A persistent cache of the test's own, and this process's cache empty."""
    from feinsum.hook import clear_cache

    directory = tmp_path / "programs"
    monkeypatch.setenv("FEINSUM_CACHE", str(directory))
    clear_cache()
    yield directory
    clear_cache()


def a_new_process() -> None:
    """What a new process starts with: nothing of the hook's in memory."""
    from feinsum.hook import clear_cache

    clear_cache()


def twice_in_new_processes(device: Any) -> tuple[list[str], Any]:
    """The mass kernel through the hook in two new processes: the cache's warnings, the
    second report."""
    from feinsum.hook import transform_program
    from feinsum.hook.store import CacheWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            a_new_process()
            _, rep = transform_program(mass_kernel(), device=device, db=False)
    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)], rep


def entries(directory: Path) -> int:
    from feinsum.hook.store import ProgramCache

    return len(ProgramCache(directory))


# {{{ hits, and what each key part means


def test_second_process_gets_the_program_from_disk(store: Path, cl_device: Any,
                                                   cl_queue: Any) -> None:
    from feinsum.hook import transform_program

    t = mass_kernel()
    first, rep1 = transform_program(t, device=cl_device, db=False)
    assert not rep1.cached and rep1.cache is None and rep1.transformed == 1
    assert entries(store) == 1
    again, rep2 = transform_program(mass_kernel(), device=cl_device, db=False)
    assert rep2.cached and rep2.cache == "memory" and again is first
    a_new_process()
    loaded, rep3 = transform_program(mass_kernel(), device=cl_device, db=False)
    assert rep3.cached and rep3.cache == "disk"
    assert rep3.groups == rep1.groups and rep3.transformed == 1
    assert rep3.timings["matching"] == rep3.timings["checks"] == 0.0
    import loopy as lp

    assert (lp.generate_code_v2(loaded).device_code()
            == lp.generate_code_v2(first).device_code())
    # another option is another entry
    _, rep4 = transform_program(mass_kernel(), device=cl_device, db=False, on_miss="skip")
    assert not rep4.cached and entries(store) == 2
    # cache=False reads and writes nothing
    _, rep5 = transform_program(mass_kernel(30), device=cl_device, db=False, cache=False)
    assert not rep5.cached and entries(store) == 2


def test_a_process_with_other_free_memory_gets_the_program_from_disk(
        store: Path, cl_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """PoCL's CPU device derives its global memory from the machine's memory at start:
    a new process sees another value, and must still find the program."""
    from dataclasses import replace

    import feinsum.devices.opencl as fo
    from feinsum.hook import transform_program

    _, rep1 = transform_program(mass_kernel(), device=cl_device, db=False)
    assert not rep1.cached
    real = fo.device_info
    for size in (2**30, 3 * 2**33):
        monkeypatch.setattr(fo, "device_info",
                            lambda dev, size=size: replace(real(dev), global_mem_size=size))
        a_new_process()
        _, rep = transform_program(mass_kernel(), device=cl_device, db=False)
        assert rep.cached and rep.cache == "disk", rep.note
    assert entries(store) == 1


def test_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cl_device: Any) -> None:
    from feinsum.hook import clear_cache, transform_program
    from feinsum.hook.store import cache_directory

    monkeypatch.setenv("FEINSUM_CACHE", "none")
    assert cache_directory() is None
    clear_cache()
    _, rep = transform_program(mass_kernel(), device=cl_device, db=False)
    assert rep.transformed == 1
    a_new_process()
    _, rep = transform_program(mass_kernel(), device=cl_device, db=False)
    assert not rep.cached
    monkeypatch.delenv("FEINSUM_CACHE")
    import platformdirs

    assert cache_directory() == Path(platformdirs.user_cache_dir("feinsum")) / "programs"


def test_a_new_recipe_version_transforms_again(store: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               cl_device: Any) -> None:
    """A recipe file edited (its version changes) invalidates what the hook cached."""
    from feinsum.hook import transform_program

    recipes = tmp_path / "recipes"
    recipes.mkdir()
    mine = recipes / "split.py"
    source = (Path(__file__).parent / "recipes_for_tests" / "split.py").read_text()
    mine.write_text(source)
    monkeypatch.setenv("FEINSUM_RECIPE_PATH", str(recipes))
    transform_program(mass_kernel(), device=cl_device, db=False)
    a_new_process()
    assert transform_program(mass_kernel(), device=cl_device, db=False)[1].cached
    mine.write_text(source + "\n# edited: a new version\n")
    a_new_process()
    assert not transform_program(mass_kernel(), device=cl_device, db=False)[1].cached


# }}}


# {{{ the database decides


def _record(db: Any, info: Any, e: Any, params: dict[str, Any]) -> None:
    from feinsum.database import NewMeasurement
    from feinsum.recipes import get_recipe

    db.add_measurement(NewMeasurement(einsum=e, device=info, recipe_name="generic",
                                      recipe_version=get_recipe("generic").version,
                                      params=params, samples=[1e-4] * 3, flops=1e6))


def test_a_new_record_that_changes_the_choice_transforms_again(
        store: Path, tmp_path: Path, cl_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record for the program's einsum makes the next process transform again; a record
    for another einsum changes the database but no choice: the entry stays good."""
    import feinsum
    from feinsum.database import open_database
    from feinsum.devices.opencl import device_info
    from feinsum.hook import transform_program
    from feinsum.recipes import get_recipe

    monkeypatch.setenv("FEINSUM_SHIPPED", "none")
    path = tmp_path / "db.sqlite"
    info = device_info(cl_device)
    open_database(path, include_shipped=False).close()
    opts = {"device": cl_device, "db": str(path), "lengths": {"nelements": 300},
            "prefer": ["generic"]}
    _, rep = transform_program(mass_kernel(), **opts)
    assert [g.rung for g in rep.groups] == ["default"]

    # another einsum measured: the database changed, this program's choice did not
    with open_database(path, include_shipped=False) as db:
        other = feinsum.einsum("ik,kj->ij", feinsum.array("A", (40, 40)),
                               feinsum.array("B", (40, 300)))
        _record(db, info, other, dict(get_recipe("generic").default(
            feinsum.canonicalize(other), info)))
    a_new_process()
    _, rep = transform_program(mass_kernel(), **opts)
    assert rep.cached and rep.cache == "disk"
    a_new_process()  # refreshed: the next process needs no database look-up
    assert transform_program(mass_kernel(), **opts)[1].cache == "disk"

    # a record for this einsum: the choice changes, the next process transforms again
    (m,) = feinsum.find_einsums(mass_kernel())
    generic = get_recipe("generic")
    params = dict(generic.default(m.canonical, info))
    params["lx"] = 8 if params["lx"] != 8 else 16
    params = dict(generic.check(params, m.canonical, info))
    with open_database(path, include_shipped=False) as db:
        _record(db, info, m.einsum.with_lengths({"nelements": 300}), params)
    a_new_process()
    _, rep = transform_program(mass_kernel(), **opts)
    assert not rep.cached
    assert [(g.rung, g.action) for g in rep.groups] == [("exact", "replayed")]
    assert entries(store) == 1  # the entry was replaced, not added to


# }}}


# {{{ damaged and foreign entries, a damaged file


def test_a_corrupt_entry_is_ignored_with_one_warning(store: Path, cl_device: Any) -> None:
    from feinsum.hook import transform_program
    from feinsum.hook.store import CacheWarning, ProgramCache

    transform_program(mass_kernel(), device=cl_device, db=False)
    cache = ProgramCache(store)
    cache._dict._exec_sql("UPDATE dict SET key_value = ?", (b"\x80\x05not a pickle",))
    a_new_process()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, rep = transform_program(mass_kernel(), device=cl_device, db=False)
        a_new_process()  # the entry was replaced: read without a warning now
        _, rep2 = transform_program(mass_kernel(), device=cl_device, db=False)
    mine = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(mine) == 1, [str(w.message) for w in caught]
    assert "cannot be read" in str(mine[0].message)
    assert not rep.cached and rep.transformed == 1
    assert rep2.cache == "disk" and entries(store) == 1


def test_a_foreign_entry_is_ignored_with_one_warning(store: Path, cl_device: Any) -> None:
    from feinsum.hook import transform_program
    from feinsum.hook.store import ProgramCache

    transform_program(mass_kernel(), device=cl_device, db=False)
    cache = ProgramCache(store)
    (key,) = list(cache._dict.keys())
    cache._dict.store(key, {"written by": "another version"})
    mine, rep = twice_in_new_processes(cl_device)
    assert len(mine) == 1 and "not written by this version" in mine[0]
    assert rep.cache == "disk"  # replaced by the first of the two


def test_a_damaged_file_is_one_warning_and_no_cache(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    cl_device: Any) -> None:
    from feinsum.hook import clear_cache
    from feinsum.hook.store import ProgramCache

    directory = tmp_path / "programs"
    path = ProgramCache(directory).path
    path.write_bytes(b"this is not an SQLite file" * 100)
    monkeypatch.setenv("FEINSUM_CACHE", str(directory))
    clear_cache()
    mine, rep = twice_in_new_processes(cl_device)
    assert len(mine) == 1 and "cannot be opened" in mine[0], mine
    assert rep.transformed == 1


# }}}


def test_the_cache_is_bounded(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import feinsum.hook.store as hs

    cache = hs.ProgramCache(store)
    blob = b"x" * 10_000
    monkeypatch.setattr(hs, "MAX_BYTES", 60_000)
    for k in range(20):
        cache.put(f"key{k}", hs.Entry(blob, None, None, None))
    assert cache.nbytes() <= 60_000 and len(cache) >= 3
    assert cache.get("key19") is not None and cache.get("key0") is None  # oldest go first


def test_mirrors_agree_with_the_packages(monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    """store.py's cheap stand-ins for the database's and the recipes' own functions."""
    from feinsum.database.engine import default_path
    from feinsum.database.shipped import shipped_files
    from feinsum.hook.store import _default_database, _shipped_locations, recipe_directories
    from feinsum.recipes.loading import default_directories

    assert _default_database() == default_path()
    for env in (None, "none", str(ROOT / "db")):
        if env is None:
            monkeypatch.delenv("FEINSUM_SHIPPED", raising=False)
        else:
            monkeypatch.setenv("FEINSUM_SHIPPED", env)
        files = [p.resolve() for p in _shipped_locations() if p.is_file()]
        assert files == shipped_files(True)
    monkeypatch.setenv("FEINSUM_RECIPE_PATH", str(tmp_path))
    assert recipe_directories() == default_directories()
    assert recipe_directories(tmp_path / "x")[1:] == default_directories()


def test_the_revision_read_without_sqlalchemy(tmp_path: Path, cl_device: Any) -> None:
    from feinsum.database import open_database
    from feinsum.devices.opencl import device_info
    from feinsum.hook.store import sqlite_revision

    path = tmp_path / "db.sqlite"
    assert sqlite_revision(path) == -1
    with open_database(path, include_shipped=False) as db:
        assert sqlite_revision(path) == db.revision() == 0
        import feinsum

        e = feinsum.einsum("ij,j->i", feinsum.array("A", (40, 40)), feinsum.array("x", (40,)))
        info = device_info(cl_device)
        _record(db, info, e, {"anything": 1})
        assert sqlite_revision(path) == db.revision() > 0
    (tmp_path / "junk.sqlite").write_bytes(b"not a database" * 100)
    assert sqlite_revision(tmp_path / "junk.sqlite") is None


def test_cli_info_and_clear(store: Path, cl_device: Any,
                            capsys: pytest.CaptureFixture[str]) -> None:
    from feinsum.cli.main import main
    from feinsum.hook import transform_program
    from feinsum.hook.locks import FileLock

    transform_program(mass_kernel(), device=cl_device, db=False)
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["entries"] == 1 and info["bytes"] > 0 and info["directory"] == str(store)
    (unheld,) = (store / "locks").glob("*.lock")  # the transformation's lock, released
    held = FileLock(store / "locks" / "other.lock", "a transformation in progress")
    assert held.acquire()
    try:
        assert main(["cache", "clear"]) == 0
        out = capsys.readouterr().out
        assert "removed 1 transformed program" in out and "1 lock files; 1 held" in out
        assert not unheld.exists() and held.path.exists()
    finally:
        held.release()
    assert entries(store) == 0
    assert main(["cache", "clear", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["removed"], info["locks_removed"], info["locks_held"]) == (0, 1, 0)
    os.environ["FEINSUM_CACHE"] = "none"
    try:
        assert main(["cache", "info"]) == 1
        assert "turned off" in capsys.readouterr().err
    finally:
        os.environ["FEINSUM_CACHE"] = str(store)


# vim: foldmethod=marker
