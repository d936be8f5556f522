"""``feinsum.transform_program``: every einsum of a loopy program, transformed by the best
record of the timing database (or a recipe's default), with a report of what was done."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from feinsum.errors import EinsumMatchError, FeinsumError, MissingRecordError, RecipeError
from feinsum.hook.report import GroupReport, HookReport

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.database import Answer, Database
    from feinsum.devices import DeviceInfo
    from feinsum.matching import Match
    from feinsum.recipes import Recipe
    from feinsum.spec import BatchedEinsum

ON_MISS = ("default", "tune", "skip", "error")
ON_BUSY = ("default", "wait")
#: Programs remembered per process (least recently used dropped first).
CACHE_SIZE = 256


# {{{ options, device and database


@dataclass(frozen=True)
class _Options:
    on_miss: str
    on_busy: str
    budget: int | None
    time_limit: float | None
    lengths: tuple[tuple[str, int], ...]
    prefer: tuple[str, ...] | None
    wait_timeout: float | None


_DEVICE_INFO: dict[Any, DeviceInfo] = {}


def _device(device: Any) -> tuple[DeviceInfo, Any]:
    """(identity, pyopencl device or None when given a bare DeviceInfo)."""
    from feinsum.devices import DeviceInfo, device_info, get_device

    if isinstance(device, DeviceInfo):
        return device, None
    dev = get_device(device)
    info = _DEVICE_INFO.get(dev)
    if info is None:
        info = _DEVICE_INFO[dev] = device_info(dev)
    return info, dev


def _cl_device(info: DeviceInfo) -> Any:
    from feinsum.devices import all_devices, device_info
    from feinsum.errors import DeviceError

    for d, why in all_devices():
        if why is None and device_info(d).key == info.key:
            return d
    raise DeviceError(f"tuning needs the device {info.name!r}, which is not present here")


def _database(db: Any) -> Database | None:
    from feinsum.database.resolve import optional_database

    return optional_database(db)


# }}}


# {{{ the cache


_CACHE: collections.OrderedDict[tuple[Any, ...], tuple[Any, HookReport]] = (
    collections.OrderedDict())
_CACHE_LOCK = threading.Lock()


def program_key(t_unit: lp.TranslationUnit) -> str:
    """A structural hash of *t_unit* (loopy's persistent hash): equal programs built
    twice have the same key."""
    from loopy.tools import LoopyKeyBuilder

    return str(LoopyKeyBuilder()(t_unit))


def clear_cache() -> None:
    """Forget every program the hook has seen in this process."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _cache_get(key: tuple[Any, ...]) -> tuple[Any, HookReport] | None:
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
        return hit


def _cache_put(key: tuple[Any, ...], value: tuple[Any, HookReport]) -> None:
    with _CACHE_LOCK:
        _CACHE[key] = value
        _CACHE.move_to_end(key)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)


# }}}


# {{{ one statement group


