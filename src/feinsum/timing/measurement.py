"""The measurement protocol: build a candidate once, validate it, time it with device events.

A *candidate* is a recipe configuration (or the untransformed reference kernel) for one
canonical einsum at fixed lengths on one device. :func:`measure` runs the protocol:

1. **build once**: ``generate_loopy`` of the canonical spec, the recipe's ``apply``, code
   generation and the OpenCL build. The canonical spec's long axes are runtime length
   arguments, so the one compiled program serves validation and timing;
2. **validate** against :func:`feinsum.evaluate` at small lengths (chosen to satisfy the
   kernel's assumptions), with dtype-aware tolerances; at the timing lengths too when
   asked (``validate_full``);
3. **warm up**, then **time** with OpenCL profiling events (device time of every kernel the
   call launches), repeating until both ``min_samples`` and ``min_time`` are reached;
   every sample is kept;
4. **report** min, median and the spread ``(p90 - min) / median``, flagged as noisy above
   ``spread_limit``; flops and bytes from :func:`feinsum.cost` of the computation, GFLOP/s
   and the fraction of the device roofline. The figure of merit is the **minimum**: other
   work on the machine only ever adds time, so the minimum is the estimate of a kernel's
   own time that varies least with the load (the median is kept beside it).

Kernels run through ``t_unit.executor(ctx)``, never by calling the translation unit.
Each candidate runs in a worker process (:mod:`feinsum.timing.isolation`) unless
``isolate=False``; this module holds the worker-side steps and the result types.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

import feinsum.reductions  # noqa: F401  (registers the block-sparse lowering)
from feinsum.errors import (
    ArgumentError,
    InvalidConfigurationError,
    RecipeFailure,
    TuningError,
)
from feinsum.lowering.validation import (
    compare,
    random_inputs,
    reduction_length,
    reference_outputs,
    satisfies,
    small_lengths,
    tolerance,
)

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.recipes import Recipe
    from feinsum.spec.model import BatchedEinsum
    from feinsum.timing.roofline import Roofline

#: Failure categories, in the order the protocol can meet them.
FAILURE_CATEGORIES: tuple[str, ...] = (
    "invalid", "compile-error", "runtime-error", "wrong-result", "timeout",
)
#: The name under which the untransformed reference kernel is recorded.
UNTRANSFORMED = "untransformed"


class CandidateFailure(Exception):
    """A candidate failed the protocol: *category* is one of :data:`FAILURE_CATEGORIES`."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(f"{category}: {message}")
        self.category = category
        self.message = message


# {{{ options and statistics


@dataclass(frozen=True)
class MeasureOptions:
    """How a candidate is measured (the defaults suit tuning; all are keyword arguments of
    :func:`measure` and :func:`feinsum.autotune`)."""

    #: timing stops once both this many samples and :attr:`min_time` seconds are reached
    min_samples: int = 5
    min_time: float = 0.2
    #: ... or at these caps, whichever comes first
    max_samples: int = 1000
    max_time: float = 5.0
    #: untimed calls at the timing lengths first
    warmup: int = 1
    #: spread ``(p90 - min) / median`` above which a result is flagged noisy; a noisy result
    #: is sampled again up to twice the samples (within :attr:`max_time`)
    spread_limit: float = 0.2
    #: validate at small lengths (cheap) and/or at the timing lengths (a full reference run)
    validate_small: bool = True
    validate_full: bool = False
    #: target for each long length at validation (raised to satisfy the kernel's assumptions)
    small_length: int = 331
    #: relative tolerance override (default: by dtype and reduction length)
    rtol: float | None = None
    #: seconds a worker may spend in one step of preparing a candidate (code generation,
    #: OpenCL build, first run, validation), and timing it
    build_timeout: float = 60.0
    run_timeout: float = 60.0
    #: tuning races candidates: one whose samples exceed ``race`` times the best time so
    #: far stops early (its few samples are kept; 0 disables)
    race: float = 2.0
    #: seed of the random inputs
    seed: int = 0

    def __post_init__(self) -> None:
        from feinsum import checks

        for name in ("min_samples", "max_samples", "small_length"):
            checks.count(name, getattr(self, name))
        checks.count("warmup", self.warmup, minimum=0)
        checks.seed("seed", self.seed)
        for name in ("max_time", "build_timeout", "run_timeout"):
            checks.seconds(name, getattr(self, name))
        checks.seconds("min_time", self.min_time, zero=True)
        for name in ("spread_limit", "race"):
            checks.number(name, getattr(self, name))
        if self.rtol is not None:
            checks.number("rtol", self.rtol)
        if self.max_samples < self.min_samples:
            raise ArgumentError(f"max_samples ({self.max_samples}) must be at least "
                                f"min_samples ({self.min_samples})")

    def with_overrides(self, **kwargs: Any) -> MeasureOptions:
        unknown = set(kwargs) - set(self.__dataclass_fields__)
        if unknown:
            raise TuningError(f"unknown measurement option(s): {', '.join(sorted(unknown))}; "
                              f"known: {', '.join(self.__dataclass_fields__)}")
        return replace(self, **kwargs)


