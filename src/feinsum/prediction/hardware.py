"""What the performance model knows of a GPU: its pipes, clocks and latencies (:class:`Hardware`).

A device model (:mod:`feinsum.devices.models`) says what a recipe may ask of a GPU; a
:class:`Hardware` says how fast the GPU does it: per compute unit and clock, the warp
instructions it issues, the fp32/fp64 and special-function pipes, the L1/local-memory
wavefronts, plus the sustained DRAM bandwidth, the latencies and the occupancy limits.
The Hopper figures (H100, H200, H800, GH200) come from NVIDIA's Hopper whitepaper and the
CUDA programming guide, the latencies and the sustained bandwidth from the H200 run of
2026-11-26 (docs/performance-model.rst: the calibration and its check); every other GPU's
are derived from its device model's datasheet numbers and its vendor's architecture, and
are not calibrated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from feinsum.devices.info import DeviceInfo
from feinsum.devices.models import MODELS, model_key
from feinsum.devices.nvidia import family
from feinsum.errors import PredictionError

KiB = 1 << 10


@dataclass(frozen=True)
class Hardware:
    """A GPU as the performance model sees it (rates per compute unit and clock)."""

    name: str
    compute_units: int
    clock_hz: float
    subgroup: int
    #: warp (subgroup) instructions issued per clock: the schedulers
    issue_per_clock: float
    #: warp fp32 / fp64 arithmetic instructions (an FMA is one) per clock
    fp32_per_clock: float
    fp64_per_clock: float
    #: warp special-function instructions (exp2, log2, rsqrt, sin...) per clock
    sfu_per_clock: float
    #: L1 / local-memory wavefronts per clock (one 128-byte line or one conflict-free
    #: local access of 32 banks x 4 bytes each)
    lsu_per_clock: float
    #: distinct lines one wavefront of a global read resolves (tag lookups per wavefront)
    lines_per_wavefront: float
    line_bytes: int
    banks: int
    bank_bytes: int
    #: sustained DRAM bandwidth, bytes/s (what a copy kernel reaches)
    dram_bandwidth: float
    #: cycles from issue to use: a global access (L2 mostly), a local access, an fp op,
    #: a special function; a barrier's cost in cycles
    global_latency: float
    local_latency: float
    fp_latency: float
    sfu_latency: float
    barrier_cycles: float
    #: cycles between two instructions of one warp (its dependent-issue interval: an
    #: instruction waits for the result of an earlier one): what a warp's own instruction
    #: stream costs it when no other warp of its scheduler fills the gaps (independent
    #: copies of a statement: one per cycle of their pipe)
    issue_cycles: float
    #: iterations of a rolled loop whose global reads one warp keeps in flight (the
    #: compiler's software pipelining; a read under a ``?:`` is not pipelined)
    memory_parallelism: float
    #: the share of the shorter of a warp's instruction issue and its waits that the
    #: longer hides (:func:`~feinsum.prediction.model._latency_cycles`)
    overlap: float
    #: the share of the shorter of the DRAM time and the compute side that the longer
    #: hides (:func:`~feinsum.prediction.model.kernel_seconds`): 0, none, on the H200
    #: runs, whose kernels stage a block, wait at a barrier, then compute
    dram_overlap: float
    #: occupancy limits of a compute unit
    max_warps: int
    max_groups: int
    registers: int
    max_registers_per_item: int
    local_memory: int
    #: registers every work-item needs besides its private arrays (indices, addresses)
    base_registers: int
    #: seconds a kernel launch costs the device besides its work
    launch_seconds: float
    #: what these figures were checked against ("": nothing, datasheet derivations only)
    calibrated: str = ""

    @property
    def lanes_fp32(self) -> float:
        return self.fp32_per_clock * self.subgroup

    def peak_flops(self, itemsize: int) -> float:
        """Peak flop/s of fp32 (*itemsize* 4) or fp64 (8) FMAs."""
        rate = self.fp64_per_clock if itemsize == 8 else self.fp32_per_clock
        return 2.0 * rate * self.subgroup * self.compute_units * self.clock_hz


#: The Hopper SM (H100, H200, H800, GH200): 4 schedulers, 128 fp32 and 64 fp64 lanes, 16
#: special-function units, 128 bytes of L1/shared per clock, 64 warps, 32 groups, 228 KiB
#: shared memory (NVIDIA H100 whitepaper; CUDA C++ Programming Guide, compute capability
#: 9.0). Latencies and the sustained bandwidth: calibrated on the H200 run (benchmarks/
#: calibrate_model.py). ``issue_cycles``: the dependent-issue latency of Hopper's fp32 and
#: integer pipes, 4 cycles (Luo et al., "Benchmarking and Dissecting the Nvidia Hopper GPU
#: Architecture", IPDPS 2024; 4 on Volta and Turing, Jia et al. 2018/2019): a warp that
#: runs alone on its scheduler issues about one instruction per 4 cycles (measured on the
#: H200 run of 2026-11-27: 5.4-6.0 cycles per instruction for 2 warps per SM, DG with
#: fp64; 2.0 for the register-tiled fp32 GEMM), 16 warps per SM fill the 4 schedulers.
_HOPPER: dict[str, Any] = dict(
    compute_units=132, clock_hz=1.98e9, subgroup=32, issue_per_clock=4.0,
    fp32_per_clock=4.0, fp64_per_clock=2.0, sfu_per_clock=0.5, lsu_per_clock=1.0,
    lines_per_wavefront=2.0, line_bytes=128, banks=32, bank_bytes=4, global_latency=300.0,
    local_latency=30.0, fp_latency=6.0, sfu_latency=20.0, barrier_cycles=40.0,
    issue_cycles=4.0,
    memory_parallelism=2.0, overlap=0.5, dram_overlap=0.0,
    max_warps=64, max_groups=32, registers=65536, max_registers_per_item=255,
    local_memory=228 * KiB, base_registers=24, launch_seconds=2.5e-6)
#: sustained over datasheet DRAM bandwidth: 4.32 TB/s measured on the H200 (4.8 TB/s sheet)
_SUSTAINED = 0.9

HARDWARE: dict[str, Hardware] = {
    "h100": Hardware("h100", dram_bandwidth=3.35e12 * _SUSTAINED, **_HOPPER),
    "h200": Hardware("h200", dram_bandwidth=4.8e12 * _SUSTAINED,
                     calibrated="H200, NVIDIA OpenCL 3.0 / CUDA 13.0, 2026-11-26 (63 records) "
                     "and 2026-11-27 (163, driver 580.159)",
                     **_HOPPER),
    "gh200": Hardware("gh200", dram_bandwidth=4.0e12 * _SUSTAINED, **_HOPPER),
    "h800": Hardware("h800", dram_bandwidth=3.35e12 * _SUSTAINED,
                     **{**_HOPPER, "fp64_per_clock": 4.0 / 67}),
}

#: What each vendor's compute unit does per clock where no table above has it.
_VENDOR: dict[str, dict[str, Any]] = {
    "nvidia": dict(line_bytes=128, lsu_bytes=128, banks=32, max_warps=64, max_groups=32,
                   base_registers=24, issue=4.0),
    "amd": dict(line_bytes=128, lsu_bytes=64, banks=32, max_warps=32, max_groups=32,
                base_registers=24, issue=1.0),
    "intel": dict(line_bytes=64, lsu_bytes=64, banks=16, max_warps=8, max_groups=8,
                  base_registers=32, issue=2.0),
    "apple": dict(line_bytes=128, lsu_bytes=64, banks=32, max_warps=32, max_groups=24,
                  base_registers=24, issue=1.0),
}
_MODEL_CLOCK_MHZ = {"mi250x": 1700, "mi300x": 2100, "max1550": 1600, "m2max": 1398}


def _vendor(info: DeviceInfo) -> str:
    v = f"{info.vendor} {info.platform_name}".lower()
    for key, words in (("nvidia", ("nvidia",)), ("amd", ("amd", "advanced micro")),
                       ("intel", ("intel",)), ("apple", ("apple",))):
        if any(w in v for w in words):
            return key
    return "nvidia"


def _derived(info: DeviceInfo, name: str) -> Hardware:
    """A GPU's hardware from its device model's fields and its vendor's compute unit."""
    v = _VENDOR[_vendor(info)]
    clock = (info.clock_mhz or _MODEL_CLOCK_MHZ.get(name, 1500)) * 1e6
    sub = info.subgroup_width
    fam = family(info.compute_capability)
    fp32 = info.peak_flops_fp32 / (2.0 * info.compute_units * clock * sub)
    local = fam.shared_per_sm if fam else max(info.local_mem_size, 64 * KiB)
    return Hardware(
        name=name, compute_units=info.compute_units, clock_hz=clock, subgroup=sub,
        issue_per_clock=max(v["issue"], fp32), fp32_per_clock=fp32,
        fp64_per_clock=fp32 * info.fp64_rate, sfu_per_clock=fp32 / 8,
        lsu_per_clock=v["lsu_bytes"] / v["line_bytes"], lines_per_wavefront=1.0,
        line_bytes=v["line_bytes"], banks=v["banks"], bank_bytes=4,
        dram_bandwidth=info.peak_bandwidth * _SUSTAINED, global_latency=400.0,
        local_latency=40.0, fp_latency=6.0, sfu_latency=24.0, barrier_cycles=40.0,
        issue_cycles=4.0,
        memory_parallelism=2.0, overlap=0.5, dram_overlap=0.0,
        max_warps=fam.max_warps if fam else v["max_warps"],
        max_groups=fam.max_groups if fam else v["max_groups"],
        registers=info.registers_per_compute_unit,
        max_registers_per_item=info.registers_per_work_item, local_memory=local,
        base_registers=v["base_registers"], launch_seconds=4e-6)


