"""The current recipes as a code checker: a record's code generated again, without a device.

:class:`CurrentRecipes` is the :class:`~feinsum.database.revalidation.CodeChecker` feinsum
passes as ``recipe_versions`` to :meth:`~feinsum.database.Database.best` and ``query`` (the
hook, :func:`feinsum.compile`, the autotuner's resume), so that they revalidate the records
of older recipe versions they consider; :func:`revalidate` does it for a whole database
(``feinsum db revalidate``).

Generating a record's code is ``generate_loopy`` of its canonical spec, the recipe's
``apply`` with its configuration and its device's :class:`~feinsum.devices.info.DeviceInfo`
(read from the database), and loopy's code generation (:mod:`feinsum.timing.fingerprint`): no
OpenCL device is opened, nothing is built or run. Results are cached per process, per
(recipe version, loopy version, spec, device, configuration).
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import multiprocessing
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from feinsum.database.revalidation import CheckItem, Regenerated

if TYPE_CHECKING:
    from feinsum.database import DatabaseLike
    from feinsum.database.revalidation import RevalidationReport
    from feinsum.recipes import Recipe

#: Regenerated fingerprints remembered per process (least recently used dropped first).
CACHE_SIZE = 4096
_CACHE: collections.OrderedDict[tuple[str, ...], Regenerated] = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Job:
    """One configuration's code to generate (picklable: the recipe travels as its file)."""

    recipe_name: str
    recipe_file: str | None
    spec_json: str
    device: dict[str, Any]
    params_json: str


def _regenerate(job: _Job, recipe: Recipe | None = None) -> Regenerated:
    """The fingerprint of *job*'s code (in a worker process, or here with *recipe*)."""
    import json

    from feinsum.devices.opencl import DeviceInfo
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.spec.serialize import spec_from_json
    from feinsum.timing.fingerprint import code_fingerprint
    from feinsum.timing.measurement import UNTRANSFORMED

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = DeviceInfo.from_dict(job.device)
            spec = spec_from_json(job.spec_json)
            t_unit = generate_loopy(spec)
            if job.recipe_name != UNTRANSFORMED:
                if recipe is None:
                    from feinsum.recipes import load_recipe_file

                    if job.recipe_file is None:
                        return Regenerated(error=f"recipe {job.recipe_name!r} has no file")
                    recipe = load_recipe_file(job.recipe_file)
                t_unit = recipe.apply(t_unit, json.loads(job.params_json), spec, info)
            return Regenerated(fingerprint=code_fingerprint(t_unit, info))
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        return Regenerated(error=text if len(text) <= 2000 else text[:2000] + " ...")