class _Run:
    """One uncached call: the state shared by the groups of the program."""

    def __init__(self, info: DeviceInfo, dev: Any, db: Database | None, opts: _Options,
                 recipe_path: Any) -> None:
        from feinsum.measurement import UNTRANSFORMED
        from feinsum.recipes import recipes
        from feinsum.tuning.codecheck import CurrentRecipes

        self.info, self.dev, self.db, self.opts = info, dev, db, opts
        self.recipes: list[Recipe] = recipes(recipe_path)
        self.by_name = {r.name: r for r in self.recipes}
        # records of older recipe versions are revalidated before they are replayed
        self.versions = CurrentRecipes(self.recipes)
        self.untransformed = UNTRANSFORMED
        self.tuned = False

    def best(self, e: BatchedEinsum) -> Answer:
        from feinsum.canonical import canonical_key, canonical_lengths
        from feinsum.database import Answer

        if self.db is None:
            return Answer("default", None, canonical_key(e), dict(canonical_lengths(e)))
        return self.db.best(e, self.info, recipe_versions=self.versions)

    def group(self, t_unit: Any, m: Match) -> tuple[Any, GroupReport]:
        e = m.einsum
        fixed = {k: v for k, v in self.opts.lengths if k in e.length_symbols}
        e_at = e.with_lengths(fixed) if fixed else e
        base = GroupReport(
            kernel=m.kernel_name, insn_ids=m.all_insn_ids,
            outputs=tuple(o for row in m.outputs for o in row), einsum=str(e),
            canonical_key=m.canonical_key, action="skipped", rung="default")
        answer = self.best(e_at)
        action = "replayed"
        notes: list[str] = []
        if answer.is_default:
            if self.opts.on_miss == "skip":
                return t_unit, replace(base, note="no record (on_miss='skip')")
            if self.opts.on_miss == "error":
                dev = self.info.name
                raise MissingRecordError(
                    f"no record for {e} ({m.canonical_key}) in kernel {m.kernel_name!r} on "
                    f"{dev!r}: tune it (`feinsum tune --kernel ...`, or on_miss='tune') or "
                    "pass on_miss='default'")
            if self.opts.on_miss == "tune":
                answer, note, tuned_here = self.tune(e_at, m.canonical_key)
                notes.append(note)
                action = "tuned" if tuned_here else "replayed"
        rec = answer.record
        if not answer.is_default and rec is not None:
            info: dict[str, Any] = {"rung": answer.rung, "recipe": rec.recipe_name,
                    "recipe_version": rec.recipe_version, "params": dict(rec.params),
                    "expected_gflops": rec.gflops, "record_id": rec.uid,
                    "record_lengths": dict(rec.lengths)}
            if rec.recipe_name == self.untransformed:
                return t_unit, replace(base, action="untransformed",
                                       note="; ".join(n for n in notes if n), **info)
            recipe = self.by_name.get(rec.recipe_name)
            if recipe is None:
                notes.append(f"the record's recipe {rec.recipe_name!r} is not available")
            else:
                try:
                    new = _apply(t_unit, m, recipe, rec.params, self.info)
                    return new, replace(base, action=action,  # type: ignore[arg-type]
                                        note="; ".join(n for n in notes if n), **info)
                except (RecipeError, EinsumMatchError) as exc:
                    notes.append(f"replaying {rec.recipe_name} {dict(rec.params)} failed: "
                                 f"{exc}")
        return self.default(t_unit, m, base, notes)

    def default(self, t_unit: Any, m: Match, base: GroupReport, notes: list[str]
                ) -> tuple[Any, GroupReport]:
        from feinsum.hook.choice import default_choices

        choices, why = default_choices(m.canonical, self.info, self.recipes, self.opts.prefer)
        if not choices:
            notes.append(f"no recipe applies ({why})")
            return t_unit, replace(base, note="; ".join(n for n in notes if n))
        for ch in choices:
            try:
                new = _apply(t_unit, m, ch.recipe, ch.params, self.info)
            except (RecipeError, EinsumMatchError) as exc:
                notes.append(f"default of {ch.recipe.name} failed: {exc}")
                continue
            # a default was never measured: make sure loopy can schedule what it made
            problem = _schedule_problem(new, m.kernel_name)
            if problem is not None:
                notes.append(f"default of {ch.recipe.name} does not schedule: {problem}")
                continue
            return new, replace(base, action="default", recipe=ch.recipe.name,
                                recipe_version=ch.recipe.version, params=ch.params,
                                note="; ".join(n for n in notes if n))
        return t_unit, replace(base, action="failed", note="; ".join(notes))

    def tune(self, e: BatchedEinsum, key: str) -> tuple[Answer, str, bool]:
        """Tune *e* unless another process does: the answer afterwards, a note, and whether
        this process tuned."""
        from feinsum.hook.locks import TuningLock, lock_directory

        if self.db is None:
            return self.best(e), "no database to record tuning in: used the default", False
        if e.length_symbols:
            return self.best(e), (f"tuning needs the lengths of {', '.join(e.length_symbols)}"
                                  " (pass lengths={...}): used the default"), False
        lock = TuningLock(lock_directory(self.db), key, self.info.key)
        if not lock.acquire(wait=False):
            if self.opts.on_busy == "wait" and lock.acquire(
                    wait=True, timeout=self.opts.wait_timeout):
                lock.release()
                return self.best(e), "waited for another process to tune it", False
            return self.best(e), "another process is tuning it: used the default", False
        try:
            again = self.best(e)
            if not again.is_default:
                return again, "tuned by another process", False
            from feinsum.tuning import autotune

            dev = self.dev if self.dev is not None else _cl_device(self.info)
            autotune(e, device=dev, db=self.db, budget=self.opts.budget,
                     time_limit=self.opts.time_limit, progress=False, peers=False)
            self.tuned = True
            return self.best(e), "", True
        finally:
            lock.release()


