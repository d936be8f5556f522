"""Device models: the GPUs feinsum's users have, as :class:`~feinsum.devices.info.DeviceInfo` data.

Each model holds what OpenCL reports for the device (as its driver names it) and what it does
not (subgroup width, registers, L1, fp64 rate, peak bandwidth and flops), from the vendors'
whitepapers and datasheets; ``docs/device-models.rst`` lists the sources. Recipes compute
their spaces and defaults for a model exactly as for a real device, so a GPU's
configurations can be generated, checked and run (on a CPU) without one. A real device read
by :func:`feinsum.devices.opencl.device_info` gets the model fields of the model its name matches
(:func:`with_model`); its identity (:attr:`~feinsum.devices.info.DeviceInfo.key`) is its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from feinsum.devices.info import DeviceInfo
from feinsum.devices.nvidia import with_family
from feinsum.errors import DeviceError

KiB, GiB = 1 << 10, 1 << 30


@dataclass(frozen=True)
class DeviceModel:
    """A device model: its info, the substrings of a device name it matches, its sources."""

    info: DeviceInfo
    matches: tuple[str, ...]
    sources: tuple[str, ...]


def _gpu(platform: str, platform_version: str, vendor: str, name: str, driver: str,
         opencl: str, **kw: Any) -> DeviceInfo:
    return DeviceInfo(platform_name=platform, platform_version=platform_version,
                      vendor=vendor, name=name, driver_version=driver, opencl_version=opencl,
                      device_type="GPU", **kw)


_NV = ("NVIDIA CUDA", "OpenCL 3.0 CUDA 12.4.131", "NVIDIA Corporation")
_NV_COMMON: dict[str, Any] = dict(max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 64),
                  local_mem_size=48 * KiB, max_constant_buffer_size=64 * KiB,
                  preferred_vector_width_float=1, preferred_vector_width_double=1,
                  native_vector_width_float=1, native_vector_width_double=1, has_fp64=True,
                  subgroup_width=32, registers_per_work_item=255,
                  registers_per_compute_unit=65536, fp64_rate=0.5)
_HOPPER: dict[str, Any] = dict(_NV_COMMON, compute_capability="9.0", clock_mhz=1980)
_AMD = ("AMD Accelerated Parallel Processing", "OpenCL 2.1 AMD-APP (3614.0)",
        "Advanced Micro Devices, Inc.")
_AMD_COMMON: dict[str, Any] = dict(max_work_group_size=256, max_work_item_sizes=(1024, 1024, 1024),
                   local_mem_size=64 * KiB, max_constant_buffer_size=4 * GiB,
                   preferred_vector_width_float=1, preferred_vector_width_double=1,
                   native_vector_width_float=1, native_vector_width_double=1, has_fp64=True,
                   subgroup_width=64, registers_per_work_item=512,
                   registers_per_compute_unit=4 * 512 * 64)

MODELS: dict[str, DeviceModel] = {
    "h100": DeviceModel(
        _gpu(*_NV, "NVIDIA H100 80GB HBM3", "550.54.15", "OpenCL 3.0 CUDA", compute_units=132,
             global_mem_size=80 * GiB, l1_cache_size=256 * KiB, peak_bandwidth=3.35e12,
             peak_flops_fp32=66.9e12, model="NVIDIA H100 SXM5 80GB", **_HOPPER),
        ("H100",),
        ("NVIDIA H100 Tensor Core GPU Architecture (whitepaper, 2022): 132 SMs, 65536 "
         "32-bit registers and 256 KB of combined L1/shared memory per SM, 255 registers "
         "per thread, FP64 at half the FP32 rate",
         "NVIDIA H100 Tensor Core GPU datasheet: SXM5 FP32 66.9 TFLOPS, FP64 33.5 TFLOPS, "
         "3.35 TB/s HBM3",
         "NVIDIA OpenCL driver (clinfo): 48 KiB local memory, work-groups of 1024, vector "
         "widths 1")),
    # "GH200" contains "H200": the GH200 is listed first and the longest pattern wins
    "gh200": DeviceModel(
        _gpu(*_NV, "NVIDIA GH200 480GB", "550.54.15", "OpenCL 3.0 CUDA", compute_units=132,
             global_mem_size=96 * GiB, l1_cache_size=256 * KiB, peak_bandwidth=4.0e12,
             peak_flops_fp32=67e12, model="NVIDIA GH200 Grace Hopper Superchip (96 GB HBM3)",
             **_HOPPER),
        ("GH200",),
        ("NVIDIA GH200 Grace Hopper Superchip datasheet: the H100 GPU (132 SMs, FP32 67 "
         "TFLOPS, FP64 34 TFLOPS) with 96 GB HBM3 at 4 TB/s (the 144 GB HBM3e version: "
         "4.9 TB/s)",
         "NVIDIA Grace Hopper Superchip Architecture (whitepaper, 2023): the Hopper SM, as "
         "H100")),
    "h200": DeviceModel(
        _gpu(*_NV, "NVIDIA H200", "580.159.04", "OpenCL 3.0 CUDA", compute_units=132,
             global_mem_size=150109880320, l1_cache_size=256 * KiB, peak_bandwidth=4.8e12,
             peak_flops_fp32=66.9e12, model="NVIDIA H200 SXM 141GB", **_HOPPER),
        ("H200",),
        ("NVIDIA H200 Tensor Core GPU datasheet: SXM 141 GB HBM3e at 4.8 TB/s, FP32 67 "
         "TFLOPS, FP64 34 TFLOPS",
         "NVIDIA H100 Tensor Core GPU Architecture (whitepaper, 2022): the H200 has the "
         "H100's GPU (132 SMs of the Hopper SM) with more and faster memory",
         "NVIDIA OpenCL 3.0 driver 580.159 on an H200 (feinsum's first GPU run, "
         "2026-11-26): 132 compute units, 143155 MiB, 48 KiB local memory, work-groups of "
         "1024, vector widths 1; roofline measured there: 4.32 TB/s, 62.5 TFLOP/s fp32, "
         "32.7 fp64")),
    "h800": DeviceModel(
        _gpu(*_NV, "NVIDIA H800", "550.54.15", "OpenCL 3.0 CUDA", compute_units=132,
             global_mem_size=80 * GiB, l1_cache_size=256 * KiB, peak_bandwidth=3.35e12,
             peak_flops_fp32=66.9e12, model="NVIDIA H800 SXM5 80GB",
             **{**_HOPPER, "fp64_rate": 1 / 67}),
        ("H800",),
        ("NVIDIA H800 Tensor Core GPU datasheet: SXM5 80 GB HBM3 at 3.35 TB/s, FP32 67 "
         "TFLOPS, FP64 1 TFLOPS (the H100's SM with fp64 cut to 1/67 of fp32)",
         "NVIDIA H100 Tensor Core GPU Architecture (whitepaper, 2022): the Hopper SM")),
    "a100": DeviceModel(
        _gpu(*_NV, "NVIDIA A100-SXM4-80GB", "550.54.15", "OpenCL 3.0 CUDA", compute_units=108,
             global_mem_size=80 * GiB, l1_cache_size=192 * KiB, peak_bandwidth=2.039e12,
             peak_flops_fp32=19.5e12, model="NVIDIA A100 SXM4 80GB", compute_capability="8.0",
             clock_mhz=1410, **_NV_COMMON),
        ("A100",),
        ("NVIDIA A100 Tensor Core GPU Architecture (whitepaper, 2020): 108 SMs, 65536 "
         "32-bit registers and 192 KB of combined L1/shared memory per SM, 255 registers "
         "per thread",
         "NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5 TFLOPS, FP64 9.7 TFLOPS "
         "(non-tensor), 2,039 GB/s HBM2e (80GB SXM)",
         "NVIDIA OpenCL driver (clinfo): as H100")),
    "mi250x": DeviceModel(
        _gpu(*_AMD, "gfx90a:sramecc+:xnack-", "3614.0 (HSA1.1,LC)", "OpenCL 2.0 ",
             compute_units=110, global_mem_size=64 * GiB, l1_cache_size=16 * KiB,
             fp64_rate=1.0, peak_bandwidth=1.6384e12, peak_flops_fp32=23.95e12,
             model="AMD Instinct MI250X, one GCD", **_AMD_COMMON),
        ("gfx90a", "MI250"),
        ("AMD Instinct MI200 Series Accelerator and CDNA 2 Architecture (whitepaper): two "
         "GCDs of 110 CUs, each CU 4 SIMDs of 512 VGPRs (arch + acc) x 64 lanes, 16 KB L1, "
         "64 KB LDS, 64-wide wavefronts",
         "AMD Instinct MI250X datasheet: FP32 and FP64 vector 47.9 TFLOPS, 3.2768 TB/s "
         "HBM2e, 128 GB (per GCD, as OpenCL sees one: half of each)",
         "AMD CDNA 2 Instruction Set Architecture reference: 512 VGPRs per work-item")),
    "mi300x": DeviceModel(
        _gpu(*_AMD, "gfx942:sramecc+:xnack-", "3614.0 (HSA1.1,LC)", "OpenCL 2.0 ",
             compute_units=304, global_mem_size=192 * GiB, l1_cache_size=32 * KiB,
             fp64_rate=0.5, peak_bandwidth=5.3e12, peak_flops_fp32=163.4e12,
             model="AMD Instinct MI300X", **_AMD_COMMON),
        ("gfx942", "MI300"),
        ("AMD CDNA 3 Architecture (whitepaper, 2023): 304 CUs, 512 VGPRs x 64 lanes per "
         "SIMD, 4 SIMDs and 32 KB L1 per CU, 64 KB LDS",
         "AMD Instinct MI300X datasheet: FP32 vector 163.4 TFLOPS, FP64 vector 81.7 TFLOPS, "
         "5.3 TB/s HBM3, 192 GB")),
    "max1550": DeviceModel(
        _gpu("Intel(R) OpenCL Graphics", "OpenCL 3.0 ", "Intel(R) Corporation",
             "Intel(R) Data Center GPU Max 1550", "23.43.27642.40", "OpenCL 3.0 NEO ",
             compute_units=1024, max_work_group_size=1024,
             max_work_item_sizes=(1024, 1024, 1024), local_mem_size=128 * KiB,
             global_mem_size=128 * GiB, max_constant_buffer_size=4 * GiB,
             preferred_vector_width_float=1, preferred_vector_width_double=1,
             native_vector_width_float=1, native_vector_width_double=1, has_fp64=True,
             subgroup_width=16, registers_per_work_item=128,
             registers_per_compute_unit=8 * 128 * 16, l1_cache_size=64 * KiB,
             fp64_rate=1.0, peak_bandwidth=3.2768e12, peak_flops_fp32=52.4e12,
             model="Intel Data Center GPU Max 1550"),
        ("GPU Max", "Max 1550"),
        ("Intel Data Center GPU Max Series product brief: 128 Xe-cores (1024 vector "
         "engines, which OpenCL reports as compute units), 128 GB HBM2e at 3.2768 TB/s, "
         "FP32 and FP64 52.4 TFLOPS",
         "Intel oneAPI GPU Optimization Guide, Xe-HPC architecture: 8 threads of 128 "
         "64-byte GRF registers per vector engine (SIMD16: 128 per work-item), 512 KB "
         "L1/SLM per Xe-core (128 KB SLM)")),
    "m2max": DeviceModel(
        _gpu("Apple", "OpenCL 1.2 (Nov 13 2023 21:40:23)", "Apple", "Apple M2 Max",
             "1.2 1.0", "OpenCL 1.2 ", compute_units=38, max_work_group_size=256,
             max_work_item_sizes=(256, 256, 256), local_mem_size=32 * KiB,
             global_mem_size=64 * GiB, max_constant_buffer_size=1 * GiB,
             preferred_vector_width_float=1, preferred_vector_width_double=0,
             native_vector_width_float=1, native_vector_width_double=0, has_fp64=False,
             subgroup_width=32, registers_per_work_item=128,
             registers_per_compute_unit=208 * KiB // 4, l1_cache_size=8 * KiB,
             fp64_rate=0.0, peak_bandwidth=400e9, peak_flops_fp32=13.6e12,
             model="Apple M2 Max (38-core GPU)"),
        ("Apple M",),
        ("Apple M2 Pro and M2 Max press release (January 2023): 38 GPU cores, 400 GB/s "
         "unified memory, 13.6 TFLOPS FP32",
         "Apple Metal feature set tables: 32-wide SIMD-groups, 32 KB threadgroup memory, "
         "no double precision",
         "Registers and L1 are not published: about 208 KB of registers per core and 128 "
         "per thread as measured by third parties (independent Metal microbenchmarks)")),
}


def models() -> list[DeviceInfo]:
    """Every device model's :class:`~feinsum.devices.info.DeviceInfo`."""
    return [m.info for m in MODELS.values()]


