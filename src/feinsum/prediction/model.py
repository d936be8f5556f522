"""The performance model: a transformed kernel's time on a GPU, predicted without running it.

Each device kernel is bounded by each resource it uses, on the compute unit that gets the
most work-groups (``ceil(groups / compute units)``: the tail of the last wave counts):

* ``issue``: warp instructions over the schedulers (arithmetic, memory instructions, an
  address computation per global access, rolled-loop overhead);
* ``fp``: fp32 and fp64 instructions over their pipes (an FMA is one instruction);
* ``sfu``: special-function instructions (exp2, log2, rsqrt, reciprocal);
* ``lsu``: L1 / local-memory wavefronts: distinct cache lines per global warp access
  (a read resolves two per wavefront), bank conflicts per local one (a broadcast is one),
  stack traffic; the same address loaded twice in one loop body counts once, as the
  compiler loads it once;
* ``dram``: every global array a device kernel reads and writes, once each, over the
  sustained bandwidth (a later launch reads again what an earlier one wrote);
* ``latency``: what one work-group's warps do in sequence: a warp's own instructions,
  one per dependent-issue interval (:attr:`~feinsum.prediction.hardware.Hardware.issue_cycles`),
  and what it waits for (global and local latencies over the accesses a warp keeps in
  flight, dependent FMA chains, barriers), once per wave of resident work-groups
  (occupancy from registers, local memory and work-group size). A grid of few
  work-groups (one per SM looping over its elements) has few resident warps: each
  issues about one instruction per interval, so the SM issues ``resident warps /
  issue_cycles`` per clock, not its schedulers' 4; with enough warps the ``issue`` bound
  takes over (Little's law: 4 schedulers x 4 cycles = 16 warps).

A kernel's compute side is the largest of the instruction stream's bounds (``issue``,
``fp`` and ``sfu`` never add) and the warps' path (``latency`` with the ``lsu`` service on
it); ``dram`` adds what of it does not overlap that (:func:`kernel_seconds`); then the
launch. A translation unit takes its kernels in sequence. The constants are
the hardware's (:mod:`feinsum.prediction.hardware`), none per workload.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from feinsum.devices.info import DeviceInfo, allocated_registers
from feinsum.errors import PredictionError
from feinsum.prediction.accesses import Access
from feinsum.prediction.hardware import Hardware, hardware_for
from feinsum.prediction.kernel_stats import DeviceKernel, KernelStats, Statement
from feinsum.prediction.kernels import read_kernel

#: warp instructions a rolled loop costs per iteration (increment, compare, branch)
LOOP_INSTRUCTIONS = 3.0
#: integer instructions that compute a global access's address
ADDRESS_INSTRUCTIONS = 1.0
RESOURCES = ("issue", "fp", "sfu", "lsu", "dram", "latency", "launch")


@dataclass(frozen=True)
class Prediction:
    """A configuration's predicted time on one GPU, and why."""

    #: predicted seconds (every device kernel, launches included)
    seconds: float
    #: the resource that bounds the time (of :data:`RESOURCES`)
    limit: str
    #: seconds each resource needs (summed over device kernels)
    components: dict[str, float]
    #: the roofline's seconds (flops over peak, bytes over bandwidth) and its fraction
    roofline_seconds: float
    hardware: str
    #: launch geometry and occupancy of each device kernel
    kernels: tuple[dict[str, Any], ...] = ()
    #: what the model could not count exactly
    notes: tuple[str, ...] = field(default=())

    @property
    def fraction(self) -> float:
        """The roofline's time over the predicted time (1: at the roofline)."""
        return self.roofline_seconds / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        return (f"{self.seconds * 1e3:.4g} ms predicted on {self.hardware} "
                f"({self.fraction:.0%} of the roofline; bound by {self.limit})")


