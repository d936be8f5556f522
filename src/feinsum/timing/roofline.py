"""Device roofline: peak memory bandwidth and peak flop rate per dtype, by feinsum's own
OpenCL microbenchmarks, measured once per device and kept in the database.

Never quote a hard-coded peak: a busy machine reaches a fraction of its datasheet. The
figures here are what this device delivered to simple, well-vectorised OpenCL kernels:

* bandwidth: ``copy`` (``b[i] = a[i]``, 2 words moved per element) and ``triad``
  (``a[i] = b[i] + s*c[i]``, 3 words), counting bytes read plus bytes written, each run with
  several vector widths; the peak is the best of all;
* flop rate: independent chains of multiply-adds (``x = x*a + b``, 2 flops, which the
  OpenCL compiler contracts to one fused multiply-add), per real dtype, on every compute
  unit: the device's native vector width and twice it, with enough chains per work-item to
  hide the FMA latency and few enough to stay in registers (8 or 12 vector registers of
  accumulators). Complex dtypes use the peak of their real part (feinsum counts complex
  arithmetic in real flops).

The expression ``x*a + b`` rather than ``mad``/``fma``: PyPI's PoCL calls an out-of-line
function for every vector ``fma`` (0.9 GFLOP/s float64 on a core that does 46), and more
accumulators than the register file holds spill to memory (``double8`` x 16 chains on an
AVX2 core: 1.7 GFLOP/s; ``double4`` x 12: 46).

Every figure is measured in :data:`ROUNDS` rounds, interleaved (bandwidth, float32,
float64, then again), and the best of each counts, so that another process busy for a
while lowers none of them; rounds are added (up to :data:`MAX_ROUNDS`) while a sanity check
fails (:func:`roofline_problems`): the float32 peak must exceed the float64 peak where the
device says it does (more float lanes than double lanes, or a device model's fp64 rate
below 1), a peak may not exceed the device model's datasheet, and no figure may be far
below the device's previous measurement. A measurement that still fails is recorded with
its problems (which ``feinsum report`` shows), unless it is far below a sound previous
one, which then stays; either way a :class:`~feinsum.errors.RooflineWarning` says so.

Each stored roofline carries :data:`ROOFLINE_VERSION`; :func:`measure_roofline` measures a
device again when its stored roofline was taken by older microbenchmarks.
"""

from __future__ import annotations

import datetime
import math
import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyopencl as cl

    from feinsum.devices.opencl import DeviceInfo

#: The real dtype whose peak bounds each supported dtype (``None``: no flop peak measured).
PEAK_DTYPE: dict[str, str | None] = {
    "float32": "float32",
    "float64": "float64",
    "complex64": "float32",
    "complex128": "float64",
    "int32": None,
    "int64": None,
}

#: The version of the microbenchmarks (1: mad() chains, up to 32 accumulators of 16 lanes;
#: 2: one round of ``x*a + b`` chains).
ROOFLINE_VERSION = 3
#: Rounds of the microbenchmarks; the best of each figure counts.
ROUNDS = 3
#: The most rounds, while a sanity check fails.
MAX_ROUNDS = 6
#: A figure below this fraction of the device's previous measurement is "far below" it.
FAR_BELOW = 0.5

# Variants tried (the best counts). On PoCL CPUs scalar code is not vectorised across
# work-items for these kernels, so the explicit vector types matter.
_STREAM_WIDTHS = (4, 16)
# Vector registers of independent accumulators per work-item: an FMA's latency times the
# FMA pipes (4 x 2 on current x86 cores) needs 8 chains in flight; 16 AVX2 registers hold 12
# and the operands.
_FMA_REGISTERS = (8, 12)
_CTYPE = {"float32": "float", "float64": "double"}


