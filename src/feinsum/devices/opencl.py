"""OpenCL devices: choosing a usable one, identifying it completely, cached or lent contexts."""

from __future__ import annotations

import functools
import os
import re
import weakref
from typing import TYPE_CHECKING, Any

from feinsum.errors import DeviceError

if TYPE_CHECKING:
    import pyopencl as cl

from feinsum.devices.info import DeviceInfo


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
    device model matching its name (:func:`feinsum.devices.models.with_model`)."""
    from feinsum.devices.models import with_model

    return with_model(_read_info(device))


def _driver_extras(device: cl.Device) -> dict[str, Any]:
    """What a GPU's driver reports beyond feinsum's identity: the maximum clock and, through
    ``cl_nv_device_attribute_query``, NVIDIA's compute capability (CPUs: nothing, so their
    serialised form is unchanged)."""
    import pyopencl as cl

    if _type_name(device) != "GPU":
        return {}
    out: dict[str, Any] = {}
    try:
        out["clock_mhz"] = int(device.max_clock_frequency)
        if "cl_nv_device_attribute_query" in device.extensions:
            out["compute_capability"] = (f"{int(device.compute_capability_major_nv)}."
                                         f"{int(device.compute_capability_minor_nv)}")
    except (cl.Error, AttributeError):  # a driver that lists the extension but fails it
        pass
    return out


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
        **_driver_extras(device),
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
    from feinsum.devices.probe import probe

    return tuple((d, probe(d, pi, di)) for pi, p in enumerate(platforms)
                 for di, d in enumerate(p.get_devices()))


def all_devices() -> list[tuple[cl.Device, str | None]]:
    """Every OpenCL device with ``None`` if it builds and runs scalar and vector kernels,
    else the reason it cannot (:mod:`feinsum.devices.probe`: checked in a child process,
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
    (:mod:`feinsum.devices.probe`, in a child process, since some drivers abort the process
    that builds a kernel). A device that cannot build a scalar kernel either raises
    :class:`~feinsum.DeviceError`: nothing feinsum makes could run there."""
    from feinsum.devices.probe import probe

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


#: contexts callers lent for their devices (:func:`lend_context`), while they live
_LENT: weakref.WeakValueDictionary[Any, cl.Context] = weakref.WeakValueDictionary()


def lend_context(context: cl.Context) -> None:
    """Let feinsum use *context* (an array context's) for its devices while it lives,
    instead of a context of its own: on a GPU every context costs device memory and
    start-up time, and the code the hook builds is then built in the caller's context."""
    for device in context.devices:
        _LENT[device] = context


def get_context(device: cl.Device) -> cl.Context:
    """The context a caller lent for *device* (:func:`lend_context`) while it lives, else
    one cached context of feinsum's own per device."""
    lent = _LENT.get(device)
    return lent if lent is not None else _own_context(device)


@functools.cache
def _own_context(device: cl.Device) -> cl.Context:
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
