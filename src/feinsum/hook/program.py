"""``feinsum.transform_program``: every einsum of a loopy program, transformed by the best
record of the timing database (or a recipe's default), with a report of what was done."""

from __future__ import annotations

import collections
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from feinsum.errors import DeviceError, EinsumMatchError, FeinsumError, MissingRecordError
from feinsum.hook.kernels import kernel_names
from feinsum.hook.planning import Options
from feinsum.hook.report import Clock, GroupReport, HookReport, HookWarning, KernelReport

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.database import Database
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.hook.locks import FileLock
    from feinsum.hook.planning import Planner
    from feinsum.hook.store import Entry

__all__ = ["ON_MISS", "cached_program", "clear_cache", "kernel_names", "program_key",
           "transform_program"]

ON_MISS = ("default", "tune", "skip", "error")
ON_BUSY = ("default", "wait")
#: Programs remembered per process (least recently used dropped first).
CACHE_SIZE = 256
#: Seconds a process waits at most for another one transforming the same program (then it
#: transforms it itself).
TRANSFORM_WAIT = 600.0


# {{{ device and database


_DEVICE_INFO: dict[Any, tuple[DeviceInfo, str | None]] = {}


def _device(device: Any) -> tuple[DeviceInfo, Any, str | None]:
    """(identity, pyopencl device or None when given a bare DeviceInfo, why the device
    cannot build vector code or None). A device that cannot build even scalar code
    raises :class:`~feinsum.DeviceError`."""
    from feinsum.devices.opencl import DeviceInfo, device_info, get_device, vector_problem

    if isinstance(device, DeviceInfo):
        return device, None, None
    dev = get_device(device)
    known = _DEVICE_INFO.get(dev)
    if known is None:
        known = _DEVICE_INFO[dev] = (device_info(dev), vector_problem(dev))
    return known[0], dev, known[1]


def _database(db: Any) -> Database | None:
    from feinsum.database.resolve import optional_database

    return optional_database(db)


def _database_name(db: Any) -> str:
    """What names database *db* in cache keys, without opening it."""
    import os

    if db is False:
        return "none"
    if db is None:
        return f"default {os.environ.get('FEINSUM_DB', '')}"
    if isinstance(db, (str, os.PathLike)):
        return str(Path(db).expanduser().absolute()) if "://" not in str(db) else str(db)
    return str(getattr(db, "where", None) or repr(db))


# }}}


# {{{ the caches: this process's, and the persistent one


_CACHE: collections.OrderedDict[str, Entry] = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()


def program_key(t_unit: lp.TranslationUnit) -> str:
    """A structural hash of *t_unit* (loopy's persistent hash): equal programs built
    twice have the same key."""
    from loopy.tools import LoopyKeyBuilder

    return str(LoopyKeyBuilder()(t_unit))


def clear_cache() -> None:
    """Forget every program (and device) the hook has seen in this process (the
    persistent cache is left alone: ``feinsum cache clear`` empties it)."""
    from feinsum.hook.planning import clear_parts
    from feinsum.hook.store import forget_fingerprints

    with _CACHE_LOCK:
        _CACHE.clear()
        _DEVICE_INFO.clear()
    clear_parts()
    forget_fingerprints()


def _remember(key: str, entry: Entry) -> None:
    with _CACHE_LOCK:
        _CACHE[key] = entry
        _CACHE.move_to_end(key)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)


def _lookup(key: str, db: Any, info: DeviceInfo, recipe_path: Any
            ) -> tuple[Entry, str] | None:
    """The entry under *key* (this process's cache first, then the persistent one) and
    where it was found, if what decided it still holds."""
    from feinsum.hook.store import open_cache, safely

    with _CACHE_LOCK:
        entry = _CACHE.get(key)
    where = "memory"
    if entry is None:
        store = open_cache()
        entry = safely(store, "get", key)
        where = "disk"
        if entry is None:
            return None
    fresh = _still_valid(entry, db, info, recipe_path)
    if fresh is None:
        return None
    if fresh is not entry and where == "disk":
        safely(open_cache(), "put", key, fresh)
    _remember(key, fresh)
    return fresh, where


