"""OpenCL devices: choosing a usable one, identifying it completely, cached contexts."""

from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from feinsum.errors import DeviceError

if TYPE_CHECKING:
    import pyopencl as cl

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
    # What OpenCL does not report, from a device model (feinsum.device_models; 0: unknown).
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

    @property
    def key(self) -> str:
        """A stable identity string: what makes two devices "the same" for timings."""
        return " | ".join(
            (self.vendor, self.name, self.opencl_version, self.driver_version,
             self.platform_version)
        )

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
#: The model fields' values for a GPU no model describes: the smallest of the models'.
GENERIC_GPU = {"subgroup_width": 32, "registers_per_work_item": 128,
               "registers_per_compute_unit": 32768, "l1_cache_size": 32 << 10}
_MODEL_FIELDS = ("subgroup_width", "registers_per_work_item", "registers_per_compute_unit",
                 "l1_cache_size", "fp64_rate", "peak_bandwidth", "peak_flops_fp32", "model")


def _type_name(device: cl.Device) -> str:
    import pyopencl as cl

    t = device.type
    for flag, name in ((cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
                       (cl.device_type.ACCELERATOR, "ACCELERATOR")):
        if t & flag:
            return name
    return "OTHER"


def device_info(device: cl.Device) -> DeviceInfo:
    """Read a device's identity and limits; what OpenCL does not report comes from the
    device model matching its name (:func:`feinsum.device_models.with_model`)."""
    from feinsum.device_models import with_model

    return with_model(_read_info(device))


def _read_info(device: cl.Device) -> DeviceInfo:
    return DeviceInfo(
        platform_name=device.platform.name.strip(),
        platform_version=device.platform.version.strip(),
        vendor=device.vendor.strip(),
        name=device.name.strip(),
        driver_version=device.driver_version.strip(),
        opencl_version=device.version.strip(),
        device_type=_type_name(device),
        compute_units=int(device.max_compute_units),
        max_work_group_size=int(device.max_work_group_size),
        max_work_item_sizes=tuple(int(n) for n in device.max_work_item_sizes),
        local_mem_size=int(device.local_mem_size),
        global_mem_size=int(device.global_mem_size),
        max_constant_buffer_size=int(device.max_constant_buffer_size),
        preferred_vector_width_float=int(device.preferred_vector_width_float),
        preferred_vector_width_double=int(device.preferred_vector_width_double),
        native_vector_width_float=int(device.native_vector_width_float),
        native_vector_width_double=int(device.native_vector_width_double),
        has_fp64="cl_khr_fp64" in device.extensions,
    )


@functools.cache
def _all_devices() -> tuple[tuple[cl.Device, str | None], ...]:
    import pyopencl as cl

    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        raise DeviceError(
            f"no OpenCL platform found ({exc}); install one, e.g. `pip install 'pyopencl[pocl]'`"
        ) from exc
    from feinsum.device_probe import probe

    return tuple((d, probe(d, pi, di)) for pi, p in enumerate(platforms)
                 for di, d in enumerate(p.get_devices()))


def all_devices() -> list[tuple[cl.Device, str | None]]:
    """Every OpenCL device with ``None`` if it builds and runs scalar and vector kernels,
    else the reason it cannot (:mod:`feinsum.device_probe`: checked in a child process,
    since some drivers abort the process that builds the kernel)."""
    return list(_all_devices())


def usable_devices() -> list[cl.Device]:
    """Devices that build and run kernels here (PoCL 3.0 from PyPI cannot on CPUs its LLVM
    does not know: "unknown target CPU", or an abort on vector code)."""
    return [d for d, why in _all_devices() if why is None]


def _indices(device: cl.Device) -> tuple[int, int]:
    import pyopencl as cl

    for pi, p in enumerate(cl.get_platforms()):
        for di, d in enumerate(p.get_devices()):
            if d == device:
                return pi, di
    raise DeviceError(f"the device {device.name.strip()!r} belongs to no OpenCL platform of "
                      "this process")


@functools.cache
def vector_problem(device: cl.Device) -> str | None:
    """Why *device* cannot build feinsum's vector code (``None``: it can), after the probe
    (:mod:`feinsum.device_probe`, in a child process, since some drivers abort the process
    that builds a kernel). A device that cannot build a scalar kernel either raises
    :class:`~feinsum.DeviceError`: nothing feinsum makes could run there."""
    from feinsum.device_probe import probe

    for d, why in _all_devices():
        if d == device:
            full = why
            break
    else:
        full = probe(device, *_indices(device))
    if full is None:
        return None
    scalar = probe(device, *_indices(device), scalar_only=True)
    if scalar is not None:
        raise DeviceError(
            f"the OpenCL device {device.name.strip()!r} cannot build and run a kernel "
            f"({scalar}); choose another device (`feinsum devices` lists them) or install "
            "a working driver (on CPUs, the system PoCL: apt-get install pocl-opencl-icd)")
    return full


def has_vector_code(knl: Any) -> bool:
    """Whether loopy kernel *knl* uses OpenCL vector types (``vec`` loops or axes,
    ``vloadN``/``vstoreN``): code a device with a :func:`vector_problem` cannot build."""
    from loopy.kernel.array import VectorArrayDimTag
    from loopy.kernel.data import VectorizeTag
    from loopy.kernel.instruction import CInstruction

    if any(isinstance(t, VectorizeTag) for iname in knl.inames.values() for t in iname.tags):
        return True
    for decl in [*knl.args, *knl.temporary_variables.values()]:
        if any(isinstance(t, VectorArrayDimTag) for t in getattr(decl, "dim_tags", None) or ()):
            return True
    return any(isinstance(i, CInstruction) and ("vload" in i.code or "vstore" in i.code)
               for i in knl.instructions)


def scalar_view(info: DeviceInfo) -> DeviceInfo:
    """*info* as recipes should see a device that cannot build vector code: vector widths
    of 1 (the identity, ``info.key``, is unchanged)."""
    from dataclasses import replace

    return replace(info, native_vector_width_float=1, native_vector_width_double=1,
                   preferred_vector_width_float=1, preferred_vector_width_double=1)


def _from_ctx_string(spec: str) -> cl.Device:
    import pyopencl as cl

    parts = spec.split(":")
    platforms = cl.get_platforms()
    try:
        p = platforms[int(parts[0] or 0)]
        devices = p.get_devices()
        d = devices[int(parts[1])] if len(parts) > 1 and parts[1] else devices[0]
    except (ValueError, IndexError) as exc:
        raise DeviceError(
            f"PYOPENCL_CTX/device {spec!r} names no device; `feinsum devices` lists them"
        ) from exc
    return d


def get_device(device: object = None) -> cl.Device:
    """Resolve *device*: a ``pyopencl.Device``, ``"platform:device"`` indices, a substring of
    the device name, or ``None`` for the default (``PYOPENCL_CTX`` if set, else the first usable
    GPU, else the first usable CPU)."""
    import pyopencl as cl

    if isinstance(device, cl.Device):
        return device
    if device is None:
        env = os.environ.get("PYOPENCL_CTX")
        if env:
            return _from_ctx_string(env)
        usable = usable_devices()
        if not usable:
            reasons = "; ".join(f"{d.name}: {why}" for d, why in _all_devices())
            raise DeviceError(
                "no OpenCL device can build kernels here"
                + (f" ({reasons})" if reasons else "")
                + ". On CPUs newer than PoCL 3.0's LLVM knows, install the system PoCL "
                "(`apt-get install pocl-opencl-icd`), as the README's set-up does."
            )
        gpus = [d for d in usable if _type_name(d) == "GPU"]
        return (gpus or usable)[0]
    if isinstance(device, str):
        if re.fullmatch(r"\d*(:\d*)?", device):
            return _from_ctx_string(device)
        matches = [d for d, _ in _all_devices() if device.lower() in d.name.lower()]
        if not matches:
            raise DeviceError(f"no OpenCL device matches {device!r}; `feinsum devices` lists them")
        return matches[0]
    raise DeviceError(f"cannot interpret {device!r} as an OpenCL device")


@functools.cache
def get_context(device: cl.Device) -> cl.Context:
    """One cached context per device."""
    import pyopencl as cl

    return cl.Context([device])


def get_queue(device: cl.Device, profiling: bool = False) -> cl.CommandQueue:
    """A new command queue on the device's cached context."""
    import pyopencl as cl

    if profiling:
        return cl.CommandQueue(
            get_context(device), properties=cl.command_queue_properties.PROFILING_ENABLE
        )
    return cl.CommandQueue(get_context(device))