def get_model(name: str) -> DeviceInfo:
    """The model named *name* (a key of :data:`MODELS`, or a substring of a device name)."""
    if name in MODELS:
        return MODELS[name].info
    found = model_for(name)
    if found is None:
        raise DeviceError(f"no device model {name!r}; models: {', '.join(MODELS)}")
    return found.info


def model_for(name: str) -> DeviceModel | None:
    """The model whose pattern occurs in device name *name*, the longest such pattern
    winning ("NVIDIA GH200 480GB" is a GH200, not an H200); ``None``: none."""
    found = [(len(p), m) for m in MODELS.values() for p in m.matches
             if p.lower() in name.lower()]
    return max(found, key=lambda f: f[0])[1] if found else None


def model_key(info: DeviceInfo) -> str | None:
    """The key of :data:`MODELS` describing *info* (a model's info or a real device that
    matches one by name); ``None``: none."""
    for key, model in MODELS.items():
        if model.info is info or (info.model and model.info.model == info.model):
            return key
    found = model_for(info.name)
    return next((k for k, v in MODELS.items() if v is found), None)


_MODEL_ONLY = ("subgroup_width", "registers_per_work_item", "registers_per_compute_unit",
               "l1_cache_size", "fp64_rate", "peak_bandwidth", "peak_flops_fp32", "model")


def with_model(info: DeviceInfo) -> DeviceInfo:
    """*info* (a real GPU) with the fields OpenCL does not report taken from the model its
    name matches. An NVIDIA GPU no model matches takes its family's from the compute
    capability its driver reports (:func:`feinsum.devices.nvidia.with_family`); CPUs and
    other unmatched GPUs are unchanged (the recipes then assume the generic GPU of
    :data:`feinsum.devices.info.GENERIC_GPU`). The identity is unchanged."""
    if info.is_cpu or info.model:
        return info
    m = model_for(info.name)
    if m is None:
        return with_family(info)
    return replace(info, **{f: getattr(m.info, f) for f in _MODEL_ONLY})