def _still_valid(entry: Entry, db: Any, info: DeviceInfo, recipe_path: Any) -> Entry | None:
    """*entry*, refreshed if the database changed without changing any of its choices;
    None when a choice changed (see :mod:`feinsum.hook.store`)."""
    from feinsum.hook.store import database_state

    if db is False:
        return entry
    state = database_state(db)
    if state is not None and state == entry.db_state:
        return entry
    database = _database(db)
    if database is None:
        return entry
    revision = database.revision()
    if revision != entry.db_revision:
        from feinsum.recipes import recipes
        from feinsum.tuning.codecheck import CurrentRecipes

        versions = CurrentRecipes(recipes(recipe_path))
        for e, uid in entry.decisions:
            answer = database.best(e, info, recipe_versions=versions)
            if (None if answer.record is None else answer.record.uid) != uid:
                return None
    return replace(entry, db_state=state, db_revision=revision)


# }}}


def transform_program(
    t_unit: lp.TranslationUnit,
    *,
    device: Any = None,
    db: Any = None,
    on_miss: str = "default",
    budget: int | None = None,
    lengths: Mapping[str, int] | None = None,
    prefer: Sequence[str] | None = None,
    on_busy: str = "default",
    wait_timeout: float | None = None,
    time_limit: float | None = None,
    recipe_path: Any = None,
    cache: bool = True,
    schedule_all: bool = False,
    run_once: bool = False,
) -> tuple[lp.TranslationUnit, HookReport]:
    """Transform every batched einsum and kernel reduction of every kernel of *t_unit* by
    the best configuration the timing database records for it on *device*.

    Each kernel is first prepared (:func:`feinsum.matching.prepare_kernel`: what array
    compilers emit, rewritten exactly into what the matcher reads). Per statement group
    (:func:`feinsum.find_einsums`), :func:`feinsum.best` walks the fallback chain (exact
    -> nearest lengths -> same vendor) among records of the current recipe versions (a
    record of an older version is revalidated first: used when its generated code is
    unchanged, retired otherwise), and the record's configuration is replayed. In a kernel
    where an einsum is transformed, every other statement gets the default parallel schedule
    (:mod:`feinsum.hook.schedule`); other kernels are left as they are (*schedule_all*:
    scheduled too). A transformation that does not pay is not made
    (:mod:`feinsum.hook.payoff`: einsums with too little work, code or time over budget).
    loopy must linearize and generate code for every changed kernel, and a
    ``pyopencl.Device`` *device* must build that code (:mod:`feinsum.hook.check`, done as
    the call will, so that the call reuses it); a kernel that fails gives back the einsum
    that makes it fail (:mod:`feinsum.hook.culprit`), else is given the default schedule
    only, else kept as it was. The report says what was done to each group and kernel,
    and how long each phase took.

    Whatever goes wrong inside the hook, the caller gets a program that runs: the
    untransformed one, with a :class:`~feinsum.hook.report.HookWarning` (only
    ``on_miss="error"`` and a device that cannot build any kernel raise).

    :arg device: a ``pyopencl.Device``, a device string, a
        :class:`~feinsum.devices.info.DeviceInfo` or None (the default device). A device is
        probed first (:func:`feinsum.devices.opencl.vector_problem`): one that cannot build
        vector code gets scalar code only; one that cannot build a kernel raises
        :class:`~feinsum.DeviceError`.
    :arg db: a :class:`~feinsum.database.Database`, a path or URL, None (the default
        database) or False (no database: recipe defaults only).
    :arg on_miss: when no record exists: ``"default"`` applies the heuristic default of the
        first applicable recipe in :func:`feinsum.hook.preference`'s order, ``"tune"`` tunes
        (with *budget* evaluations and *time_limit* seconds) and records, then replays the
        best, ``"skip"`` leaves the group alone, ``"error"`` raises
        :class:`~feinsum.errors.MissingRecordError`.
    :arg on_busy: with ``on_miss="tune"``, when another process (or thread) is tuning the
        same einsum on the same device: ``"default"`` uses the default meanwhile,
        ``"wait"`` waits (at most *wait_timeout* seconds) and uses its record.
    :arg lengths: values of the kernels' length parameters (``{"nelements": 50000}``):
        the database answers for these lengths, and tuning needs them.
    :arg prefer: recipe names in the order the ``"default"`` rung tries them.
    :arg cache: reuse the answer for a structurally equal program, device, options and
        code, while the database's choices for it are unchanged: from this process's
        memory, else from the persistent cache (:mod:`feinsum.hook.store`,
        ``$FEINSUM_CACHE``); False: neither is read or written. With the persistent cache,
        one process at a time transforms a given program (a lock file in the cache's
        ``locks/``): the others wait for its entry (at most :data:`TRANSFORM_WAIT` seconds,
        the report's ``timings["wait"]``), then transform it themselves if it left none
        (with ``on_miss="tune"``, *on_busy* decides instead, per einsum).
    :arg schedule_all: give kernels without einsums the default schedule too.
    :arg run_once: the program runs once (arraycontext's ``freeze``): every kernel gets
        the default schedule only, no einsum is matched or transformed.

    Returns the new translation unit and a :class:`~feinsum.hook.HookReport`.
    """
    t0 = time.perf_counter()
    t_unit, opts = _arguments(t_unit, on_miss, on_busy, budget, time_limit, lengths, prefer,
                              wait_timeout)
    clock = Clock()
    try:
        done = _transform(t_unit, device, db, opts, recipe_path, cache, schedule_all,
                          run_once, clock, t0)
        return cast("tuple[lp.TranslationUnit, HookReport]", done)
    except (MissingRecordError, DeviceError):
        raise
    except Exception as exc:  # never worse than the untransformed program: keep it
        note = (f"the hook failed ({type(exc).__name__}: {str(exc)[:300]}); the program "
                "is left as it was")
        warnings.warn(f"feinsum: {note}", HookWarning, stacklevel=2)
        names = kernel_names(t_unit)
        return t_unit, HookReport(device=str(device), database=None, note=note,
                                  kernels=tuple(names), seconds=time.perf_counter() - t0,
                                  kernel_reports=tuple(KernelReport(n, "unchanged")
                                                       for n in names),
                                  timings=clock.as_dict())