def occupancy(k: DeviceKernel, hw: Hardware) -> tuple[int, str]:
    """Work-groups one compute unit holds at once, and what limits them."""
    warps = math.ceil(k.group_size / hw.subgroup)
    per_warp = allocated_registers(k.registers, hw.subgroup)
    limits = {"work-groups": hw.max_groups, "warps": hw.max_warps // warps,
              "registers": hw.registers // max(1, per_warp * warps)}
    if k.local_bytes:
        limits["local memory"] = hw.local_memory // (k.local_bytes + 1024)
    why = min(limits, key=limits.__getitem__)
    return max(1, limits[why]), why


def _latency_cycles(k: DeviceKernel, hw: Hardware) -> float:
    """Cycles one work-group's warps spend in sequence: a warp's own instruction stream,
    one instruction per :attr:`Hardware.issue_cycles` (its dependent-issue interval: what
    no other warp hides when few are resident), and its waits. Each loop body (the
    statements inside the same rolled loops; straight-line code is one) waits per
    iteration for its reads (a global or a local latency; all reads of one iteration are
    issued together, and a rolled loop keeps :attr:`Hardware.memory_parallelism`
    iterations' global reads in flight unless one is under a ``?:``), its special
    functions and, if it accumulates, one dependent FMA; barriers add their cost."""
    bodies: dict[frozenset[str], dict[str, float]] = {}
    for s in k.statements:
        b = bodies.setdefault(s.loop, {"iters": 0.0, "mem": 0.0, "arith": 0.0, "mlp": 1.0})
        b["iters"] = max(b["iters"], s.loop_serial)
        wait = hw.sfu_latency * s.sfu + (hw.fp_latency if s.chain and s.fp else 0.0)
        b["arith"] = max(b["arith"], wait)
        if s.loop:
            b["mlp"] = hw.memory_parallelism
    for a in k.accesses:
        if not a.write and a.loop in bodies:
            body = bodies[a.loop]
            lat = hw.global_latency if a.space == "global" else hw.local_latency
            body["mem"] = max(body["mem"], lat)
            if a.conditional and a.space == "global":
                body["mlp"] = 0.0
    waits = sum(b["iters"] * (b["mem"] / max(1.0, b["mlp"]) + b["arith"])
                for b in bodies.values())
    issue = hw.issue_cycles * warp_instructions(k, hw, ilp=hw.issue_cycles)
    return (k.barriers * hw.barrier_cycles + max(issue, waits)
            + hw.overlap * min(issue, waits))


def warp_instructions(k: DeviceKernel, hw: Hardware, ilp: float = 1.0) -> float:
    """Instructions one warp of device kernel *k* issues over its life (a warp active in
    every statement: the busiest): its statements' arithmetic, its memory instructions
    and address computations, its share of the loop control and checks. *ilp*: the most
    independent copies of a statement that count as one (the arithmetic of a statement
    with ``n`` copies counts ``1 / min(n, ilp)``)."""
    warps = k.groups * math.ceil(k.group_size / hw.subgroup)
    n = sum(s.serial_runs * (s.fp + s.sfu + s.other) / max(1.0, min(s.ilp, ilp * _pipe_share(
        s, hw))) for s in k.statements)
    n += sum(a.serial * _access_instructions(a) for a in k.accesses)
    return n + _control_instructions(k) / warps


def _pipe_share(s: Statement, hw: Hardware) -> float:
    """The share of a scheduler's issue rate the pipe of statement *s*'s arithmetic takes
    (fp64 on Hopper: half; fp32 and integer: all)."""
    rate = hw.fp64_per_clock if s.itemsize == 8 and s.fp else hw.fp32_per_clock
    return min(1.0, rate / hw.issue_per_clock)


def _access_instructions(a: Access) -> float:
    """One warp execution of access *a*: its load or store instructions, and an address
    computation where it is global."""
    return a.instructions + (ADDRESS_INSTRUCTIONS if a.space == "global" else 0.0)


def _control_instructions(k: DeviceKernel) -> float:
    """Warp instructions of *k*'s rolled-loop overhead, checks and pointer increments
    (whole launch)."""
    return (k.loop_iterations * LOOP_INSTRUCTIONS + k.check_instructions
            + k.pointer_increments)


def _wavefronts(a: Access, hw: Hardware) -> float:
    """L1 / local-memory wavefronts of one warp execution of access *a*: a global or stack
    read (both through the L1) resolves :attr:`Hardware.lines_per_wavefront` lines per
    wavefront, a write one line per wavefront, a local access its bank conflicts."""
    if a.space in ("global", "stack") and not a.write:
        return max(1.0, a.wavefronts / hw.lines_per_wavefront)
    return a.wavefronts


def issued(k: DeviceKernel) -> dict[str, float]:
    """Warp instructions device kernel *k* issues (whole launch), by kind: ``fp``,
    ``sfu``, ``other`` (integer, logic, selects), ``memory`` (per access its load or store
    instructions, and an address computation per global access), ``loop`` (rolled-loop overhead)."""
    out = dict.fromkeys(("fp", "sfu", "other", "memory", "loop"), 0.0)
    for s in k.statements:
        out["fp"] += s.warp_runs * s.fp
        out["sfu"] += s.warp_runs * s.sfu
        out["other"] += s.warp_runs * s.other
    for a in k.accesses:
        out["memory"] += a.runs * _access_instructions(a)
    out["loop"] = _control_instructions(k)
    return out


def kernel_components(k: DeviceKernel, hw: Hardware) -> dict[str, float]:
    """Seconds each resource needs for device kernel *k* (DRAM and launch aside)."""
    busiest = math.ceil(k.groups / hw.compute_units) / k.groups
    cycle = 1.0 / hw.clock_hz
    issue = sum(issued(k).values())
    fp32 = fp64 = sfu = lsu = 0.0
    for s in k.statements:
        if s.itemsize == 8:
            fp64 += s.warp_runs * s.fp
        else:
            fp32 += s.warp_runs * s.fp
        sfu += s.warp_runs * s.sfu
    for a in k.accesses:
        lsu += a.runs * _wavefronts(a, hw)
    resident, _ = occupancy(k, hw)
    waves = math.ceil(math.ceil(k.groups / hw.compute_units) / resident)
    fp = fp32 / hw.fp32_per_clock + (fp64 / hw.fp64_per_clock if fp64 else 0.0)
    return {
        "issue": issue * busiest / hw.issue_per_clock * cycle,
        "fp": fp * busiest * cycle,
        "sfu": sfu * busiest / hw.sfu_per_clock * cycle,
        "lsu": lsu * busiest / hw.lsu_per_clock * cycle,
        "latency": waves * _latency_cycles(k, hw) * cycle,
    }


#: bounds of one instruction stream: the fp and special-function instructions are issued
#: instructions too, their pipes run beside the schedulers, so they never add to each other
SAME_STREAM = ("issue", "fp", "sfu")


def kernel_seconds(comp: dict[str, float], hw: Hardware) -> tuple[float, str]:
    """A device kernel's seconds from its bounds, and the name of the bound that weighs
    most. The compute side is the largest of the instruction stream's bounds
    (:data:`SAME_STREAM`, which never add) and the warps' path in sequence (``latency``)
    with the L1 / local-memory service (``lsu``) on it: a warp waits for its own
    wavefronts. DRAM adds what of it does not overlap the compute side
    (:attr:`Hardware.dram_overlap`): a work-group that stages its block and computes on
    it after a barrier has its transfers and its arithmetic in sequence."""
    path = comp.get("latency", 0.0) + comp.get("lsu", 0.0)
    stream = max((r for r in SAME_STREAM if r in comp), key=comp.__getitem__, default=None)
    compute = max(path, comp[stream] if stream else 0.0)
    dram = comp.get("dram", 0.0)
    t = max(compute, dram) + (1.0 - hw.dram_overlap) * min(compute, dram)
    if dram >= compute:
        return t, "dram"
    if stream and comp[stream] >= path:
        return t, stream
    return t, max(("latency", "lsu"), key=lambda r: comp.get(r, 0.0))


def combine(stats: KernelStats, hw: Hardware, roofline_seconds: float | None = None,
            ) -> Prediction:
    """The prediction from a kernel's statistics on *hw*."""
    components = dict.fromkeys(RESOURCES, 0.0)
    notes = list(stats.notes)
    dram = stats.dram_bytes / hw.dram_bandwidth if hw.dram_bandwidth > 0 else 0.0
    if hw.dram_bandwidth <= 0:
        notes.append(f"{hw.name}'s DRAM bandwidth is unknown: no DRAM bound")
    seconds, limits, info = 0.0, dict[str, float](), []
    for k in stats.kernels:
        comp = kernel_components(k, hw)
        comp["dram"] = k.dram_bytes / hw.dram_bandwidth if hw.dram_bandwidth > 0 else 0.0
        t, bound = kernel_seconds(comp, hw)
        t += hw.launch_seconds
        seconds += t
        limits[bound] = limits.get(bound, 0.0) + comp[bound]
        for r, v in comp.items():
            components[r] += v
        components["launch"] += hw.launch_seconds
        resident, why = occupancy(k, hw)
        info.append({"kernel": k.name, "groups": k.groups, "group_size": k.group_size,
                     "local_bytes": k.local_bytes, "registers": k.registers,
                     "stack_bytes": k.stack_bytes, "resident_groups": resident,
                     "occupancy_limit": why, "seconds": t, "limit": bound})
    if roofline_seconds is None:
        flops = sum(s.item_runs * s.flops for k in stats.kernels for s in k.statements)
        size = max((s.itemsize for k in stats.kernels for s in k.statements if s.fp),
                   default=4)
        roofline_seconds = max(flops / hw.peak_flops(size), dram)
    limit = max(limits, key=limits.__getitem__) if limits else "launch"
    return Prediction(seconds, limit, components, roofline_seconds, hw.name, tuple(info),
                      tuple(notes))


def predict(t_unit: Any, device: DeviceInfo | str, lengths: Mapping[str, int], *,
            roofline_seconds: float | None = None) -> Prediction:
    """*t_unit*'s time on GPU *device* (a device model's key or name, or a
    :class:`~feinsum.devices.info.DeviceInfo`) at *lengths* (every length parameter of the
    kernel), predicted from its code without running it. *roofline_seconds*: the
    roofline's time of the computation (default: from the kernel's own flops and DRAM
    bytes)."""
    hw = hardware_for(device)
    try:
        stats = read_kernel(t_unit, lengths, hw)
    except PredictionError:
        raise
    except Exception as exc:  # loopy cannot preprocess, linearize or count the kernel
        raise PredictionError(f"the performance model cannot read this kernel: "
                              f"{type(exc).__name__}: {exc}") from exc
    return combine(stats, hw, roofline_seconds)