@dataclass(frozen=True)
class Roofline:
    """What a device delivered to feinsum's microbenchmarks (bytes/s and flop/s)."""

    device_key: str
    copy_bandwidth: float
    triad_bandwidth: float
    peak_flops: dict[str, float] = field(default_factory=dict)
    measured_at: str = ""
    version: int = ROOFLINE_VERSION
    #: rounds of the microbenchmarks the figures are the best of
    rounds: int = 1
    #: the sanity checks it failed when measured (:func:`roofline_problems`)
    problems: tuple[str, ...] = ()

    @property
    def bandwidth(self) -> float:
        """Peak memory bandwidth in bytes/s (read + written)."""
        return max(self.copy_bandwidth, self.triad_bandwidth)

    def peak(self, dtype: Any) -> float | None:
        """Peak flop/s for arithmetic in *dtype*, or None when not measured (integers)."""
        real = PEAK_DTYPE.get(np.dtype(dtype).name)
        return None if real is None else self.peak_flops.get(real)

    def attainable(self, dtype: Any, flops: float, nbytes: float) -> float:
        """The roofline bound in flop/s for a computation of *flops* moving *nbytes*."""
        memory_bound = flops / nbytes * self.bandwidth if nbytes > 0 else float("inf")
        peak = self.peak(dtype)
        return min(memory_bound, peak) if peak is not None else memory_bound

    def fraction(self, dtype: Any, flops: float, nbytes: float, seconds: float) -> float | None:
        """Fraction of the roofline bound a run of *seconds* achieved (None if unbounded)."""
        bound = self.attainable(dtype, flops, nbytes)
        if not np.isfinite(bound) or bound <= 0 or seconds <= 0:
            return None
        if flops <= 0:  # pure data movement: bandwidth fraction
            return nbytes / seconds / self.bandwidth
        return flops / seconds / bound

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "device_key": self.device_key,
            "copy_bandwidth": self.copy_bandwidth,
            "triad_bandwidth": self.triad_bandwidth,
            "peak_flops": dict(self.peak_flops),
            "measured_at": self.measured_at,
            "rounds": self.rounds,
            "problems": list(self.problems),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Roofline:
        return cls(
            device_key=str(d["device_key"]),
            copy_bandwidth=float(d["copy_bandwidth"]),
            triad_bandwidth=float(d["triad_bandwidth"]),
            peak_flops={str(k): float(v) for k, v in d.get("peak_flops", {}).items()},
            measured_at=str(d.get("measured_at", "")),
            version=int(d.get("version", 1)),
            rounds=int(d.get("rounds", 1)),
            problems=tuple(str(p) for p in d.get("problems", ())),
        )

    def __str__(self) -> str:
        peaks = ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in sorted(self.peak_flops.items()))
        return f"bandwidth {self.bandwidth / 1e9:.1f} GB/s, {peaks}"


# {{{ microbenchmarks


def _vtype(ctype: str, width: int) -> str:
    return ctype if width == 1 else f"{ctype}{width}"


def _stream_source(ctype: str, width: int) -> str:
    t = _vtype(ctype, width)
    return f"""
{"#pragma OPENCL EXTENSION cl_khr_fp64: enable" if ctype == "double" else ""}
__kernel void copy(__global const {t} *restrict a, __global {t} *restrict b)
{{ size_t i = get_global_id(0); b[i] = a[i]; }}
__kernel void triad(__global {t} *restrict a, __global const {t} *restrict b,
                    __global const {t} *restrict c, {ctype} s)
{{ size_t i = get_global_id(0); a[i] = b[i] + s * c[i]; }}
"""


def _fma_source(ctype: str, width: int, chains: tuple[int, ...], iters: int) -> str:
    """One kernel ``fma_N`` per count N of independent accumulator chains."""
    t = _vtype(ctype, width)
    kernels = []
    for nacc in chains:
        decl = "\n".join(f"  {t} x{k} = ({t})(seed + ({ctype}){k});" for k in range(nacc))
        body = "\n".join(f"    x{k} = x{k} * a + b;" for k in range(nacc))
        total = " + ".join(f"x{k}" for k in range(nacc))
        kernels.append(f"""
__kernel void fma_{nacc}(__global {t} *out, {ctype} a, {ctype} b)
{{
  {ctype} seed = ({ctype})get_global_id(0) * ({ctype})1e-7;
{decl}
  for (int k = 0; k < {iters}; ++k) {{
{body}
  }}
  out[get_global_id(0)] = {total};
}}""")
    pragma = "#pragma OPENCL EXTENSION cl_khr_fp64: enable" if ctype == "double" else ""
    return pragma + "\n".join(kernels) + "\n"