def cached_program(t_unit: lp.TranslationUnit, **options: Any
                   ) -> tuple[lp.TranslationUnit, HookReport] | None:
    """What :func:`transform_program` with these keyword *options* (all of its own but
    ``cache``) returns, if one of its caches (this process's, then the persistent one)
    holds it and the database still makes the same choices; None, without transforming
    anything, if not."""
    t0 = time.perf_counter()
    where = {k: options.pop(k, None) for k in ("device", "db", "recipe_path")}
    flags = {k: bool(options.pop(k, False)) for k in ("schedule_all", "run_once")}
    t_unit, opts = _arguments(t_unit, **options)
    try:
        return _transform(t_unit, where["device"], where["db"], opts, where["recipe_path"],
                          True, flags["schedule_all"], flags["run_once"], Clock(), t0,
                          cached_only=True)
    except (MissingRecordError, DeviceError):
        raise
    except Exception:  # a cache that cannot answer is a miss: transform_program says why
        return None


def _arguments(t_unit: Any, on_miss: str = "default", on_busy: str = "default",
               budget: int | None = None, time_limit: float | None = None,
               lengths: Mapping[str, int] | None = None,
               prefer: Sequence[str] | None = None, wait_timeout: float | None = None
               ) -> tuple[Any, Options]:
    """*t_unit* as a translation unit and the options, checked."""
    if on_miss not in ON_MISS:
        raise FeinsumError(f"on_miss={on_miss!r}: use one of {', '.join(ON_MISS)}")
    if on_busy not in ON_BUSY:
        raise FeinsumError(f"on_busy={on_busy!r}: use one of {', '.join(ON_BUSY)}")
    if budget is not None and (not isinstance(budget, int) or budget < 1):
        raise FeinsumError(f"budget={budget!r}: give a positive number of evaluations")
    import loopy as lp

    if not isinstance(t_unit, lp.TranslationUnit):
        if isinstance(t_unit, lp.LoopKernel):
            t_unit = lp.make_program(t_unit)
        else:
            raise EinsumMatchError(f"expected a loopy TranslationUnit, got "
                                   f"{type(t_unit).__name__}")
    return t_unit, Options(
        on_miss, on_busy, budget, time_limit,
        tuple(sorted((str(k), int(v)) for k, v in (lengths or {}).items())),
        None if prefer is None else tuple(prefer), wait_timeout)


