"""``feinsum.transform_program``: every einsum of a loopy program, transformed by the best
record of the timing database (or a recipe's default), with a report of what was done."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from feinsum.errors import EinsumMatchError, FeinsumError
from feinsum.hook.planning import Options
from feinsum.hook.report import GroupReport, HookReport, KernelReport

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.database import Database
    from feinsum.devices.opencl import DeviceInfo

ON_MISS = ("default", "tune", "skip", "error")
ON_BUSY = ("default", "wait")
#: Programs remembered per process (least recently used dropped first).
CACHE_SIZE = 256


# {{{ device and database


_DEVICE_INFO: dict[Any, DeviceInfo] = {}


def _device(device: Any) -> tuple[DeviceInfo, Any, str | None]:
    """(identity, pyopencl device or None when given a bare DeviceInfo, why the device
    cannot build vector code or None). A device that cannot build even scalar code
    raises :class:`~feinsum.DeviceError`."""
    from feinsum.devices.opencl import DeviceInfo, device_info, get_device, vector_problem

    if isinstance(device, DeviceInfo):
        return device, None, None
    dev = get_device(device)
    info = _DEVICE_INFO.get(dev)
    if info is None:
        info = _DEVICE_INFO[dev] = device_info(dev)
    return info, dev, vector_problem(dev)


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
    from feinsum.hook.planning import clear_parts

    with _CACHE_LOCK:
        _CACHE.clear()
    clear_parts()


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


def _checked(original: Any, t_unit: Any, groups: dict[str, list[GroupReport]],
             kernels: dict[str, KernelReport]) -> Any:
    """The transformed program, once loopy can schedule it; a changed kernel it cannot
    schedule is put back as it was (its reports say why)."""
    from feinsum.hook.kernels import reverted, schedule_problem

    changed = [n for n, k in kernels.items() if k.action in ("transformed", "scheduled")]
    if not changed:
        return original
    problem = schedule_problem(t_unit, changed)
    if problem is None:
        return t_unit
    for name in changed:
        own = schedule_problem(original.with_kernel(t_unit[name]), [name])
        if own is not None:
            groups[name], kernels[name] = reverted(groups[name], kernels[name], own)
            t_unit = t_unit.with_kernel(original[name])
    changed = [n for n, k in kernels.items() if k.action in ("transformed", "scheduled")]
    problem = schedule_problem(t_unit, changed) if changed else None
    if problem is None:
        return t_unit
    for name in changed:  # only together do they fail: keep none
        groups[name], kernels[name] = reverted(groups[name], kernels[name], problem)
    return original


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
    schedule_all: bool = False,
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
    scheduled too). loopy must schedule every changed kernel (one it cannot is kept as
    it was); the report says what was done to each group and kernel.

    :arg device: a ``pyopencl.Device``, a device string, a
        :class:`~feinsum.devices.info.DeviceInfo` or None (the default device). A device is
        probed first (:func:`feinsum.devices.opencl.vector_problem`): one that cannot build
        vector code gets scalar code only; one that cannot build a kernel raises
        :class:`~feinsum.DeviceError`.
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
    :arg schedule_all: give kernels without einsums the default schedule too.

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
    opts = Options(on_miss, on_busy, budget, time_limit,
                   tuple(sorted((str(k), int(v)) for k, v in (lengths or {}).items())),
                   None if prefer is None else tuple(prefer), wait_timeout)
    info, dev, vector_problem = _device(device)
    database = _database(db)
    where = None if database is None else database.where
    revision = None if database is None else database.revision()
    key = (program_key(t_unit), info.key, vector_problem, where, revision, opts,
           str(recipe_path), schedule_all)
    if cache:
        hit = _cache_get(key)
        if hit is not None:
            return hit[0], replace(hit[1], cached=True, seconds=time.perf_counter() - t0)

    from feinsum.hook.kernels import transform_kernel
    from feinsum.hook.planning import Planner
    from feinsum.hook.schedule import default_schedule

    planner = Planner(info, dev, database, opts, recipe_path, vector_problem)
    schedule = default_schedule(planner.recipe_device)
    names = kernel_names(t_unit)
    original = t_unit
    groups: dict[str, list[GroupReport]] = {}
    kernels: dict[str, KernelReport] = {}
    for name in names:
        t_unit, groups[name], kernels[name] = transform_kernel(
            t_unit, name, planner, schedule, schedule_all)
    t_unit = _checked(original, t_unit, groups, kernels)
    note = "" if vector_problem is None else (
        f"the device cannot build vector code ({vector_problem}): scalar code only")
    from feinsum.hook.launches import LazyLaunches

    report = HookReport(device=info.name, database=where,
                        groups=tuple(g for name in names for g in groups[name]),
                        seconds=time.perf_counter() - t0, kernels=tuple(names),
                        kernel_reports=tuple(kernels[name] for name in names), note=note,
                        programs=LazyLaunches(original, t_unit))
    if cache:
        _cache_put(key, (t_unit, report))
        if planner.tuned and database is not None:
            _cache_put((*key[:4], database.revision(), *key[5:]), (t_unit, report))
    return t_unit, report