@dataclass(frozen=True)
class TimingStats:
    """Summary of the timing samples (seconds of device time per call)."""

    samples: tuple[float, ...]
    min: float
    median: float
    p90: float
    mad: float
    spread: float
    noisy: bool

    @classmethod
    def from_samples(cls, samples: list[float] | tuple[float, ...], spread_limit: float = 0.2
                     ) -> TimingStats:
        if not samples:
            raise TuningError("no timing samples")
        a = np.asarray(samples, dtype=float)
        med = float(np.median(a))
        p90 = float(np.percentile(a, 90))
        lo = float(a.min())
        spread = (p90 - lo) / med if med > 0 else 0.0
        return cls(
            samples=tuple(float(s) for s in a),
            min=lo,
            median=med,
            p90=p90,
            mad=float(np.median(np.abs(a - med))),
            spread=spread,
            noisy=spread > spread_limit,
        )


# }}}


# {{{ the result


@dataclass(frozen=True)
class Measurement:
    """The outcome of measuring one candidate: timings if ``status == "ok"``, else the
    failure category and message."""

    status: str
    recipe_name: str
    recipe_version: str
    params: dict[str, Any]
    lengths: dict[str, int]
    message: str = ""
    timing: TimingStats | None = None
    flops: float | None = None
    nbytes: float | None = None
    roofline_fraction: float | None = None
    validation_error: float | None = None
    #: seconds spent per phase (codegen+build, first run, validation, timing)
    phase_times: dict[str, float] = field(default_factory=dict)
    started_at: float = 0.0
    wall_time: float = 0.0
    #: the wall-clock interval the device was held for timing it (0: not timed)
    timing_started: float = 0.0
    timing_ended: float = 0.0
    #: :func:`feinsum.timing.fingerprint.code_fingerprint` of the code measured (None: the
    #: candidate failed before its code was generated)
    fingerprint: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def seconds(self) -> float | None:
        """The figure of merit: the minimum device time per call (see the module docstring)."""
        return self.timing.min if self.timing else None

    @property
    def gflops(self) -> float | None:
        if self.timing is None or not self.flops or self.timing.min <= 0:
            return None
        return self.flops / self.timing.min / 1e9

    def __str__(self) -> str:
        head = f"{self.recipe_name} {self.params}"
        if self.timing is None:
            return f"{head}: {self.status}: {self.message}"
        g = f", {self.gflops:.2f} GFLOP/s" if self.gflops is not None else ""
        r = (f", {100 * self.roofline_fraction:.0f}% of roofline"
             if self.roofline_fraction is not None else "")
        noisy = " (noisy)" if self.timing.noisy else ""
        return (f"{head}: min {self.timing.min * 1e3:.3f} ms, median "
                f"{self.timing.median * 1e3:.3f} ms, spread {self.timing.spread:.2f}{noisy}{g}{r}")


# }}}


# {{{ what is measured: a target (einsum at lengths on a device) and a candidate


@dataclass(frozen=True)
class Target:
    """A canonical einsum at fixed lengths: what every candidate of one tuning run computes.
    ``flops``, ``nbytes`` and ``dtype`` are :func:`feinsum.spec.costs.roofline_work`'s (the flops
    of the cheapest contraction order)."""

    spec: BatchedEinsum
    lengths: dict[str, int]
    key: str
    flops: float
    nbytes: float
    dtype: str

    @classmethod
    def make(cls, einsum: BatchedEinsum, lengths: Mapping[str, int] | None = None) -> Target:
        """Canonicalise *einsum* (its symbols fixed by *lengths*, if any)."""
        from feinsum.spec.canonical import canonical_key, canonical_lengths, canonicalize
        from feinsum.spec.costs import roofline_work

        e = einsum.with_lengths(dict(lengths)) if lengths else einsum
        if e.length_symbols:
            raise TuningError(
                f"the lengths of {', '.join(e.length_symbols)} are needed to time {einsum}; "
                "pass lengths={...}"
            )
        if e.block_sparse is not None:
            raise TuningError("measuring block-sparse specs needs ranges data: not supported "
                              "yet (time them with their recipe's benchmark)")
        spec = canonicalize(e)
        clen = {k: int(v) for k, v in canonical_lengths(e).items()}
        w = roofline_work(e)
        return cls(spec=spec, lengths=clen, key=canonical_key(e), flops=float(w.flops),
                   nbytes=float(w.bytes), dtype=w.dtype)