def _transform(t_unit: Any, device: Any, db: Any, opts: Options, recipe_path: Any,
               cache: bool, schedule_all: bool, run_once: bool, clock: Clock, t0: float,
               cached_only: bool = False) -> tuple[Any, HookReport] | None:
    from feinsum.hook.store import Entry, code_fingerprint, entry_key, recipe_directories

    with clock("setup"):
        info, dev, vector_problem = _device(device)
    lock, waited = None, False
    try:
        if cache:
            with clock("cache"):
                key = entry_key(program_key(t_unit), repr(info.steady), vector_problem,
                                code_fingerprint(recipe_directories(recipe_path)), opts,
                                str(recipe_path), schedule_all, run_once,
                                _database_name(db))
                found = _lookup(key, db, info, recipe_path)
            if found is None and not cached_only and opts.on_miss != "tune":
                # tuning has its own lock per einsum, and on_busy says whether to wait
                lock, waited = _take_turn(key, clock)
                found = _lookup(key, db, info, recipe_path) if waited else None
            if found is not None:
                entry, where = found
                report = entry.report
                if waited:
                    wait = (f"waited {clock.seconds['wait']:.1f} s for another process "
                            "transforming it")
                    report = replace(report, note="; ".join(filter(None, (report.note, wait))))
                return entry.t_unit, replace(report, cached=True, cache=where,
                                             seconds=time.perf_counter() - t0,
                                             timings=clock.as_dict())
            if cached_only:
                return None
        with clock("setup"):
            from feinsum.hook.planning import Planner
            from feinsum.hook.store import database_state

            state = database_state(db)  # before any decision: a record added since shows
            planner = Planner(info, dev, db, opts, recipe_path, vector_problem, clock)
        new, report = _transformed(t_unit, planner, schedule_all, run_once)
        note = "" if vector_problem is None else (
            f"the device cannot build vector code ({vector_problem}): scalar code only")
        opened = planner.db if planner.revision is not None else None
        report = replace(report, device=info.name,
                         database=(opened.where if opened is not None
                                   else None if db is False else _database_name(db)),
                         note="; ".join(n for n in (note, report.note) if n))
        if cache:
            with clock("cache"):
                from feinsum.hook.store import open_cache, safely

                entry = Entry(new, report, state, planner.revision, tuple(planner.decisions),
                              info)
                _remember(key, entry)
                safely(open_cache(), "put", key, entry)
        return new, replace(report, seconds=time.perf_counter() - t0, timings=clock.as_dict())
    finally:
        if lock is not None:
            lock.release()


def _take_turn(key: str, clock: Clock) -> tuple[FileLock | None, bool]:
    """The lock on transforming the program of *key* (None: there is no persistent cache,
    the lock cannot be created, or another process kept it over :data:`TRANSFORM_WAIT`),
    and whether another process held it (and this one waited for it)."""
    from feinsum.hook.locks import FileLock
    from feinsum.hook.store import open_cache, warn_once

    store = open_cache()
    if store is None:
        return None, False
    lock = FileLock(store.directory / "locks" / f"{key[:32]}.lock",
                    f"transforming the program {key[:12]}")
    try:
        if lock.acquire():
            return lock, False
        with clock("wait"):
            return (lock if lock.acquire(wait=True, timeout=TRANSFORM_WAIT) else None), True
    except Exception as exc:  # a directory that cannot be written: transform unlocked
        warn_once(f"lock {lock.path.parent}",
                  f"feinsum's program cache: {exc}; each process transforms its programs "
                  "without asking whether another one is transforming them")
        return None, False


