"""Workers own devices: which OpenCL devices a dask worker times on, as dask resources.

:class:`DeviceOwner` is a ``distributed.WorkerPlugin``. When it is set up on a worker (the
campaign registers it; ``dask worker --preload feinsum.campaigns.owner`` does it before
the worker joins) it runs the device probe there and declares one resource per device
identity the worker owns (:func:`resource_name` of ``DeviceInfo.key``: the number of such
devices), so that the scheduler sends a job for an identity only to workers that have it.

The devices a worker owns: those ``FEINSUM_DEVICES`` names in its environment (a comma
list of ``PLATFORM:DEVICE`` indices, parts of device names, or ``cpu``/``gpu``), else
every usable device of its machine.

A *physical* device is what timing must not share: every CPU device of a machine is the
one CPU (``HOST/cpu``); another device is ``HOST/PLATFORM:DEVICE``. Its
``distributed.Lock`` (:func:`lock_name`) is held while anything is timed on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from feinsum.errors import CampaignError, DeviceError

ENV_VAR = "FEINSUM_DEVICES"
PLUGIN_NAME = "feinsum-devices"
RESOURCE_PREFIX = "feinsum-device-"


def resource_name(device_key: str) -> str:
    """The dask resource of a device identity (a short hash of ``DeviceInfo.key``)."""
    return RESOURCE_PREFIX + hashlib.sha256(device_key.encode()).hexdigest()[:12]


def lock_name(physical: str) -> str:
    """The name of the ``distributed.Lock`` held while timing on a physical device."""
    return f"feinsum-timing:{physical}"


@dataclass(frozen=True)
class OwnedDevice:
    """A device a worker owns: its identity, its indices there and its physical name."""

    info: dict[str, Any]  # DeviceInfo.as_dict()
    key: str
    platform_index: int
    device_index: int
    physical: str

    @property
    def name(self) -> str:
        return str(self.info["name"])


def _wanted(spec: str, p: int, d: int, device: Any, dtype: str) -> bool:
    spec = spec.strip().lower()
    if spec in ("cpu", "gpu", "accelerator"):
        return dtype.lower() == spec
    if spec and all(c.isdigit() or c == ":" for c in spec):
        pi, _, di = spec.partition(":")
        return int(pi or 0) == p and (not di or int(di) == d)
    return spec in device.name.strip().lower()


def local_devices(selection: str | None = None) -> list[OwnedDevice]:
    """The usable devices of this machine that *selection* (default ``$FEINSUM_DEVICES``,
    unset: all) names; a :class:`~feinsum.errors.DeviceError` if it names none."""
    import pyopencl as cl

    from feinsum.database.records import hostname
    from feinsum.devices.opencl import device_info
    from feinsum.devices.probe import probe

    selection = os.environ.get(ENV_VAR) if selection is None else selection
    specs = [s for s in (selection or "").split(",") if s.strip()]
    host = hostname()
    out: list[OwnedDevice] = []
    refused: list[str] = []
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        raise DeviceError(f"no OpenCL platform on {host} ({exc})") from exc
    for p, platform in enumerate(platforms):
        for d, dev in enumerate(platform.get_devices()):
            info = device_info(dev)
            if specs and not any(_wanted(s, p, d, dev, info.device_type) for s in specs):
                continue
            why = probe(dev, p, d)
            if why is not None:
                refused.append(f"{info.name}: {why}")
                continue
            physical = f"{host}/cpu" if info.is_cpu else f"{host}/{p}:{d}"
            out.append(OwnedDevice(info.as_dict(), info.key, p, d, physical))
    if not out:
        named = f" named by {ENV_VAR}={selection!r}" if specs else ""
        raise DeviceError(f"no usable OpenCL device{named} on {host}"
                          + (f" ({'; '.join(refused)})" if refused else ""))
    return out


class _Owned:
    """A worker's devices, and which of them jobs are using (thread-safe)."""

    def __init__(self, devices: list[OwnedDevice]) -> None:
        self.devices = devices
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def resources(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for d in self.devices:
            name = resource_name(d.key)
            out[name] = out.get(name, 0) + 1
        return out

    @contextlib.contextmanager
    def use(self, key: str) -> Iterator[OwnedDevice]:
        """A free device of identity *key* for the duration of a job."""
        with self._lock:
            free = [d for d in self.devices if d.key == key and d.physical not in self._busy]
            if not free:
                raise CampaignError(f"this worker has no free device {key!r}")
            chosen = free[0]
            self._busy.add(chosen.physical)
        try:
            yield chosen
        finally:
            with self._lock:
                self._busy.discard(chosen.physical)


# one entry per worker in this process (a worker has one set of devices, whichever plugin
# instance set it up: registering the plugin again must not forget devices in use)
_OWNED: dict[int, _Owned] = {}
_OWNED_LOCK = threading.Lock()


def owned(worker: Any) -> _Owned:
    """The devices *worker* owns (probed on first use)."""
    with _OWNED_LOCK:
        found = _OWNED.get(id(worker))
        if found is None:
            found = _OWNED[id(worker)] = _Owned(local_devices())
        return found


def _plugin_base() -> type:
    try:
        from distributed import WorkerPlugin
    except ImportError:  # the class is only used with distributed installed
        return object
    return WorkerPlugin  # type: ignore[no-any-return]


class DeviceOwner(_plugin_base()):  # type: ignore[misc]
    """The worker plugin: probe the worker's devices, declare them as resources."""

    name = PLUGIN_NAME

    async def setup(self, worker: Any) -> None:
        import asyncio

        mine = await asyncio.get_running_loop().run_in_executor(None, owned, worker)
        wanted = mine.resources()
        have = worker.state.total_resources
        if all(have.get(k) == v for k, v in wanted.items()):
            return
        if worker.status.name in ("undefined", "created", "init", "starting"):
            # not registered with the scheduler yet: these are declared when it is
            for k, v in wanted.items():
                have[k] = v
                worker.state.available_resources[k] = v
        else:
            await worker.set_resources(**wanted)


def describe(dask_worker: Any) -> list[dict[str, Any]]:
    """What a worker owns (for ``Client.run``): one dict per device."""
    return [{"key": d.key, "info": d.info, "physical": d.physical, "name": d.name}
            for d in owned(dask_worker).devices]


async def dask_setup(worker: Any) -> None:
    """``dask worker --preload feinsum.campaigns.owner``: own the devices from the start
    (before the worker joins the scheduler, which then knows its resources)."""
    await worker.plugin_add(plugin=DeviceOwner(), name=PLUGIN_NAME)