@dataclass(frozen=True)
class Candidate:
    """One configuration to measure; picklable (the recipe travels as its file)."""

    target: Target
    recipe_name: str
    recipe_version: str
    recipe_file: str | None
    params: dict[str, Any]
    options: MeasureOptions

    @classmethod
    def make(cls, target: Target, recipe: Recipe | None, params: Mapping[str, Any] | None,
             options: MeasureOptions) -> Candidate:
        if recipe is None:
            return cls(target, UNTRANSFORMED, untransformed_version(), None, {}, options)
        src = recipe.source_path
        return cls(target, recipe.name, recipe.version, str(src) if src else None,
                   dict(params or {}), options)


def untransformed_version() -> str:
    """The untransformed kernel's "recipe version": the lowering's source hash."""
    import hashlib
    from pathlib import Path

    import feinsum.lowering.kernel

    return hashlib.sha256(Path(feinsum.lowering.kernel.__file__).read_bytes()).hexdigest()[:16]


def _load_recipe(c: Candidate) -> Recipe:
    from feinsum.recipes import load_recipe_file

    if c.recipe_file is None:
        raise TuningError(f"recipe {c.recipe_name!r} has no source file to load in a worker")
    r = load_recipe_file(c.recipe_file)
    if r.name != c.recipe_name:
        raise TuningError(f"{c.recipe_file} defines recipe {r.name!r}, not {c.recipe_name!r}")
    return r


# }}}


# {{{ worker-side steps: prepare (build + validate) and time


@contextlib.contextmanager
def capture_kernel_events() -> Iterator[list[Any]]:
    """Collect the events of every kernel enqueued inside the block (loopy's host code calls
    ``pyopencl.enqueue_nd_range_kernel`` through the module, so one call may launch several
    device kernels; its device time spans all of them)."""
    import pyopencl as cl

    events: list[Any] = []
    orig = cl.enqueue_nd_range_kernel

    def enqueue(*args: Any, **kwargs: Any) -> Any:
        evt = orig(*args, **kwargs)
        events.append(evt)
        return evt

    cl.enqueue_nd_range_kernel = enqueue
    try:
        yield events
    finally:
        cl.enqueue_nd_range_kernel = orig


def _device_seconds(events: list[Any]) -> float:
    return (max(e.profile.end for e in events) - min(e.profile.start for e in events)) * 1e-9


