"""``feinsum.compile``: a batched einsum or kernel reduction as a Python callable.

``f = feinsum.compile(spec)`` returns a :class:`CompiledEinsum`. Calling it with the spec's
arrays (keyword arguments by the spec's array names, or positionally in the order of
``spec.arrays``) runs the fastest configuration the timing database knows for the spec on
the device (down :func:`feinsum.database.best`'s fallback chain; with no record, the
heuristic default of the first applicable recipe in the hook's preference order,
:data:`feinsum.hook.PREFERENCE`) and returns the outputs:

* one row: the output array; several rows: a tuple with one entry per row, in the spec's
  row order;
* ``argmin``/``argmax``: each row's entry is a ``(value, index)`` pair (index int32);
* numpy arrays in, numpy arrays out; as soon as one input is a ``pyopencl.array.Array``,
  every output is one (on that array's queue, unless ``queue=`` is given);
* length symbols take their values from the arrays' shapes: one build serves every size.

Block-sparse specs take KeOps' ranges once per call, ``f(..., ranges=ranges_ij)`` (the
6-tuple of :mod:`feinsum.reductions.ranges`, or its first three arrays; ``int32`` or ``int64``): the
callable checks them, casts them to ``int32``, computes what the recipe needs on the
host (launch tables) and keeps all of that, keyed by the ranges' content, for the next
call. The first half of the 6-tuple describes the *output* clusters; for a reduction
over KeOps' ``i`` axis pass :func:`feinsum.reductions.ranges.swap_axes` of it.

A configuration that fails to build or run (a record, or a default) is dropped for the
next default in the same order, at worst the untransformed reference kernel (the reason
is in :attr:`CompiledEinsum.last_choice`'s ``note``); one forced by ``recipe=`` fails
with :class:`~feinsum.RecipeFailure`.

Each distinct set of lengths picks its configuration once (one database query); the
loopy executors are cached per process by (canonical key, device, recipe, recipe
version, parameters, context), so isomorphic specs share one build. Inputs that do not
fit the spec raise :class:`~feinsum.EvaluationError` naming the array and the fix.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import feinsum.reductions  # noqa: F401  (registers the block-sparse lowering)
from feinsum.direct.inputs import (
    bind_arrays,
    check_array,
    int32_ranges,
    is_cl_array,
    range_arrays,
)
from feinsum.errors import (
    DeviceError,
    EvaluationError,
    FeinsumError,
    InvalidConfigurationError,
    RecipeError,
    RecipeFailure,
)
from feinsum.spec.model import INDEX_REDUCTIONS, BatchedEinsum

if TYPE_CHECKING:
    from feinsum.database import Database
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.recipes import Recipe
    from feinsum.tuning.codecheck import CurrentRecipes

#: Executors kept per process (least recently used dropped first).
EXECUTOR_CACHE_SIZE = 64
#: Prepared range inputs kept per compiled einsum.
RANGES_CACHE_SIZE = 16
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Choice:
    """The configuration a :class:`CompiledEinsum` runs at some lengths.

    ``rung``: :func:`feinsum.database.best`'s rung of the record (``"exact"``,
    ``"nearest-lengths"``, ``"same-vendor"``), ``"default"`` (a recipe's heuristic
    default) or ``"given"`` (``recipe=``/``params=`` passed to :func:`compile`).
    ``recipe`` is None for the untransformed reference kernel (when no recipe applies,
    or a record says it is fastest)."""

    rung: str
    recipe: str | None
    recipe_version: str | None
    params: Mapping[str, Any] = field(default_factory=dict)
    record_id: str | None = None
    note: str = ""


# {{{ process-wide caches: executors; the database


_LOCK = threading.RLock()
_EXECUTORS: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
_STATS = {"builds": 0, "hits": 0, "prepares": 0}


def cache_info() -> dict[str, int]:
    """Counters of the process-wide executor cache: ``builds`` (executors made),
    ``hits`` (calls served by a cached executor), ``prepares`` (host-side range
    preparations) and ``executors`` (executors held now)."""
    with _LOCK:
        return {**_STATS, "executors": len(_EXECUTORS)}


def clear_cache() -> None:
    """Forget every cached executor (compiled einsums keep their own range caches)."""
    with _LOCK:
        _EXECUTORS.clear()


def _database(db: Any) -> Database | None:
    from feinsum.database.resolve import optional_database

    return optional_database(db)


def _device(device: Any) -> tuple[Any, DeviceInfo, str | None]:
    """(pyopencl device, its identity as recipes see it, why it cannot build vector code
    or None)."""
    from feinsum.devices.opencl import (
        DeviceInfo,
        all_devices,
        device_info,
        get_device,
        scalar_view,
        vector_problem,
    )

    if isinstance(device, DeviceInfo):
        for d, why in all_devices():
            if why is None and device_info(d).key == device.key:
                return d, device, None
        raise DeviceError(f"the device {device.name!r} is not present here; pass one that "
                          "`feinsum devices` lists")
    dev = get_device(device)
    problem = vector_problem(dev)
    info = device_info(dev)
    return dev, info if problem is None else scalar_view(info), problem


# }}}


class CompiledEinsum:
    """A specification compiled for one device; see :mod:`feinsum.direct.executor`.

    ``f(*arrays, ranges=None, queue=None, **named_arrays)`` returns the outputs;
    :meth:`choice` tells which configuration runs at given lengths, :attr:`last_choice`
    the one the last call ran."""

    def __init__(self, spec: BatchedEinsum, *, device: Any = None, db: Any = None,
                 recipe: str | Recipe | None = None,
                 params: Mapping[str, Any] | None = None) -> None:
        from feinsum.recipes import Recipe, get_recipe, recipes
        from feinsum.spec.canonical import (
            canonical_key,
            canonical_lengths,
            canonicalize,
            isomorphism,
        )

        if not isinstance(spec, BatchedEinsum):
            raise FeinsumError(f"feinsum.compile takes a BatchedEinsum (feinsum.einsum, "
                               f"feinsum.kernel_reduction...), got {type(spec).__name__}")
        if params is not None and recipe is None:
            raise RecipeError("params= needs recipe=: name the recipe they configure")
        self.spec = spec
        self.canonical = canonicalize(spec)
        self.canonical_key = canonical_key(spec)
        self._fixed = canonical_lengths(spec)
        iso = isomorphism(spec, self.canonical.with_lengths(self._fixed))
        self._arrays = dict(iso.arrays)       # user array name -> canonical name
        self._symbols = dict(iso.lengths)     # user length symbol -> canonical symbol
        self._rows = iso.rows                 # user row -> canonical row
        self._cl_device, self.device, self._vector_problem = _device(device)
        self._db = _database(db)
        self._recipes = {r.name: r for r in recipes()}
        from feinsum.timing.measurement import UNTRANSFORMED

        self._untransformed = recipe == UNTRANSFORMED
        if self._untransformed:
            if params:
                raise RecipeError("the untransformed kernel takes no params=")
            recipe = None
        elif isinstance(recipe, str):
            recipe = self._recipes.get(recipe) or get_recipe(recipe)
        elif recipe is not None and not isinstance(recipe, Recipe):
            raise RecipeError(f"recipe= takes a recipe name or a Recipe, got {recipe!r}")
        if recipe is not None:
            why = recipe.applies(self.canonical, self.device)
            if why is not None:
                raise RecipeError(f"recipe {recipe.name!r} does not apply to {spec} on "
                                  f"{self.device.name!r}: {why}")
            if params is not None:
                recipe.check({**recipe.default(self.canonical, self.device), **params},
                             self.canonical, self.device)
        self._recipe = recipe
        self._params = dict(params) if params is not None else None
        self._choices: dict[tuple[tuple[str, int], ...], Choice] = {}
        self._ranges: collections.OrderedDict[tuple[Any, ...], dict[str, Any]] = (
            collections.OrderedDict())
        self._queue: Any = None
        self.last_choice: Choice | None = None
        self._current: CurrentRecipes | None = None

    def __repr__(self) -> str:
        return f"<CompiledEinsum {self.spec} on {self.device.name!r}>"

    # {{{ configuration choice

    def _versions(self) -> CurrentRecipes:
        """The recipes' current versions; records of older ones are revalidated."""
        if self._current is None:
            from feinsum.tuning.codecheck import CurrentRecipes

            recipes = dict(self._recipes)
            if self._recipe is not None:
                recipes[self._recipe.name] = self._recipe
            self._current = CurrentRecipes(list(recipes.values()))
        return self._current

    def choice(self, lengths: Mapping[str, int] | None = None) -> Choice:
        """The configuration run when the spec's length symbols take *lengths*
        (``{"M": 1000, "N": 5000}``; the spec's own lengths when it has no symbols)."""
        return self._choose(self._key(dict(lengths or {})))

    def _key(self, lengths: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
        missing = [s for s in self.spec.length_symbols if s not in lengths]
        if missing:
            raise EvaluationError(f"no value for the length symbol(s) {', '.join(missing)}")
        return tuple(sorted((s, int(lengths[s])) for s in self.spec.length_symbols))

    def _choose(self, key: tuple[tuple[str, int], ...]) -> Choice:
        with _LOCK:
            hit = self._choices.get(key)
        if hit is None:
            hit = self._pick(dict(key))
            with _LOCK:
                self._choices[key] = hit
        return hit

    def _pick(self, lengths: dict[str, int]) -> Choice:
        from feinsum.timing.measurement import UNTRANSFORMED

        r = self._recipe
        if self._untransformed:
            from feinsum.timing.measurement import untransformed_version

            return Choice("given", None, untransformed_version())
        if r is not None and self._params is not None:
            params = r.check({**r.default(self.canonical, self.device,
                                          self._canonical_lengths(lengths)), **self._params},
                             self.canonical, self.device)
            return Choice("given", r.name, r.version, dict(params))
        note = ""
        if self._db is not None and self.spec.block_sparse is None:
            at = self.spec.with_lengths(lengths) if lengths else self.spec
            answer = self._db.best(at, self.device, recipe=None if r is None else r.name,
                                   recipe_versions=self._versions())
            rec = answer.record
            if rec is not None:
                if rec.recipe_name == UNTRANSFORMED:
                    return Choice(answer.rung, None, rec.recipe_version, {}, rec.uid)
                found = r if r is not None else self._recipes.get(rec.recipe_name)
                try:
                    if found is None:
                        raise RecipeError(f"recipe {rec.recipe_name!r} is not available")
                    why = found.applies(self.canonical, self.device)
                    if why is not None:
                        raise RecipeError(why)
                    params = found.check(rec.params, self.canonical, self.device)
                    return Choice(answer.rung, found.name, found.version, dict(params), rec.uid)
                except RecipeError as exc:
                    note = f"the {answer.rung} record ({rec.recipe_name}) was not usable: {exc}"
        return self._default(lengths, note)

    def _canonical_lengths(self, lengths: Mapping[str, int]) -> dict[str, int]:
        """The values of the canonical spec's length symbols when the spec's take
        *lengths*."""
        return {**{self._symbols[s]: int(v) for s, v in lengths.items()}, **self._fixed}

    def _default(self, lengths: Mapping[str, int], note: str = "",
                 skip: frozenset[str] = frozenset()) -> Choice:
        """The first applicable recipe's default at *lengths* (the hook's order), recipes
        in *skip* (failed here) left out; the untransformed kernel when none is left."""
        from feinsum.hook.choice import default_choices, ordered_recipes

        at = self._canonical_lengths(lengths)
        if self._recipe is not None:
            r = self._recipe
            return Choice("default", r.name, r.version,
                          dict(r.default(self.canonical, self.device, at)), note=note)
        candidates = [r for r in self._recipes.values() if r.name not in skip]
        choices, why = default_choices(self.canonical, self.device, candidates, lengths=at)
        if choices:
            ch = choices[0]
            return Choice("default", ch.recipe.name, ch.recipe.version, dict(ch.params),
                          note=note)
        # the hook never picks recipes with host-side inputs; a direct call prepares them
        for r in ordered_recipes(candidates):
            if r.has_prepare and r.applies(self.canonical, self.device) is None:
                return Choice("default", r.name, r.version,
                              dict(r.default(self.canonical, self.device, at)), note=note)
        note = "; ".join(n for n in (note, f"no recipe applies ({why})") if n)
        from feinsum.timing.measurement import untransformed_version

        return Choice("default", None, untransformed_version(), {}, note=note)

    def _recipe_of(self, choice: Choice) -> Recipe | None:
        if choice.recipe is None:
            return None
        if self._recipe is not None and self._recipe.name == choice.recipe:
            return self._recipe
        return self._recipes[choice.recipe]

    # }}}

    # {{{ executors

    def _executor_key(self, choice: Choice, ctx: Any) -> tuple[Any, ...]:
        from feinsum.recipes import canonical_json

        return (self.canonical_key, self.device.key, choice.recipe, choice.recipe_version,
                canonical_json(dict(choice.params)), ctx)

    def _executor(self, choice: Choice, ctx: Any) -> Any:
        import loopy as lp

        from feinsum.lowering.kernel import generate_loopy

        key = self._executor_key(choice, ctx)
        with _LOCK:
            ex = _EXECUTORS.get(key)
            if ex is not None:
                _EXECUTORS.move_to_end(key)
                _STATS["hits"] += 1
                return ex
        t_unit = generate_loopy(self.canonical)
        recipe = self._recipe_of(choice)
        if recipe is not None:
            t_unit = recipe.apply(t_unit, choice.params, self.canonical, self.device)
        if self._vector_problem is not None:
            from feinsum.devices.opencl import has_vector_code
            from feinsum.lowering.kernel import KERNEL_NAME

            if has_vector_code(t_unit[KERNEL_NAME]):
                raise RecipeFailure(
                    f"{choice.recipe} {dict(choice.params)} uses vector types, which "
                    f"{self.device.name!r} cannot build ({self._vector_problem})")
        ex = lp.set_options(t_unit, return_dict=True).executor(ctx)
        with _LOCK:
            _STATS["builds"] += 1
            _EXECUTORS[key] = ex
            while len(_EXECUTORS) > EXECUTOR_CACHE_SIZE:
                _EXECUTORS.popitem(last=False)
        return ex

    # }}}

    # {{{ range inputs

    def _range_inputs(self, ranges: Any, m: int, n: int, choice: Choice, ctx: Any,
                      queue: Any, canonical_arrays: dict[str, Any]) -> dict[str, Any]:
        """The ranges as int32 device arrays, their lengths and the recipe's prepared
        inputs, cached by content."""
        import pyopencl.array as cla

        host, digest = range_arrays(ranges)
        from feinsum.recipes import canonical_json

        key = (digest, m, n, choice.recipe, canonical_json(dict(choice.params)),
               ctx)
        with _LOCK:
            hit = self._ranges.get(key)
            if hit is not None:
                self._ranges.move_to_end(key)
                return hit
        ri, sl, rr = int32_ranges(host, m, n)
        extra: dict[str, Any] = {"nranges_i": np.int32(ri.shape[0]),
                                 "nredranges_j": np.int32(rr.shape[0])}
        recipe = self._recipe_of(choice)
        if recipe is not None and recipe.has_prepare:
            try:
                prepared = recipe.prepare(self.canonical, {**canonical_arrays, "ranges_i": ri,
                                                           "slices_i": sl, "redranges_j": rr},
                                          choice.params)
            except RecipeFailure as exc:
                raise EvaluationError(f"ranges cannot be prepared for {recipe.name}: "
                                      f"{exc}") from exc
            with _LOCK:
                _STATS["prepares"] += 1
            extra.update(prepared)
        for name, x in (("ranges_i", ri), ("slices_i", sl), ("redranges_j", rr)):
            extra[name] = x
        extra = {k: cla.to_device(queue, v) if isinstance(v, np.ndarray) and v.ndim else v
                 for k, v in extra.items()}
        with _LOCK:
            self._ranges[key] = extra
            while len(self._ranges) > RANGES_CACHE_SIZE:
                self._ranges.popitem(last=False)
        return extra

    # }}}

    def _default_queue(self) -> Any:
        if self._queue is None:
            from feinsum.devices.opencl import get_context, get_queue

            get_context(self._cl_device)
            self._queue = get_queue(self._cl_device)
        return self._queue

    def __call__(self, *args: Any, ranges: Any = None, queue: Any = None,
                 **kwargs: Any) -> Any:
        bound = bind_arrays(self.spec, args, kwargs)
        symbols: dict[str, tuple[int, str]] = {}
        values = {a.name: check_array(a, bound[a.name], symbols) for a in self.spec.arrays}
        lengths = {s: got for s, (got, _) in symbols.items()}
        too_long = [s for s, v in lengths.items() if v > _INT32_MAX]
        if too_long:
            raise EvaluationError(f"length {too_long[0]!r} = {lengths[too_long[0]]} does not "
                                  "fit the kernels' int32 lengths")
        if self.spec.block_sparse is None and ranges is not None:
            raise EvaluationError("ranges= is only for block-sparse specs "
                                  "(kernel_reduction(..., block_sparse=True))")
        if self.spec.block_sparse is not None and ranges is None:
            raise EvaluationError("this block-sparse spec needs ranges=: KeOps' 6-tuple, e.g. "
                                  "feinsum.reductions.ranges.from_pairs(...)")
        on_device = any(is_cl_array(v) for v in values.values())
        if queue is None:
            queue = next((v.queue for v in values.values() if is_cl_array(v)
                          and v.queue is not None), None)
            if queue is None:
                queue = self._default_queue()
        if queue.device.int_ptr != self._cl_device.int_ptr:
            raise EvaluationError(
                f"the arrays live on {queue.device.name.strip()!r} but the einsum was "
                f"compiled for {self.device.name!r}; pass device= to feinsum.compile")
        if any(v == 0 for v in lengths.values()):
            return self._empty(lengths, queue, on_device)
        key = self._key(lengths)
        choice = self._choose(key)
        canon = {self._arrays[k]: v for k, v in values.items()}
        canon.update({self._symbols[s]: np.int32(v) for s, v in lengths.items()})
        canon.update({s: np.int32(v) for s, v in self._fixed.items()})
        failed: set[str] = set()
        while True:
            try:
                out = self._run(choice, queue, canon, ranges, on_device)
                break
            except (RecipeFailure, InvalidConfigurationError) as exc:
                # a record or default that fails here: the next default, at worst the
                # untransformed kernel; a configuration the caller forced fails loudly
                if choice.recipe is None or self._recipe is not None:
                    raise
                failed.add(choice.recipe)
                note = f"{choice.recipe} ({choice.rung}) failed: {exc}"
                choice = self._default(lengths,
                                       "; ".join(n for n in (choice.note, note) if n),
                                       frozenset(failed))
                with _LOCK:
                    self._choices[key] = choice
        self.last_choice = choice
        return self._results(out)

    def _run(self, choice: Choice, queue: Any, canon: dict[str, Any], ranges: Any,
             on_device: bool) -> dict[str, Any]:
        ctx = queue.context
        try:
            ex = self._executor(choice, ctx)
        except RecipeError as exc:
            raise RecipeFailure(str(exc)) from exc
        args = dict(canon)
        bs = self.canonical.block_sparse
        if bs is not None:
            m, n = (self._length(canon, ix) for ix in (bs.out_index, bs.reduction_index))
            args.update(self._range_inputs(ranges, m, n, choice, ctx, queue, canon))
        try:
            _, out = ex(queue, out_host=not on_device, **args)
        except FeinsumError:
            raise
        except Exception as exc:  # a build or launch failure of the generated code
            with _LOCK:
                _EXECUTORS.pop(self._executor_key(choice, ctx), None)
            raise RecipeFailure(
                f"running {choice.recipe or 'the untransformed kernel'} {dict(choice.params)} "
                f"on {self.device.name!r} failed: {type(exc).__name__}: {exc}; pass another "
                "recipe= (or db=False)") from exc
        return dict(out)

    def _length(self, canon: Mapping[str, Any], index: str) -> int:
        n = self.canonical.lengths[index]
        return int(n) if isinstance(n, int) else int(canon[n])

    def _results(self, out: Mapping[str, Any]) -> Any:
        index = self.spec.reduction in INDEX_REDUCTIONS
        rows = []
        for r in range(self.spec.nrows):
            c = self._rows[r]
            rows.append((out[f"out{c}"], out[f"out{c}_index"]) if index else out[f"out{c}"])
        return rows[0] if len(rows) == 1 else tuple(rows)

    def _empty(self, lengths: Mapping[str, int], queue: Any, on_device: bool) -> Any:
        """A zero length: the outputs are empty or reduce over nothing (neutral values)."""
        from feinsum.lowering.reduction_updates import neutral_value

        e = self.spec
        out: dict[str, Any] = {}
        for r in range(e.nrows):
            shape = tuple(int(lengths.get(str(n), n)) for n in (e.lengths[k] for k in
                                                                 e.out_indices))
            dt = e.value_dtype(r)
            c = self._rows[r]
            out[f"out{c}"] = np.full(shape, neutral_value(e.reduction, dt), dt)
            if e.reduction in INDEX_REDUCTIONS:
                out[f"out{c}_index"] = np.full(shape, -1, np.int32)
        if on_device:
            import pyopencl.array as cla

            out = {k: cla.to_device(queue, v) for k, v in out.items()}
        return self._results(out)


def compile(spec: BatchedEinsum, *, device: Any = None, db: Any = None,
            recipe: str | Recipe | None = None,
            params: Mapping[str, Any] | None = None) -> CompiledEinsum:
    """*spec* as a callable on *device* (see :mod:`feinsum.direct.executor` for the call and its
    outputs).

    :arg device: a ``pyopencl.Device``, a name substring, ``"platform:device"``, a
        :class:`~feinsum.DeviceInfo`, or None (:func:`feinsum.get_device`).
    :arg db: the timing database (a :class:`~feinsum.database.Database`, a path or URL;
        None: the default one; ``False``: none, always the recipes' defaults).
    :arg recipe: run this recipe (a name or :class:`~feinsum.Recipe`): its best record,
        else its default; ``"untransformed"``: the reference kernel of
        :func:`feinsum.generate_loopy`.
    :arg params: with *recipe*: parameters overriding its default (validated now).

    >>> import numpy as np, feinsum
    >>> e = feinsum.einsum("ij,ej->ei", feinsum.array("D", (4, 4), np.float64),
    ...                    feinsum.array("u", ("E", 4), np.float64))
    >>> f = feinsum.compile(e, db=False)
    >>> D, u = np.eye(4), np.arange(8.0).reshape(2, 4)
    >>> f(D=D, u=u).tolist()
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    """
    return CompiledEinsum(spec, device=device, db=db, recipe=recipe, params=params)


# vim: foldmethod=marker