def _kernel(prg: cl.Program, name: str, *args: Any) -> cl.Kernel:
    import pyopencl as cl

    knl = cl.Kernel(prg, name)
    knl.set_args(*args)
    return knl


def _best_time(
    queue: cl.CommandQueue, knl: cl.Kernel, gsize: tuple[int, ...], min_samples: int,
    min_time: float,
) -> float:
    """Minimum device time of launching *knl* under the measurement protocol."""
    import pyopencl as cl

    cl.enqueue_nd_range_kernel(queue, knl, gsize, None).wait()  # warm-up (and PoCL's JIT)
    times: list[float] = []
    while len(times) < min_samples or sum(times) < min_time:
        evt = cl.enqueue_nd_range_kernel(queue, knl, gsize, None)
        evt.wait()
        times.append((evt.profile.end - evt.profile.start) * 1e-9)
        if len(times) >= 10 * min_samples and sum(times) >= min_time:
            break
    return min(times)


def _fma_variants(info: DeviceInfo, dtype: str) -> list[tuple[int, tuple[int, ...]]]:
    """(vector width, accumulator counts) to try: the native width and twice it."""
    native = max(1, info.native_vector_width_double if dtype == "float64"
                 else info.native_vector_width_float)
    return [(w, tuple(max(1, regs * native // w) for regs in _FMA_REGISTERS))
            for w in (native, 2 * native) if w <= 16]


def stream_bytes(info: DeviceInfo, quick: bool = False) -> int:
    """The bytes of each array the bandwidth microbenchmarks stream on *info* (three)."""
    return 16 << 20 if quick else min(256 << 20, info.global_mem_size // 16)


class _Bench:
    """The microbenchmarks of one device, built once and timed round after round."""

    def __init__(self, device: cl.Device, info: DeviceInfo, quick: bool, min_samples: int,
                 min_time: float) -> None:
        import pyopencl as cl

        from feinsum.devices.opencl import get_context

        self.info, self.min_samples, self.min_time = info, min_samples, min_time
        self.ctx = get_context(device)
        self.queue = cl.CommandQueue(self.ctx,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.n = stream_bytes(info, quick) // 4
        self.iters = 256 if quick else 1024
        self.buffers: list[cl.Buffer] = []

    def _time(self, knl: cl.Kernel, gsize: tuple[int, ...]) -> float:
        return _best_time(self.queue, knl, gsize, self.min_samples, self.min_time)

    def _buffer(self, nbytes: int) -> cl.Buffer:
        import pyopencl as cl

        buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, nbytes)
        self.buffers.append(buf)
        return buf

    def bandwidths(self) -> tuple[float, float]:
        """(copy, triad) in bytes/s: the best vector width of each."""
        import pyopencl as cl

        if not hasattr(self, "_streams"):
            host = np.ones(self.n, dtype=np.float32)
            bufs = [self._buffer(host.nbytes) for _ in range(3)]
            for b in bufs:
                cl.enqueue_copy(self.queue, b, host)
            self._streams = []
            for width in _STREAM_WIDTHS:
                prg = cl.Program(self.ctx, _stream_source("float", width)).build()
                self._streams.append((
                    (self.n // width,), _kernel(prg, "copy", bufs[0], bufs[1]),
                    _kernel(prg, "triad", bufs[0], bufs[1], bufs[2], np.float32(0.5))))
        words = self.n * 4
        copy = max(2 * words / self._time(c, g) for g, c, _ in self._streams)
        triad = max(3 * words / self._time(t, g) for g, _, t in self._streams)
        return copy, triad

    def peak(self, dtype: str) -> float:
        """flop/s of multiply-add chains in *dtype*: the best variant."""
        import pyopencl as cl

        cache = self.__dict__.setdefault("_fma", {})
        if dtype not in cache:
            ctype, np_t = _CTYPE[dtype], np.dtype(dtype).type
            # enough work-items to fill every compute unit several times over
            lanes = max(self.info.compute_units, 1) * 4096
            variants = []
            for width, chains in _fma_variants(self.info, dtype):
                prg = cl.Program(self.ctx, _fma_source(ctype, width, chains, self.iters)).build()
                nwi = max(lanes // width, 64)
                out = self._buffer(nwi * width * np.dtype(dtype).itemsize)
                for nacc in chains:
                    knl = _kernel(prg, f"fma_{nacc}", out, np_t(0.999), np_t(1e-3))
                    variants.append((2.0 * width * nacc * self.iters * nwi, knl, (nwi,)))
            cache[dtype] = variants
        return max(flops / self._time(knl, g) for flops, knl, g in cache[dtype])

    def release(self) -> None:
        for b in self.buffers:
            b.release()


def run_microbenchmarks(
    device: cl.Device, *, quick: bool = False, min_samples: int = 3, min_time: float = 0.05,
    rounds: int = ROUNDS, previous: Roofline | None = None,
) -> Roofline:
    """Measure *device*'s roofline now: *rounds* rounds (more while a sanity check fails,
    up to :data:`MAX_ROUNDS`), the best of each figure, its problems (against *previous*
    too) in :attr:`Roofline.problems`. A few seconds; ``quick``: smaller arrays, for
    tests."""
    from feinsum import checks
    from feinsum.devices.opencl import device_info

    rounds = checks.count("rounds", rounds, maximum=MAX_ROUNDS)
    info = device_info(device)
    bench = _Bench(device, info, quick, min_samples, min_time)
    dtypes = ["float32", "float64"] if info.has_fp64 else ["float32"]
    copy_bw = triad_bw = 0.0
    peaks = dict.fromkeys(dtypes, 0.0)
    done = 0
    try:
        while True:
            c, t = bench.bandwidths()
            copy_bw, triad_bw = max(copy_bw, c), max(triad_bw, t)
            for dt in dtypes:
                peaks[dt] = max(peaks[dt], bench.peak(dt))
            done += 1
            roof = Roofline(
                device_key=info.key, copy_bandwidth=copy_bw, triad_bandwidth=triad_bw,
                peak_flops=dict(peaks), rounds=done,
                measured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
            problems = roofline_problems(roof, info, previous)
            if done >= MAX_ROUNDS or (done >= rounds and not problems):
                return replace(roof, problems=tuple(problems))
    finally:
        bench.release()


# }}}


# {{{ sanity checks


def _gflops(x: float) -> str:
    return f"{x / 1e9:,.1f} GFLOP/s"


def expected_fp32_speedup(info: DeviceInfo) -> tuple[float, str] | None:
    """How much faster float32 arithmetic is than float64 on *info*, and why, where the
    device says so (None: it does not, or it has no float64)."""
    from feinsum.devices.models import with_model

    info = with_model(info)
    if not info.has_fp64:
        return None
    if info.fp64_rate and info.fp64_rate < 1:
        return 1 / info.fp64_rate, (f"the {info.model} model runs float64 at "
                                    f"{info.fp64_rate:g} of the float32 rate")
    for kind in ("native", "preferred"):
        f = getattr(info, f"{kind}_vector_width_float")
        d = getattr(info, f"{kind}_vector_width_double")
        if f and d and f > d:
            return f / d, f"the device reports {f} {kind} float lanes to {d} double lanes"
    return None


def roofline_problems(roof: Roofline, info: DeviceInfo, previous: Roofline | None = None
                      ) -> list[str]:
    """The sanity checks *roof* (measured on *info*) fails, in words: the float32 peak not
    above the float64 one where the device says it is faster
    (:func:`expected_fp32_speedup`), a peak above the device model's datasheet, a figure
    far (:data:`FAR_BELOW`) below *previous*'s (the device's last measurement)."""
    from feinsum.devices.models import with_model

    out = []
    f32, f64 = roof.peak_flops.get("float32"), roof.peak_flops.get("float64")
    expected = expected_fp32_speedup(info)
    if f32 and f64 and expected is not None and expected[0] >= 1.5 and (
            f32 < math.sqrt(expected[0]) * f64):
        out.append(f"the float32 peak ({_gflops(f32)}) is not above the float64 peak "
                   f"({_gflops(f64)}), though {expected[1]} (float32 should be about "
                   f"{expected[0]:.3g}x faster): measured while the device was busy?")
    model = with_model(info)
    for dt, datasheet in (("float32", model.peak_flops_fp32),
                          ("float64", model.peak_flops_fp64)):
        got = roof.peak_flops.get(dt)
        if got and datasheet and got > 1.25 * datasheet:
            out.append(f"the {dt} peak ({_gflops(got)}) exceeds the {model.model} "
                       f"datasheet's {_gflops(datasheet)}")
    return out + ([] if previous is None else far_below(roof, previous))


def far_below(roof: Roofline, previous: Roofline) -> list[str]:
    """The figures of *roof* far (:data:`FAR_BELOW`) below *previous*'s, in words."""
    figures: list[tuple[str, float | None, float | None, str]] = [
        ("bandwidth", roof.bandwidth, previous.bandwidth, "GB/s")]
    figures += [(f"{dt} peak", roof.peak_flops.get(dt), previous.peak_flops.get(dt),
                 "GFLOP/s") for dt in sorted(previous.peak_flops)]
    return [f"the {what} ({now / 1e9:,.1f} {unit}) is {100 * now / before:.0f}% of the "
            f"{before / 1e9:,.1f} {unit} measured {previous.measured_at or 'before'}"
            for what, now, before, unit in figures
            if now and before and now < FAR_BELOW * before]


# }}}


def recorded_roofline(db: Any, info: DeviceInfo) -> Roofline | None:
    """The roofline *db* records for *info*, None if none or one taken by other
    microbenchmarks (an older :data:`ROOFLINE_VERSION`)."""
    stored = db.get_roofline(info)
    roof = None if not stored else Roofline.from_dict(stored)
    return roof if roof is not None and roof.version >= ROOFLINE_VERSION else None


def record_roofline(db: Any, info: DeviceInfo, roof: Roofline,
                    previous: Roofline | None) -> bool:
    """Record *roof* (just measured on *info*) in *db*, unless it is far below *previous*
    (the recorded one), itself sound, which then stays. Returns whether it was recorded."""
    if previous is not None and not roofline_problems(previous, info) and (
            far_below(roof, previous)):
        return False
    db.set_roofline(info, roof.as_dict())
    return True


def measure_roofline(
    device: object = None, *, db: Any = None, refresh: bool = False, quick: bool = False
) -> Roofline:
    """The roofline of *device*: read from the database *db* if it holds one for this device,
    else measured by the microbenchmarks (a few seconds) and stored there. *db*: a
    :class:`~feinsum.database.Database`, a path, an SQLAlchemy URL, None (the default
    database) or False (measure, store nothing). ``refresh`` measures again, as does a
    recorded roofline that fails a sanity check; ``quick`` measurements are never stored.

    A measurement that fails a sanity check (see the module docstring) comes with a
    :class:`~feinsum.errors.RooflineWarning`; one far below the recorded roofline, itself
    sound, is not recorded: the recorded one is returned and stays."""
    from feinsum.database.resolve import optional_database
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.errors import RooflineWarning

    dev = get_device(device)
    info = device_info(dev)
    db = optional_database(db)
    previous = None if db is None else recorded_roofline(db, info)
    if previous is not None and not refresh and not (
            previous.problems or roofline_problems(previous, info)):
        return previous
    roof = run_microbenchmarks(dev, quick=quick, previous=previous)
    if db is not None and not quick and not record_roofline(db, info, roof, previous):
        warnings.warn(RooflineWarning(
            f"roofline of {info.name} not recorded: {'; '.join(roof.problems)}; the one "
            f"measured {previous.measured_at} stays (measure again when the device is "  # type: ignore[union-attr]
            "idle: `feinsum devices --roofline`)"), stacklevel=2)
        return previous  # type: ignore[return-value]
    if roof.problems:
        warnings.warn(RooflineWarning(f"roofline of {info.name}: {'; '.join(roof.problems)}"),
                      stacklevel=2)
    return roof


# vim: foldmethod=marker