@dataclass
class DeviceState:
    """What a worker keeps between candidates: the device, a profiling queue, cached inputs."""

    device: Any
    context: Any
    queue: Any
    info: DeviceInfo
    _inputs: dict[Any, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def open(cls, info: DeviceInfo) -> DeviceState:
        import pyopencl as cl

        from feinsum.devices.opencl import device_info, get_context

        for p in cl.get_platforms():
            for d in p.get_devices():
                if device_info(d).key == info.key:
                    ctx = get_context(d)
                    q = cl.CommandQueue(ctx,
                                        properties=cl.command_queue_properties.PROFILING_ENABLE)
                    return cls(d, ctx, q, info)
        raise TuningError(f"device {info.key!r} not found in this process")

    def inputs(self, spec: BatchedEinsum, lengths: Mapping[str, int], seed: int
               ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Host and device arrays for *spec* at *lengths* (cached: the last two targets)."""
        import pyopencl.array as cla

        key = (str(spec), tuple(sorted(lengths.items())), seed)
        hit = self._inputs.get(key)
        if hit is None:
            host = random_inputs(spec, lengths, seed)
            dev = {k: cla.to_device(self.queue, v) if isinstance(v, np.ndarray) else v
                   for k, v in host.items()}
            if len(self._inputs) >= 2:
                self._inputs.pop(next(iter(self._inputs)))
            hit = self._inputs[key] = (host, dev)
        return hit


@dataclass
class Prepared:
    """A built and validated candidate, ready to time."""

    candidate: Candidate
    executor: Any
    args: dict[str, Any]
    validation_error: float | None
    phase_times: dict[str, float]
    fingerprint: str | None = None


def _kernel_args(state: DeviceState, c: Candidate, lengths: Mapping[str, int],
                 recipe: Recipe | None) -> tuple[dict[str, Any], dict[str, Any]]:
    host, dev = state.inputs(c.target.spec, lengths, c.options.seed)
    args = {**dev, **{k: np.int32(v) for k, v in lengths.items()}}
    if recipe is not None and recipe.has_prepare:
        args.update(recipe.prepare(c.target.spec.with_lengths(dict(lengths)), host, c.params))
    return host, args


def _run(executor: Any, queue: Any, args: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """One call; its device time and its outputs (by name)."""
    with capture_kernel_events() as events:
        _evt, outputs = executor(queue, **args)
    for e in events:
        e.wait()
    return (_device_seconds(events) if events else 0.0), dict(outputs)


def prepare(state: DeviceState, c: Candidate, phase: Callable[[str], None] = lambda s: None,
            noted: Callable[[str], None] = lambda fp: None) -> Prepared:
    """Generate, transform and build *c*, then validate it: a :class:`Prepared` or a
    :class:`CandidateFailure` with its category. *noted* gets the fingerprint of the
    generated code as soon as it is known (before the OpenCL build, which may fail)."""
    import loopy as lp

    from feinsum.lowering.kernel import generate_loopy
    from feinsum.timing.fingerprint import code_fingerprint

    times: dict[str, float] = {}
    opts = c.options
    spec = c.target.spec

    phase("codegen")
    t0 = time.perf_counter()
    recipe = None if c.recipe_name == UNTRANSFORMED else _load_recipe(c)
    t_unit = generate_loopy(spec)
    if recipe is not None:
        try:
            t_unit = recipe.apply(t_unit, c.params, spec, state.info)
        except InvalidConfigurationError as exc:
            raise CandidateFailure("invalid", str(exc)) from exc
        except RecipeFailure as exc:
            cat = ("invalid" if isinstance(exc.__cause__, InvalidConfigurationError)
                   else "compile-error")
            raise CandidateFailure(cat, str(exc)) from exc
    knl = t_unit.default_entrypoint
    clobbered = sorted(knl.get_written_variables() & {a.name for a in spec.arrays})
    if clobbered:  # the user's inputs would be overwritten (and the cached ones here)
        raise CandidateFailure("wrong-result", f"the kernel writes its input(s) "
                               f"{', '.join(clobbered)}")
    if not satisfies(knl.assumptions, c.target.lengths):
        raise CandidateFailure(
            "invalid", f"lengths {c.target.lengths} violate the kernel's assumptions "
            f"({knl.assumptions})")
    t_unit = lp.set_options(t_unit, return_dict=True)
    small = (small_lengths(knl.assumptions, c.target.lengths, opts.small_length)
             if opts.validate_small else dict(c.target.lengths))
    host_s, args_s = _kernel_args(state, c, small, recipe)
    executor: Any = t_unit.executor(state.context)  # a PyOpenCLExecutor
    try:
        phase("build")  # code generation and clBuildProgram, before any run
        arg_to_dtype = executor.arg_to_dtype(args_s)
        # the code the build compiles (loopy caches it: the build does not generate it again)
        fingerprint = code_fingerprint(
            executor.get_typed_and_scheduled_translation_unit(arg_to_dtype), state.info)
        noted(fingerprint)
        executor.translation_unit_info(arg_to_dtype)
    except Exception as exc:
        raise CandidateFailure("compile-error", _short(exc)) from exc
    times["build"] = time.perf_counter() - t0

    phase("first-run")  # PoCL compiles the work-group function at the first enqueue
    t0 = time.perf_counter()
    try:
        _, out = _run(executor, state.queue, args_s)
        out_host = {k: v.get() if hasattr(v, "get") else v for k, v in out.items()}
    except Exception as exc:
        raise CandidateFailure("runtime-error", _short(exc)) from exc
    times["first-run"] = time.perf_counter() - t0

    phase("validate")
    t0 = time.perf_counter()
    err: float | None = None
    checks = ([(small, host_s, out_host)] if opts.validate_small else [])
    if opts.validate_full:
        host_f, args_f = _kernel_args(state, c, c.target.lengths, recipe)
        try:
            _, out_f = _run(executor, state.queue, args_f)
        except Exception as exc:
            raise CandidateFailure("runtime-error", _short(exc)) from exc
        checks.append((c.target.lengths, host_f,
                       {k: v.get() if hasattr(v, "get") else v for k, v in out_f.items()}))
    for lens, host, got in checks:
        ref = reference_outputs(spec, lens, host)
        tol = tolerance(spec.value_dtype(0), reduction_length(spec, lens), opts.rtol)
        e, why = compare(got, ref, tol)
        err = e if err is None else max(err, e)
        if why is not None:
            raise CandidateFailure("wrong-result", f"at lengths {lens}: {why}")
    times["validate"] = time.perf_counter() - t0
    _, args = _kernel_args(state, c, c.target.lengths, recipe)
    return Prepared(c, executor, args, err, times, fingerprint)


def time_prepared(state: DeviceState, p: Prepared, cutoff: float | None = None
                  ) -> tuple[list[float], str]:
    """Warm up, then time calls until the protocol's count and time are reached; the
    samples and a note. With *cutoff* (seconds: ``race`` times the best time so far) a
    candidate that is clearly slower stops early: after two samples above the cutoff, or
    one above twice the cutoff."""
    opts = p.candidate.options
    args = dict(p.args)
    t_start = time.perf_counter()
    note = ""
    try:
        for _ in range(max(opts.warmup, 1)):
            _, outputs = _run(p.executor, state.queue, args)
            args.update(outputs)  # reuse the output arrays: no allocation in the loop
        samples: list[float] = []
        wanted = opts.min_samples
        while True:
            t, _ = _run(p.executor, state.queue, args)
            samples.append(t)
            elapsed = time.perf_counter() - t_start
            if cutoff and min(samples) > cutoff * (1 if len(samples) >= 2 else 2):
                note = (f"stopped after {len(samples)} sample(s): slower than the cutoff "
                        f"{cutoff * 1e3:.3g} ms ({opts.race:g} x the best so far)")
                break
            if len(samples) >= opts.max_samples or elapsed >= opts.max_time:
                break
            if len(samples) >= wanted and sum(samples) >= opts.min_time:
                stats = TimingStats.from_samples(samples, opts.spread_limit)
                if not stats.noisy or wanted > opts.min_samples:
                    break
                wanted = 2 * len(samples)  # noisy: sample once more as many
    except Exception as exc:
        raise CandidateFailure("runtime-error", _short(exc)) from exc
    p.phase_times["time"] = time.perf_counter() - t_start
    return samples, note


def _short(exc: BaseException, limit: int = 2000) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[:limit] + " ..."


# }}}


# {{{ parent side: the result of an outcome, measure()


def finish(c: Candidate, status: str, message: str = "", samples: list[float] | None = None,
           validation_error: float | None = None, phase_times: dict[str, float] | None = None,
           started_at: float = 0.0, wall_time: float = 0.0, roofline: Roofline | None = None,
           fingerprint: str | None = None, held: tuple[float, float] = (0.0, 0.0)
           ) -> Measurement:
    """A candidate's :class:`Measurement` (*held*: when it held the device for timing)."""
    stats = None
    fraction = None
    if status == "ok" and samples:
        stats = TimingStats.from_samples(samples, c.options.spread_limit)
        if roofline is not None:
            fraction = roofline.fraction(c.target.dtype, c.target.flops, c.target.nbytes,
                                         stats.min)
    return Measurement(
        status=status, recipe_name=c.recipe_name, recipe_version=c.recipe_version,
        params=dict(c.params), lengths=dict(c.target.lengths), message=message, timing=stats,
        flops=c.target.flops, nbytes=c.target.nbytes, roofline_fraction=fraction,
        validation_error=validation_error, phase_times=dict(phase_times or {}),
        started_at=started_at, wall_time=wall_time, timing_started=held[0],
        timing_ended=held[1], fingerprint=fingerprint)


def measure_in_process(state: DeviceState, c: Candidate, roofline: Roofline | None = None
                       ) -> Measurement:
    """Run the protocol in this process (no timeout, no crash protection)."""
    t0 = time.time()
    seen: list[str] = []
    try:
        p = prepare(state, c, noted=seen.append)
        samples, note = time_prepared(state, p)
    except CandidateFailure as exc:
        return finish(c, exc.category, exc.message, started_at=t0, wall_time=time.time() - t0,
                      fingerprint=seen[0] if seen else None)
    return finish(c, "ok", note, samples, p.validation_error, p.phase_times, t0,
                  time.time() - t0, roofline, p.fingerprint)


# }}}

# vim: foldmethod=marker