class CurrentRecipes(Mapping[str, str]):
    """The current version of every recipe (``{name: version}``, the untransformed kernel
    included), able to generate the code of a record again.

    :arg recipes: the recipes (default: every recipe on *recipe_path*,
        ``FEINSUM_RECIPE_PATH`` and the shipped ones).
    :arg jobs: worker processes generating code in parallel (1: in this process, where a
        recipe that crashes takes the process down).
    """

    def __init__(self, recipes: Sequence[Recipe] | None = None, *, recipe_path: Any = None,
                 jobs: int = 1) -> None:
        from feinsum.timing.fingerprint import loopy_version
        from feinsum.timing.measurement import UNTRANSFORMED, untransformed_version

        if recipes is None:
            from feinsum.recipes import recipes as all_recipes

            recipes = all_recipes(recipe_path)
        self._recipes = {r.name: r for r in recipes}
        self._versions = {name: r.version for name, r in self._recipes.items()}
        self._versions[UNTRANSFORMED] = untransformed_version()
        self._loopy = loopy_version()
        from feinsum.checks import processes

        self.jobs = processes("jobs", jobs) or 1

    # {{{ the mapping and the checker's properties

    def __getitem__(self, name: str) -> str:
        return self._versions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)

    def __repr__(self) -> str:
        return f"CurrentRecipes({self._versions!r}, loopy {self._loopy})"

    @property
    def versions(self) -> Mapping[str, str]:
        return self._versions

    @property
    def loopy_version(self) -> str:
        return self._loopy

    def comparable(self, fingerprint: str | None) -> bool:
        from feinsum.timing.fingerprint import is_comparable

        return is_comparable(fingerprint)

    # }}}

    def _job(self, item: CheckItem) -> _Job:
        r = item.record
        recipe = self._recipes.get(r.recipe_name)
        src = None if recipe is None else recipe.source_path
        return _Job(r.recipe_name, None if src is None else str(src), item.spec_json,
                    item.device.as_dict(), r.params_key)

    def _key(self, job: _Job) -> tuple[str, ...]:
        spec = hashlib.sha256(job.spec_json.encode()).hexdigest()
        return (job.recipe_name, self._versions[job.recipe_name], self._loopy, spec,
                repr(sorted(job.device.items())), job.params_json)

    def fingerprints(self, items: Sequence[CheckItem]) -> dict[str, Regenerated]:
        """The code of every item generated again, by record uid (one generation per
        distinct configuration; cached)."""
        jobs = {item.record.uid: self._job(item) for item in items}
        todo: dict[tuple[str, ...], _Job] = {}
        found: dict[tuple[str, ...], Regenerated] = {}
        with _CACHE_LOCK:
            for job in jobs.values():
                key = self._key(job)
                hit = _CACHE.get(key)
                if hit is not None:
                    _CACHE.move_to_end(key)
                    found[key] = hit
                else:
                    todo[key] = job
        for key, result in self._run(todo):
            found[key] = result
            with _CACHE_LOCK:
                _CACHE[key] = result
                while len(_CACHE) > CACHE_SIZE:
                    _CACHE.popitem(last=False)
        return {uid: found[self._key(job)] for uid, job in jobs.items()}

    def _run(self, todo: Mapping[tuple[str, ...], _Job]
             ) -> Iterator[tuple[tuple[str, ...], Regenerated]]:
        portable = {k: j for k, j in todo.items()
                    if j.recipe_file is not None or j.recipe_name not in self._recipes}
        # in processes of the hash seed the tuning workers run with (loopy's code for some
        # kernels depends on it); with one job, and for recipes defined in this process
        # only, here
        here = {k: j for k, j in todo.items() if k not in portable}
        if self.jobs > 1 and portable:
            yield from _in_workers(portable, self.jobs)
        else:
            here = dict(todo)
        for k, j in here.items():
            yield k, _regenerate(j, self._recipes.get(j.recipe_name))


def _in_workers(jobs: Mapping[tuple[str, ...], _Job], workers: int
                ) -> Iterator[tuple[tuple[str, ...], Regenerated]]:
    """:func:`_regenerate` each job in a pool of fresh processes. A job that kills its
    process (a crashing recipe or code generator) breaks the pool: the jobs left are then
    run one process each, and the one that dies again gets that as its error."""
    ctx = multiprocessing.get_context("spawn")
    left = dict(jobs)
    from feinsum.timing.hashseed import code_hash_seed

    with code_hash_seed():
        yield from _pooled(ctx, left, workers)


def _pooled(ctx: Any, left: dict[tuple[str, ...], _Job], workers: int
            ) -> Iterator[tuple[tuple[str, ...], Regenerated]]:
    try:
        with concurrent.futures.ProcessPoolExecutor(min(workers, len(left)),
                                                    mp_context=ctx) as pool:
            futures = {pool.submit(_regenerate, j): k for k, j in left.items()}
            for f in concurrent.futures.as_completed(futures):
                result = f.result()
                del left[futures[f]]
                yield futures[f], result
    except concurrent.futures.process.BrokenProcessPool:
        for k, j in left.items():
            try:
                with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as alone:
                    result = alone.submit(_regenerate, j).result()
            except concurrent.futures.process.BrokenProcessPool:
                result = Regenerated(error="code generation killed its process")
            yield k, result


def current_recipes(recipe_path: Any = None) -> CurrentRecipes:
    """The current recipes (on *recipe_path*, ``FEINSUM_RECIPE_PATH`` and the shipped
    ones) as ``recipe_versions=`` for :func:`feinsum.best` and :func:`feinsum.query`:
    records of other versions are revalidated before they are used."""
    return CurrentRecipes(recipe_path=recipe_path)


