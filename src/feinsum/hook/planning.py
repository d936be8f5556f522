"""What the hook does with one matched einsum: the record to replay, else a recipe's default,
as a transformed kernel ready to assemble (:class:`~feinsum.matching.assemble.Part`).

Per group, in order (``docs/compiler-guide.rst``, "The hook"): the best record of the
fallback chain, replayed; else (``on_miss``) tuning it now, skipping it, an error, or the
heuristic default of each applicable recipe in preference order. A candidate is taken
only if loopy can schedule the kernel it makes and, on a device that cannot build vector
code (:func:`feinsum.devices.opencl.vector_problem`), only if that kernel is scalar. The
transformed kernels (canonical names) are cached per process: a program that holds the
same einsum many times, or is rebuilt, costs one recipe application per einsum shape.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from feinsum.errors import EinsumMatchError, MissingRecordError, RecipeError
from feinsum.hook.report import Clock, GroupReport

if TYPE_CHECKING:
    from feinsum.database import Answer, Database
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.matching import Match
    from feinsum.matching.assemble import Part
    from feinsum.matching.fusion import Fusion
    from feinsum.recipes import Recipe
    from feinsum.spec.model import BatchedEinsum

#: Transformed einsums remembered per process (least recently used dropped first).
PART_CACHE_SIZE = 1024


@dataclass(frozen=True)
class Options:
    """The hook's options (see :func:`feinsum.transform_program`)."""

    on_miss: str
    on_busy: str
    budget: int | None
    time_limit: float | None
    lengths: tuple[tuple[str, int], ...]
    prefer: tuple[str, ...] | None
    wait_timeout: float | None

    def __post_init__(self) -> None:
        from feinsum import checks

        checks.optional_count("budget", self.budget)
        checks.optional_seconds("time_limit", self.time_limit)
        checks.optional_seconds("wait_timeout", self.wait_timeout, zero=True)
        checks.lengths("lengths", dict(self.lengths))


@dataclass(frozen=True)
class Plan:
    """The decision for one group: the part to put in place (None: leave the statements
    as they are) and what the report says; *plain*: the part without the fused
    expressions, when *part* has them (what assembly falls back to)."""

    part: Part | None
    report: GroupReport
    plain: Part | None = None


# {{{ the cache of transformed einsums


_PARTS: collections.OrderedDict[tuple[Any, ...], Part | str] = collections.OrderedDict()
_PARTS_LOCK = threading.Lock()


def clear_parts() -> None:
    """Forget every transformed einsum built in this process."""
    with _PARTS_LOCK:
        _PARTS.clear()


def _cached(key: tuple[Any, ...]) -> Part | str | None:
    with _PARTS_LOCK:
        hit = _PARTS.get(key)
        if hit is not None:
            _PARTS.move_to_end(key)
        return hit


def _remember(key: tuple[Any, ...], value: Part | str) -> None:
    with _PARTS_LOCK:
        _PARTS[key] = value
        while len(_PARTS) > PART_CACHE_SIZE:
            _PARTS.popitem(last=False)


# }}}


