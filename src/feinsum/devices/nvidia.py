"""NVIDIA GPUs no device model describes: their family's limits from what the driver reports.

NVIDIA's OpenCL driver reports the compute capability (``cl_nv_device_attribute_query``:
``CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV``/``MINOR_NV``, read by
:func:`feinsum.devices.opencl.device_info`), and the compute capability fixes what OpenCL does
not report: registers per SM and per thread, the combined L1/shared memory of an SM, the
fp32 lanes and the fp64 rate (CUDA C++ Programming Guide, "Compute Capabilities":
technical specifications per compute capability and arithmetic-instruction throughput).
A GPU of a capability between two rows takes the lower row's figures (a newer minor
revision keeps its major's SM); one older than the table's first row gets none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from feinsum.devices.info import DeviceInfo

KiB = 1 << 10


@dataclass(frozen=True)
class Family:
    """The SM of one compute capability (per SM unless named per thread)."""

    arch: str
    registers: int
    registers_per_thread: int
    l1_shared: int
    fp32_lanes: int
    fp64_rate: float
    max_warps: int
    max_groups: int
    #: shared memory a work-group may use (opt-in), and all of an SM's groups together
    shared_per_sm: int


#: By compute capability (major, minor).
FAMILIES: dict[tuple[int, int], Family] = {
    (7, 0): Family("Volta", 65536, 255, 128 * KiB, 64, 1 / 2, 64, 32, 96 * KiB),
    (7, 5): Family("Turing", 65536, 255, 96 * KiB, 64, 1 / 32, 32, 16, 64 * KiB),
    (8, 0): Family("Ampere (A100)", 65536, 255, 192 * KiB, 64, 1 / 2, 64, 32, 164 * KiB),
    (8, 6): Family("Ampere (GA10x)", 65536, 255, 128 * KiB, 128, 1 / 64, 48, 16, 100 * KiB),
    (8, 9): Family("Ada Lovelace", 65536, 255, 128 * KiB, 128, 1 / 64, 48, 24, 100 * KiB),
    (9, 0): Family("Hopper", 65536, 255, 256 * KiB, 128, 1 / 2, 64, 32, 228 * KiB),
    (10, 0): Family("Blackwell (B200)", 65536, 255, 256 * KiB, 128, 1 / 2, 64, 32,
                    228 * KiB),
    (12, 0): Family("Blackwell (GeForce)", 65536, 255, 128 * KiB, 128, 1 / 64, 48, 32,
                    100 * KiB),
}


def parse_capability(text: str) -> tuple[int, int] | None:
    """``"9.0"`` as ``(9, 0)`` (``None``: empty or not a capability)."""
    major, _, minor = text.partition(".")
    if not (major.isdigit() and (minor or "0").isdigit()):
        return None
    return int(major), int(minor or 0)


def family(capability: str) -> Family | None:
    """The family of compute capability *capability* (``"8.6"``); ``None``: unknown or older
    than Volta."""
    cc = parse_capability(capability)
    if cc is None:
        return None
    known = [k for k in FAMILIES if k <= cc]
    return FAMILIES[max(known)] if known else None


def with_family(info: DeviceInfo) -> DeviceInfo:
    """*info* (an NVIDIA GPU no model matches) with the model fields its compute capability
    fixes; unchanged where the driver reported none. Peak fp32 comes from the SMs, lanes and
    the reported clock; the memory bandwidth is not reported and stays unknown (0)."""
    fam = family(info.compute_capability)
    if fam is None or info.is_cpu:
        return info
    flops = 2.0 * info.compute_units * fam.fp32_lanes * info.clock_mhz * 1e6
    return replace(
        info, subgroup_width=32, registers_per_work_item=fam.registers_per_thread,
        registers_per_compute_unit=fam.registers, l1_cache_size=fam.l1_shared,
        fp64_rate=fam.fp64_rate if info.has_fp64 else 0.0, peak_flops_fp32=flops,
        model=f"NVIDIA sm_{info.compute_capability.replace('.', '')} ({fam.arch}), "
              "from the driver's compute capability")
