"""What identifies an OpenCL device and bounds what a recipe may ask of it
(:class:`DeviceInfo`), with the limits feinsum assumes where OpenCL reports none."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class DeviceInfo:
    """Everything that identifies an OpenCL device and bounds what a recipe may ask of it."""

    platform_name: str
    platform_version: str
    vendor: str
    name: str
    driver_version: str
    opencl_version: str
    device_type: str
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    local_mem_size: int
    global_mem_size: int
    max_constant_buffer_size: int
    preferred_vector_width_float: int
    preferred_vector_width_double: int
    native_vector_width_float: int
    native_vector_width_double: int
    has_fp64: bool
    # What OpenCL does not report, from a device model (feinsum.devices.models; 0: unknown).
    #: threads the hardware runs in lock-step: NVIDIA's warp, AMD's wavefront, a subgroup.
    subgroup_width: int = 0
    #: 32-bit registers one work-item may use before it spills.
    registers_per_work_item: int = 0
    #: 32-bit registers of one compute unit (SM, CU, Xe-core, GPU core), all work-items.
    registers_per_compute_unit: int = 0
    #: L1 data cache of one compute unit in bytes (besides local_mem_size where separate).
    l1_cache_size: int = 0
    #: fp64 peak over fp32 peak (0: no fp64).
    fp64_rate: float = 0.0
    #: peak global memory bandwidth in bytes/s, and fp32 peak in flop/s (roofline).
    peak_bandwidth: float = 0.0
    peak_flops_fp32: float = 0.0
    #: the device model these fields came from ("" for none).
    model: str = ""
    #: NVIDIA's compute capability as "major.minor" (the driver's
    #: ``cl_nv_device_attribute_query``; "" elsewhere or unknown).
    compute_capability: str = ""
    #: the maximum clock the driver reports, in MHz (0: unknown).
    clock_mhz: int = 0

    @property
    def key(self) -> str:
        """A stable identity string: what makes two devices "the same" for timings."""
        return " | ".join(
            (self.vendor, self.name, self.opencl_version, self.driver_version,
             self.platform_version)
        )

    @property
    def steady(self) -> DeviceInfo:
        """This device without what a driver reads from the machine's state rather than the
        device: PoCL's CPU device derives its ``global_mem_size`` from the machine's memory
        when the process starts (8.0, 14.1 and 16.2 GB on one machine within an hour); zero
        here. What code generation may depend on, equal in every process: the hook's cache
        keys."""
        return replace(self, global_mem_size=0)

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "CPU"

    @property
    def cpu_model(self) -> str | None:
        """The CPU model: PoCL names every CPU ``pthread-...``; the rest is in its name."""
        if not self.is_cpu:
            return None
        return re.sub(r"^pthread-(\S+-)?", "", self.name) or self.name

    # {{{ limits recipes take from the device (derived; docs/device-models.rst)

    @property
    def peak_flops_fp64(self) -> float:
        """fp64 peak in flop/s (0: unknown, or no fp64)."""
        return self.peak_flops_fp32 * self.fp64_rate

    def native_lanes(self, itemsize: int) -> int:
        """Native vector lanes of a float (*itemsize* 4) or double (8), at least 1."""
        w = self.native_vector_width_double if itemsize == 8 else self.native_vector_width_float
        return max(1, int(w or 1))

    def vector_registers(self, itemsize: int) -> int:
        """Registers of native vectors of *itemsize*-byte lanes one work-item may hold.
        CPUs (PoCL): :data:`CPU_VECTOR_REGISTERS`; GPUs: its 32-bit registers over the
        vector's size (a double takes two)."""
        if self.is_cpu:
            return CPU_VECTOR_REGISTERS
        regs = self.registers_per_work_item or GENERIC_GPU["registers_per_work_item"]
        return max(1, regs * 4 // (itemsize * self.native_lanes(itemsize)))

    @property
    def register_bytes(self) -> int:
        """Bytes of registers one work-item may use (CPUs: the recipes' AVX-512 file)."""
        if self.is_cpu:
            return CPU_VECTOR_REGISTERS * CPU_VECTOR_BYTES
        return 4 * (self.registers_per_work_item or GENERIC_GPU["registers_per_work_item"])

    @property
    def default_work_items(self) -> int:
        """Work-items of a default work-group: two subgroups (warps, wavefronts), at least
        :data:`MIN_DEFAULT_WORK_ITEMS`, at most the device's limit. CPUs (PoCL, which runs a
        group as a vectorised loop over its items): :data:`MIN_DEFAULT_WORK_ITEMS`."""
        limit = min(self.max_work_group_size, self.max_work_item_sizes[0])
        if self.is_cpu:
            return min(limit, MIN_DEFAULT_WORK_ITEMS)
        width = self.subgroup_width or GENERIC_GPU["subgroup_width"]
        return min(limit, max(MIN_DEFAULT_WORK_ITEMS, 2 * width))

    @property
    def private_bytes_per_work_item(self) -> int:
        """Private memory one work-item may use without leaving the compute unit's fast
        memory. CPUs: :data:`CPU_PRIVATE_BYTES`; GPUs: the compute unit's register file and
        L1 cache shared by one default work-group."""
        if self.is_cpu:
            return CPU_PRIVATE_BYTES
        regs = self.registers_per_compute_unit or GENERIC_GPU["registers_per_compute_unit"]
        l1 = self.l1_cache_size or GENERIC_GPU["l1_cache_size"]
        return (4 * regs + l1) // self.default_work_items

    @property
    def group_private_bytes(self) -> float:
        """Private memory of a whole work-group: CPUs :data:`CPU_GROUP_PRIVATE_BYTES` (PoCL
        runs a group on one thread's stack); GPUs: no limit beyond the per-item one."""
        return CPU_GROUP_PRIVATE_BYTES if self.is_cpu else math.inf

    @property
    def group_accumulators(self) -> float:
        """Accumulators a whole work-group may keep (registers of one compute unit over
        four; CPUs: :data:`CPU_GROUP_ACCUMULATORS`, PoCL's compile time grows with it)."""
        if self.is_cpu:
            return CPU_GROUP_ACCUMULATORS
        return (self.registers_per_compute_unit
                or GENERIC_GPU["registers_per_compute_unit"]) // 4

    # }}}

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON; model fields at their defaults are left out (a real device
        read without a model serialises as before they existed)."""
        d = asdict(self)
        d["max_work_item_sizes"] = list(self.max_work_item_sizes)
        for f in fields(self):
            if f.name in _MODEL_FIELDS and d[f.name] == f.default:
                del d[f.name]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceInfo:
        d = dict(d)
        d["max_work_item_sizes"] = tuple(d["max_work_item_sizes"])
        return cls(**d)


#: Vector registers the recipes assume a CPU work-item has: AVX-512's 32 (of 64 bytes).
#: PoCL maps a work-item's vectors onto them; AVX2's 16 are not modelled (its recipes were
#: measured with this value too).
CPU_VECTOR_REGISTERS, CPU_VECTOR_BYTES = 32, 64
#: Private bytes per work-item on CPUs: PoCL keeps private arrays on the thread's stack, and
#: 64 KiB of them stay in L1/L2.
CPU_PRIVATE_BYTES = 64 << 10
#: Private bytes of a work-group on CPUs: 256 work-items of 56 KiB crashed PoCL 3.1's
#: stack, 128 ran.
CPU_GROUP_PRIVATE_BYTES = 4 << 20
#: Accumulators of a work-group on CPUs: PoCL unrolls a work-group's items into one loop
#: body, and tiles beyond this compiled for minutes.
CPU_GROUP_ACCUMULATORS = 1024
#: The fewest work-items of a default work-group (and the CPUs' default).
MIN_DEFAULT_WORK_ITEMS = 64
#: 32-bit registers a GPU allocates a subgroup at a time: a work-item's count rounds up to
#: this over the subgroup width (NVIDIA: 256 a warp, 8 a work-item; CUDA occupancy
#: calculator's allocation unit size)
REGISTER_ALLOCATION_UNIT = 256


def allocated_registers(registers: int, subgroup_width: int) -> int:
    """The registers one subgroup of work-items needing *registers* each is allocated."""
    unit = REGISTER_ALLOCATION_UNIT
    return -(-registers * subgroup_width // unit) * unit


#: The model fields' values for a GPU no model describes: the smallest of the models'.
GENERIC_GPU = {"subgroup_width": 32, "registers_per_work_item": 128,
               "registers_per_compute_unit": 32768, "l1_cache_size": 32 << 10}
_MODEL_FIELDS = ("subgroup_width", "registers_per_work_item", "registers_per_compute_unit",
                 "l1_cache_size", "fp64_rate", "peak_bandwidth", "peak_flops_fp32", "model",
                 "compute_capability", "clock_mhz")