def hardware_for(device: DeviceInfo | str) -> Hardware:
    """The hardware of *device*: a device model's key or name (``"h200"``, ``"NVIDIA
    H200"``), or a :class:`~feinsum.devices.info.DeviceInfo` (a model's, or a real GPU's:
    by the model its name matches, else by the fields its driver reported).
    :class:`~feinsum.errors.PredictionError` for CPUs and GPUs nothing describes."""
    if isinstance(device, str):
        from feinsum.devices.models import get_model

        try:
            device = get_model(device)
        except Exception as exc:
            raise PredictionError(f"no performance model for {device!r}: {exc}") from exc
    if device.is_cpu:
        raise PredictionError(
            f"the performance model describes GPUs; {device.name!r} is a CPU (name a GPU "
            f"model instead, e.g. --model h200; models: {', '.join(MODELS)})")
    key = model_key(device)
    if key in HARDWARE:
        return HARDWARE[key]
    if key is not None:
        return _derived(replace(MODELS[key].info, clock_mhz=device.clock_mhz
                                or MODELS[key].info.clock_mhz), key)
    if device.subgroup_width and device.peak_flops_fp32 and device.registers_per_compute_unit:
        return _derived(device, device.model or device.name)
    raise PredictionError(
        f"no performance model for the GPU {device.name!r}: it matches no device model and "
        f"its driver reported no compute capability; name a model (--model NAME; models: "
        f"{', '.join(MODELS)})")
