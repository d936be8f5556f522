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

Each stored roofline carries :data:`ROOFLINE_VERSION`; :func:`measure_roofline` measures a
device again when its stored roofline was taken by older microbenchmarks.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
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

#: The version of the microbenchmarks (1: mad() chains, up to 32 accumulators of 16 lanes).
ROOFLINE_VERSION = 2

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


def _bandwidths(
    ctx: cl.Context, queue: cl.CommandQueue, nbytes: int, min_samples: int, min_time: float
) -> tuple[float, float]:
    import pyopencl as cl

    mf = cl.mem_flags
    n = nbytes // 4
    host = np.ones(n, dtype=np.float32)
    bufs = [cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host) for _ in range(3)]
    best_copy = best_triad = 0.0
    for width in _STREAM_WIDTHS:
        prg = cl.Program(ctx, _stream_source("float", width)).build()
        gsize = (n // width,)
        copy = _kernel(prg, "copy", bufs[0], bufs[1])
        t = _best_time(queue, copy, gsize, min_samples, min_time)
        best_copy = max(best_copy, 2 * n * 4 / t)
        triad = _kernel(prg, "triad", bufs[0], bufs[1], bufs[2], np.float32(0.5))
        t = _best_time(queue, triad, gsize, min_samples, min_time)
        best_triad = max(best_triad, 3 * n * 4 / t)
    for b in bufs:
        b.release()
    return best_copy, best_triad


def _fma_variants(info: DeviceInfo, dtype: str) -> list[tuple[int, tuple[int, ...]]]:
    """(vector width, accumulator counts) to try: the native width and twice it."""
    native = max(1, info.native_vector_width_double if dtype == "float64"
                 else info.native_vector_width_float)
    return [(w, tuple(max(1, regs * native // w) for regs in _FMA_REGISTERS))
            for w in (native, 2 * native) if w <= 16]


def _peak_flops(
    ctx: cl.Context, queue: cl.CommandQueue, info: DeviceInfo, dtype: str, min_samples: int,
    min_time: float, iters: int,
) -> float:
    import pyopencl as cl

    ctype = _CTYPE[dtype]
    np_t = np.dtype(dtype).type
    # enough work-items to fill every compute unit several times over
    lanes = max(info.compute_units, 1) * 4096
    best = 0.0
    for width, chains in _fma_variants(info, dtype):
        prg = cl.Program(ctx, _fma_source(ctype, width, chains, iters)).build()
        nwi = max(lanes // width, 64)
        out = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, nwi * width * np.dtype(dtype).itemsize)
        for nacc in chains:
            knl = _kernel(prg, f"fma_{nacc}", out, np_t(0.999), np_t(1e-3))
            t = _best_time(queue, knl, (nwi,), min_samples, min_time)
            best = max(best, 2.0 * width * nacc * iters * nwi / t)
        out.release()
    return best


def run_microbenchmarks(
    device: cl.Device, *, quick: bool = False, min_samples: int = 3, min_time: float = 0.05
) -> Roofline:
    """Measure *device*'s roofline now (a few seconds; ``quick``: smaller arrays, for tests)."""
    import pyopencl as cl

    from feinsum.devices.opencl import device_info, get_context

    info = device_info(device)
    ctx = get_context(device)
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    nbytes = 16 << 20 if quick else min(256 << 20, info.global_mem_size // 16)
    copy_bw, triad_bw = _bandwidths(ctx, queue, nbytes, min_samples, min_time)
    iters = 256 if quick else 1024
    peaks = {"float32": _peak_flops(ctx, queue, info, "float32", min_samples, min_time, iters)}
    if info.has_fp64:
        peaks["float64"] = _peak_flops(ctx, queue, info, "float64", min_samples, min_time, iters)
    return Roofline(
        device_key=info.key,
        copy_bandwidth=copy_bw,
        triad_bandwidth=triad_bw,
        peak_flops=peaks,
        measured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


# }}}


def measure_roofline(
    device: object = None, *, db: Any = None, refresh: bool = False, quick: bool = False
) -> Roofline:
    """The roofline of *device*: read from the database *db* if it holds one for this device,
    else measured by the microbenchmarks (a few seconds) and stored there. *db*: a
    :class:`~feinsum.database.Database`, a path, an SQLAlchemy URL, None (the default
    database) or False (measure, store nothing). ``refresh`` measures again; ``quick``
    measurements are never stored."""
    from feinsum.database.resolve import optional_database
    from feinsum.devices.opencl import device_info, get_device

    dev = get_device(device)
    info = device_info(dev)
    db = optional_database(db)
    if db is not None and not refresh:
        stored = db.get_roofline(info)
        if stored and int(stored.get("version", 1)) >= ROOFLINE_VERSION:
            return Roofline.from_dict(stored)
    roof = run_microbenchmarks(dev, quick=quick)
    if db is not None and not quick:
        db.set_roofline(info, roof.as_dict())
    return roof


# vim: foldmethod=marker