class Planner:
    """The state one :func:`feinsum.transform_program` call shares between its groups.

    *recipe_device* is what recipes see: the device, or, where the probe found that it
    cannot build vector code, the device with vector widths of 1 (*vector_problem* says
    why)."""

    def __init__(self, info: DeviceInfo, dev: Any, db: Any, opts: Options,
                 recipe_path: Any, vector_problem: str | None = None,
                 clock: Clock | None = None, deadline: float | None = None) -> None:
        from feinsum.devices.opencl import scalar_view

        self.info, self.dev, self.opts = info, dev, opts
        self._db_arg, self._db_open = db, db is False
        self._db: Database | None = None
        #: the database's revision when it was opened (None: never opened)
        self.revision: int | None = None
        self.recipe_path = recipe_path
        self.vector_problem = vector_problem
        self.recipe_device = info if vector_problem is None else scalar_view(info)
        self.scalar_device = scalar_view(info)
        self._recipes: list[Recipe] | None = None
        self._versions: Any = None
        self.tuned = False
        self.clock = Clock() if clock is None else clock
        #: time.perf_counter() after which groups are left to the default schedule
        self.deadline = deadline
        #: per einsum looked up: (the einsum at its lengths, the chosen record's uid or None)
        self.decisions: list[tuple[BatchedEinsum, str | None]] = []
        #: per group (its statements): its flops (inf: not known before the call)
        self.work: dict[tuple[str, ...], float] = {}

    # {{{ what is opened on first use (a program without einsums needs none of it)

    @property
    def db(self) -> Database | None:
        """The database (None: none), opened on first use; its revision then is kept."""
        if not self._db_open:
            self._db_open = True
            with self.clock("setup"):
                from feinsum.database.resolve import optional_database

                self._db = optional_database(self._db_arg)
                self.revision = None if self._db is None else self._db.revision()
        return self._db

    @property
    def recipes(self) -> list[Recipe]:
        if self._recipes is None:
            with self.clock("setup"):
                from feinsum.recipes import recipes

                self._recipes = recipes(self.recipe_path)
        return self._recipes

    @property
    def by_name(self) -> dict[str, Recipe]:
        return {r.name: r for r in self.recipes}

    @property
    def versions(self) -> Any:
        """The current recipe versions (records of older ones are revalidated before they
        are replayed); computed on first use: a program whose einsums are all left to the
        default schedule never needs them."""
        if self._versions is None:
            from feinsum.tuning.codecheck import CurrentRecipes

            self._versions = CurrentRecipes(self.recipes)
        return self._versions

    # }}}

    def best(self, e: BatchedEinsum) -> Answer:
        from feinsum.database import Answer
        from feinsum.spec.canonical import canonical_key, canonical_lengths

        if self.db is None:
            return Answer("default", None, canonical_key(e), dict(canonical_lengths(e)))
        with self.clock("lookup"):
            return self.db.best(e, self.info, recipe_versions=self.versions)

    def device_for(self, e: BatchedEinsum) -> DeviceInfo:
        """What recipes see for *e*: the device, or its scalar view where vector code
        cannot be built or the einsum is complex (OpenCL has no complex vector types)."""
        if any(a.dtype.kind == "c" for a in e.arrays):
            return self.scalar_device
        return self.recipe_device

    # {{{ what is not planned

    def leave(self, m: Match) -> str | None:
        """Why group *m* is left to the default schedule without a look-up (None: it is
        planned): too little work, or the time budget spent (:mod:`feinsum.hook.payoff`)."""
        import time

        from feinsum.hook.payoff import einsum_flops, serial_terms, too_little_work

        if self.deadline is not None and time.perf_counter() > self.deadline:
            return ("the transformation's time budget is spent: left to the default "
                    "schedule")
        flops = einsum_flops(m, self.opts.lengths)
        self.work[m.all_insn_ids] = float("inf") if flops is None else flops
        return too_little_work(flops, serial_terms(m, self.opts.lengths), self.info.is_cpu)

    def left(self, m: Match, why: str) -> Plan:
        """The plan of a group left to the default schedule because *why*."""
        return Plan(None, replace(_base(m), note=why))

    # }}}

    # {{{ one candidate

    def part(self, m: Match, recipe: Recipe, params: Mapping[str, Any]) -> Part | str:
        """The transformed einsum for one configuration, or why there is none."""
        key = self._key(m, recipe, params)
        hit = _cached(key)
        if hit is None:
            with self.clock("transformation"):
                hit = self._build(m, recipe, params)
            _remember(key, hit)
        return hit if isinstance(hit, str) else replace(hit, match=m)

    def _key(self, m: Match, recipe: Recipe, params: Mapping[str, Any]) -> tuple[Any, ...]:
        from feinsum.toolbox.parameters import canonical_json

        return (m.canonical_key, tuple(sorted(m.canonical_lengths.items())), recipe.name,
                recipe.version, canonical_json(dict(params)), self.info.key,
                self.vector_problem is None)

    def fused(self, part: Part, fusion: Fusion, recipe: Recipe, params: Mapping[str, Any]
              ) -> Part | str:
        """*part* with *fusion* in its kernel, or why its recipe's kernel does not allow
        it (:func:`feinsum.matching.fuse.fuse_part`); cached per fused einsum."""
        from feinsum.matching.fuse import fuse_part

        spec = fusion.spec
        if spec is None:
            return "nothing to fuse"
        layouts = tuple((k, str(getattr(d, "shape", None)),
                         str([getattr(t, "stride", None) for t in getattr(d, "dim_tags", None)
                              or ()])) for k, d in sorted(fusion.declarations.items()))
        key = (*self._key(part.match, recipe, params), spec.key, layouts)
        hit = _cached(key)
        if hit is None:
            with self.clock("transformation"):
                hit = fuse_part(part, fusion)
            _remember(key, hit if isinstance(hit, str) else replace(hit, fusion=None))
        return hit if isinstance(hit, str) else replace(hit, match=part.match, fusion=fusion)

    def _build(self, m: Match, recipe: Recipe, params: Mapping[str, Any]) -> Part | str:
        from feinsum.matching.replay import transformed_einsum

        try:
            part = transformed_einsum(m, recipe, params, self.device_for(m.canonical))
        except (RecipeError, EinsumMatchError) as exc:
            return str(exc)
        except Exception as exc:  # a recipe failing inside loopy: this candidate is out
            return f"{type(exc).__name__}: {exc}"[:300]
        if part.problem is not None:
            return f"loopy cannot schedule it: {part.problem}"
        from feinsum.devices.opencl import has_vector_code
        from feinsum.hook.payoff import part_too_large

        too_large = part_too_large(part.kernel)
        if too_large is not None:
            return too_large
        if self.vector_problem is not None and has_vector_code(part.kernel):
            return (f"it uses vector types, which the device cannot build "
                    f"({self.vector_problem})")
        if (any(a.dtype.kind == "c" for a in m.canonical.arrays)
                and has_vector_code(part.kernel)):
            return "it uses vector types of complex numbers, which OpenCL does not have"
        return part

    # }}}

    def plan(self, m: Match, fusion: Fusion | None = None) -> Plan:
        """Decide what to do with group *m* (see the module docstring), with the elementwise
        work *fusion* found fused into its kernel where the recipe's kernel allows."""
        plan = self._plan(m)
        if fusion is None:
            return plan
        notes = list(fusion.notes)
        if fusion.spec is None or plan.part is None or plan.report.recipe is None:
            return replace(plan, report=replace(plan.report, not_fused=tuple(notes)))
        from feinsum.matching.fusion_cost import worthwhile

        fusion, costly = worthwhile(plan.part.kernel, fusion, m.canonical)
        notes += costly
        if fusion.spec is None:
            return replace(plan, report=replace(plan.report, not_fused=tuple(notes)))
        recipe = self.by_name[plan.report.recipe]
        fused = self.fused(plan.part, fusion, recipe, plan.report.params or {})
        if isinstance(fused, str):
            names = {**m.from_canonical, **fusion.names}
            notes.append(f"{', '.join(fusion.spec.describe(names))}: not fused "
                         f"({plan.report.recipe}: {fused})")
            return replace(plan, report=replace(plan.report, not_fused=tuple(notes)))
        described = fusion.spec.describe({**m.from_canonical, **fusion.names})
        return Plan(fused, replace(plan.report, fused=described, not_fused=tuple(notes)),
                    plain=plan.part)

    def _plan(self, m: Match) -> Plan:
        e = m.einsum
        fixed = {k: v for k, v in self.opts.lengths if k in e.length_symbols}
        e_at = e.with_lengths(fixed) if fixed else e
        base = _base(m)
        answer = self.best(e_at)
        action = "replayed"
        notes: list[str] = []
        if answer.is_default:
            if self.opts.on_miss == "skip":
                return Plan(None, replace(base, note="no record (on_miss='skip')"))
            if self.opts.on_miss == "error":
                raise MissingRecordError(
                    f"no record for {e} ({m.canonical_key}) in kernel {m.kernel_name!r} on "
                    f"{self.info.name!r}: tune it (`feinsum tune --kernel ...`, or "
                    "on_miss='tune') or pass on_miss='default'")
            if self.opts.on_miss == "tune":
                from feinsum.database import einsum_origin

                origin = einsum_origin(e, fixed, kernel=m.kernel_name,
                                       statements=m.all_insn_ids)
                with self.clock("lookup"):
                    answer, note, tuned_here = self.tune(e_at, m.canonical_key, origin)
                notes.append(note)
                action = "tuned" if tuned_here else "replayed"
        rec = answer.record
        self.decisions.append((e_at, None if rec is None else rec.uid))
        if not answer.is_default and rec is not None:
            info: dict[str, Any] = {
                "rung": answer.rung, "recipe": rec.recipe_name,
                "recipe_version": rec.recipe_version, "params": dict(rec.params),
                "expected_gflops": rec.gflops, "record_id": rec.uid,
                "record_lengths": dict(rec.lengths)}
            from feinsum.timing.measurement import UNTRANSFORMED

            if rec.recipe_name == UNTRANSFORMED:
                return Plan(None, replace(base, action="untransformed", note=_join(notes),
                                          **info))
            recipe = self.by_name.get(rec.recipe_name)
            if recipe is None:
                notes.append(f"the record's recipe {rec.recipe_name!r} is not available")
            else:
                part = self.part(m, recipe, rec.params)
                if not isinstance(part, str):
                    return Plan(part, replace(base, action=action,  # type: ignore[arg-type]
                                              note=_join(notes), **info))
                notes.append(f"replaying {rec.recipe_name} {dict(rec.params)} failed: {part}")
        return self.default(m, base, notes)

    def default(self, m: Match, base: GroupReport, notes: list[str]) -> Plan:
        from feinsum.hook.choice import default_choices

        choices, why = default_choices(m.canonical, self.device_for(m.canonical),
                                       self.recipes, self.opts.prefer, m.canonical_lengths)
        if not choices:
            notes.append(f"no recipe applies ({why})")
            return Plan(None, replace(base, note=_join(notes)))
        for ch in choices:
            part = self.part(m, ch.recipe, ch.params)
            if isinstance(part, str):
                notes.append(f"default of {ch.recipe.name} failed: {part}")
                continue
            return Plan(part, replace(base, action="default", recipe=ch.recipe.name,
                                      recipe_version=ch.recipe.version, params=ch.params,
                                      note=_join(notes)))
        return Plan(None, replace(base, action="failed", note=_join(notes)))

    def tune(self, e: BatchedEinsum, key: str, origin: Mapping[str, Any]
             ) -> tuple[Answer, str, bool]:
        """Tune *e* (found where *origin* says) unless another process does: the answer
        afterwards, a note, and whether this process tuned."""
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
                     time_limit=self.opts.time_limit, progress=False, peers=False,
                     origin=origin)
            self.tuned = True
            return self.best(e), "", True
        finally:
            lock.release()


def _base(m: Match) -> GroupReport:
    return GroupReport(
        kernel=m.kernel_name, insn_ids=m.all_insn_ids,
        outputs=tuple(o for row in m.outputs for o in row), einsum=str(m.einsum),
        canonical_key=m.canonical_key, action="skipped", rung="default")


def _cl_device(info: DeviceInfo) -> Any:
    from feinsum.devices.opencl import all_devices, device_info
    from feinsum.errors import DeviceError

    for d, why in all_devices():
        if why is None and device_info(d).key == info.key:
            return d
    raise DeviceError(f"tuning needs the device {info.name!r}, which is not present here")


def _join(notes: list[str]) -> str:
    return "; ".join(n for n in notes if n)


# vim: foldmethod=marker