def default_jobs() -> int:
    """Worker processes of a whole-database revalidation: the CPU count, at most 4."""
    return max(1, min(4, os.cpu_count() or 1))


def revalidate(db: DatabaseLike = None, *, recipe_path: Any = None, dry_run: bool = False,
               adopt: bool = False, everything: bool = False, jobs: int | None = None,
               progress: Callable[[int, int], None] | None = None) -> RevalidationReport:
    """Revalidate every record of *db* against the current recipes and loopy: keep the
    records whose code is unchanged under the current recipe versions, retire the others,
    fingerprint the records measured before fingerprints (see ``docs/database.rst``).
    Nothing is written when nothing changes.

    :arg db: a :class:`~feinsum.database.Database`, a path (of a database, or of a
        JSON-lines export: :func:`revalidate_file`), an SQLAlchemy URL, or None (the
        default database); only its own records are revalidated (not the shipped ones,
        which are read-only). A path to an empty or foreign file is refused (left as it
        is).
    :arg dry_run: decide and count, change nothing.
    :arg adopt: also fingerprint records measured before fingerprints at older recipe
        versions, with the code the current version generates (trusting, without proof,
        that it is the code they timed); by default they are left as they are.
    :arg everything: generate the code of records at current versions too.
    :arg jobs: worker processes generating code (default: the CPU count, at most 4).
    :arg progress: called with (records done, records) as revalidation goes.
    """
    from feinsum.database import resolve_database
    from feinsum.database.engine import resolve_url, sqlite_path
    from feinsum.database.files import revalidation_target
    from feinsum.database.revalidation import revalidate_store

    checker = CurrentRecipes(recipe_path=recipe_path,
                             jobs=default_jobs() if jobs is None else jobs)
    path = sqlite_path(resolve_url(db)) if isinstance(db, (str, os.PathLike)) else None
    if path is not None and revalidation_target(path) == "export":
        return revalidate_file(path, recipe_path=recipe_path, dry_run=dry_run, adopt=adopt,
                               everything=everything, jobs=checker.jobs,
                               progress=progress)
    database = resolve_database(db)
    return revalidate_store(database.user_store, checker, dry_run=dry_run,
                            adopt=adopt, everything=everything, progress=progress)


def revalidate_file(path: str | os.PathLike[str], *, recipe_path: Any = None,
                    dry_run: bool = False, adopt: bool = False, everything: bool = False,
                    jobs: int | None = None,
                    progress: Callable[[int, int], None] | None = None
                    ) -> RevalidationReport:
    """:func:`revalidate` the records of a JSON-lines export (the shipped ``db/*.jsonl``)
    and write it back in place, unless *dry_run*: only when a record changed, atomically
    (written beside it, then renamed over it), compressed as it was, in the newest export
    format. A file that is not an export is refused (left as it is)."""
    import tempfile
    from pathlib import Path

    from feinsum.database import open_database
    from feinsum.database.files import is_gzip, revalidation_target
    from feinsum.database.revalidation import revalidate_store
    from feinsum.errors import DatabaseError

    checker = CurrentRecipes(recipe_path=recipe_path,
                             jobs=default_jobs() if jobs is None else jobs)
    path = Path(path)
    if revalidation_target(path) != "export":
        raise DatabaseError(f"{path} is a SQLite database, not an export: revalidate it with "
                            "revalidate(path)")
    gz = is_gzip(path)
    with tempfile.TemporaryDirectory(prefix="feinsum-revalidate-") as tmp, \
            open_database(Path(tmp) / "records.sqlite", include_shipped=False) as db:
        db.import_file(path)
        report = revalidate_store(db.user_store, checker, dry_run=dry_run,
                                  adopt=adopt, everything=everything, progress=progress)
        report.where = str(path)
        if not dry_run and report.changed:
            inode = path.stat().st_ino
            db.export(path, compress=gz, only_if_changed=True)
            if path.stat().st_ino != inode:  # renamed over it
                report.note = "rewritten in place"
    return report