def _transformed(original: Any, planner: Planner, schedule_all: bool, run_once: bool
                 ) -> tuple[Any, HookReport]:
    """The program transformed (within its budgets) and checked, and its report."""
    from feinsum.hook.kernels import transform_kernel
    from feinsum.hook.launches import LazyLaunches
    from feinsum.hook.payoff import code_budget, program_size, time_budget
    from feinsum.hook.schedule import DefaultSchedule

    clock = planner.clock
    schedule = DefaultSchedule(planner.info, clock)
    names = kernel_names(original)
    before = program_size(original, names)
    planner.deadline = time.perf_counter() + time_budget(before)
    keep: dict[str, dict[tuple[str, ...], str]] = {n: {} for n in names}
    groups: dict[str, list[GroupReport]] = {}
    kernels: dict[str, KernelReport] = {}
    t_unit = original

    def kernel(t: Any, name: str) -> Any:
        t, groups[name], kernels[name] = transform_kernel(
            t, name, planner, schedule, schedule_all or run_once, run_once=run_once,
            keep=keep[name])
        return t

    for name in names:
        t_unit = kernel(t_unit, name)
    note = ""
    while True:  # the code budget: the einsums with the least work go back first
        changed = [n for n in names if kernels[n].action in ("transformed", "scheduled")]
        transformed = [(planner.work.get(g.insn_ids, float("inf")), n, g.insn_ids)
                       for n in names for g in groups[n] if g.transformed]
        limit = code_budget(program_size(original, changed), len(transformed))
        size = program_size(t_unit, changed)
        if size.unrolled <= limit or not transformed:
            break
        _, name, ids = min(transformed)
        keep[name][ids] = ("given back to the default schedule: the transformed program "
                           "would exceed its code budget")
        note = (f"the transformed program exceeded its code budget ({size.unrolled:,} "
                f"statements once unrolled, at most {limit:,}): einsums given back to the "
                "default schedule")
        t_unit = kernel(t_unit.with_kernel(original[name]), name)

    def default_only(name: str) -> Any:
        t, _, kreport = transform_kernel(original, name, planner, schedule, True,
                                         run_once=True)
        return t[name] if kreport.action == "scheduled" else None

    def attempt(name: str, give_back: dict[tuple[str, ...], str]) -> Any:
        if planner.deadline is not None and time.perf_counter() > planner.deadline:
            return None
        return transform_kernel(original, name, planner, schedule, schedule_all,
                                keep={**keep[name], **give_back})

    with clock("checks"):
        t_unit = _checked(original, t_unit, groups, kernels, default_only, attempt,
                          planner.dev)
    changed = [n for n in names if kernels[n].action in ("transformed", "scheduled")]
    report = HookReport(
        device=planner.info.name, database=None,
        groups=tuple(g for name in names for g in groups[name]),
        kernels=tuple(names), kernel_reports=tuple(kernels[name] for name in names),
        note=note, mode="schedule" if run_once else "transform",
        programs=LazyLaunches(original, t_unit),
        before=program_size(original, changed).as_dict() if changed else {},
        after=program_size(t_unit, changed).as_dict() if changed else {})
    return t_unit, report


def _checked(original: Any, t_unit: Any, groups: dict[str, list[GroupReport]],
             kernels: dict[str, KernelReport], default_only: Any, attempt: Any,
             device: Any) -> Any:
    """The transformed program, once loopy can run it and *device* (a ``pyopencl.Device``
    or None) can build it (:mod:`feinsum.hook.check`). A changed kernel that fails keeps
    as many of its groups as run without the one that fails (:mod:`feinsum.hook.culprit`;
    *attempt(name, give_back)*: the kernel transformed with those groups given back),
    else gets the default schedule only, else is put back as it was (its reports say
    why)."""
    from functools import partial

    from feinsum.hook.check import program_problem as problem_of
    from feinsum.hook.culprit import without_culprit
    from feinsum.hook.kernels import reverted

    program_problem = partial(problem_of, device=device)

    def changed() -> list[str]:
        return [n for n, k in kernels.items() if k.action in ("transformed", "scheduled")]

    if not changed():
        return original
    problem = program_problem(t_unit)
    if problem is None:
        return t_unit
    names = changed()
    own = {n: problem for n in names} if len(names) == 1 else {
        n: program_problem(original.with_kernel(t_unit[n])) for n in names}
    failing = [n for n in names if own[n] is not None] or names
    for name in failing:
        why = own[name] or problem

        def runs(tried: Any, name: str = name) -> bool:
            return program_problem(original.with_kernel(tried[0][name])) is None

        found = without_culprit(groups[name], why, partial(attempt, name), runs)
        if found is not None:
            t_unit = t_unit.with_kernel(found[0][name])
            groups[name], kernels[name] = found[1], found[2]
            continue
        had_parts = kernels[name].action == "transformed"
        groups[name], kernels[name] = reverted(groups[name], kernels[name], why)
        t_unit = t_unit.with_kernel(original[name])
        alt = default_only(name) if had_parts else None
        if alt is not None and program_problem(t_unit.with_kernel(alt)) is None:
            t_unit = t_unit.with_kernel(alt)
            kernels[name] = replace(kernels[name], action="scheduled", note=(
                f"{kernels[name].note}; the other statements keep the default schedule"))
    if changed() and program_problem(t_unit) is not None:  # only together do they fail
        for name in changed():
            groups[name], kernels[name] = reverted(groups[name], kernels[name], problem)
        return original
    return t_unit


# vim: foldmethod=marker