def _schedule_problem(t_unit: Any, name: str) -> str | None:
    """Why loopy cannot schedule kernel *name* (None if it can, or if the program cannot be
    type-inferred yet, in which case its compiler will tell)."""
    import loopy as lp
    from loopy.schedule import generate_loop_schedules

    try:
        t = lp.preprocess_program(lp.infer_unknown_types(t_unit))
        knl = t[name]
    except Exception:  # not complete enough to check here
        return None
    try:
        from loopy.check import pre_schedule_checks

        pre_schedule_checks(t)
        next(iter(generate_loop_schedules(knl, t.callables_table,
                                          debug_args={"interactive": False})))
    except Exception as exc:  # any loopy failure means: not usable
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    return None


def _apply(t_unit: Any, m: Match, recipe: Recipe, params: Mapping[str, Any],
           info: DeviceInfo) -> Any:
    from feinsum.matching import apply_transform, find_einsums

    try:
        return apply_transform(t_unit, m, recipe, params, device=info)
    except EinsumMatchError:
        # an earlier replay in this kernel made the match stale: match again
        fresh = [x for x in find_einsums(t_unit, kernel_name=m.kernel_name)
                 if x.all_insn_ids == m.all_insn_ids]
        if not fresh:
            raise
        return apply_transform(t_unit, fresh[0], recipe, params, device=info)


# }}}


def kernel_names(t_unit: Any) -> list[str]:
    """The names of the loopy kernels of *t_unit* (not other callables)."""
    from loopy.kernel.function_interface import CallableKernel

    return [name for name, c in t_unit.callables_table.items()
            if isinstance(c, CallableKernel)]


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
) -> tuple[lp.TranslationUnit, HookReport]:
    """Transform every batched einsum and kernel reduction of every kernel of *t_unit* by
    the best configuration the timing database records for it on *device*.

    Per statement group (:func:`feinsum.find_einsums`), :func:`feinsum.best` walks the
    fallback chain (exact -> nearest lengths -> same vendor) among records of the current
    recipe versions (a record of an older version is revalidated first: used when its
    generated code is unchanged, retired otherwise), and the record's configuration is
    replayed
    (:func:`feinsum.apply_transform`). Other statements and kernels are left as they are.

    :arg device: a ``pyopencl.Device``, a device string, a
        :class:`~feinsum.devices.DeviceInfo` or None (the default device).
    :arg db: a :class:`~feinsum.database.Database`, a path or URL, None (the default
        database) or False (no database: recipe defaults only).
    :arg on_miss: when no record exists: ``"default"`` applies the heuristic default of the
        first applicable recipe in :data:`feinsum.hook.PREFERENCE` order, ``"tune"`` tunes
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
        database revision (a call then costs a hash and one revision read).

    Returns the new translation unit and a :class:`~feinsum.hook.HookReport`.
    """
    t0 = time.perf_counter()
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
    opts = _Options(on_miss, on_busy, budget, time_limit,
                    tuple(sorted((str(k), int(v)) for k, v in (lengths or {}).items())),
                    None if prefer is None else tuple(prefer), wait_timeout)
    info, dev = _device(device)
    database = _database(db)
    where = None if database is None else database.where
    revision = None if database is None else database.revision()
    key = (program_key(t_unit), info.key, where, revision, opts, str(recipe_path))
    if cache:
        hit = _cache_get(key)
        if hit is not None:
            return hit[0], replace(hit[1], cached=True, seconds=time.perf_counter() - t0)

    run = _Run(info, dev, database, opts, recipe_path)
    names = kernel_names(t_unit)
    groups: list[GroupReport] = []
    from feinsum.matching import find_einsums

    for name in names:
        for m in find_einsums(t_unit, kernel_name=name):
            t_unit_new, g = run.group(t_unit, m)
            t_unit = t_unit_new
            groups.append(g)
    report = HookReport(device=info.name, database=where, groups=tuple(groups),
                        seconds=time.perf_counter() - t0, kernels=tuple(names))
    if cache:
        _cache_put(key, (t_unit, report))
        if run.tuned and database is not None:
            _cache_put((*key[:3], database.revision(), *key[4:]), (t_unit, report))
    return t_unit, report
