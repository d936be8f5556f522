"""The dask side of a campaign: connecting to a scheduler, or a cluster on this machine."""

from __future__ import annotations

import logging
import re
from typing import Any

from feinsum.errors import CampaignError, SchedulerUnreachableError

#: Seconds to wait for a scheduler to answer.
CONNECT_TIMEOUT = 5.0
#: Seconds to wait for a first worker to join.
WORKER_TIMEOUT = 60.0


def require_distributed() -> Any:
    """The ``distributed`` module, or a :class:`~feinsum.errors.CampaignError` saying how
    to install it."""
    try:
        import distributed
    except ImportError:
        raise CampaignError("campaigns run on dask.distributed, which is not installed: "
                            "pip install 'feinsum[campaign]'") from None
    return distributed


def connect(address: str, timeout: float = CONNECT_TIMEOUT) -> Any:
    """A ``distributed.Client`` of the scheduler at *address* (``tcp://HOST:PORT``); a
    :class:`~feinsum.errors.SchedulerUnreachableError` within *timeout* seconds if it does
    not answer."""
    distributed = require_distributed()
    if not re.fullmatch(r"(tcp|tls|ucx|inproc|ws|wss)://[^\s/]+|[^\s:/]+:\d+", address):
        raise SchedulerUnreachableError(
            f"--scheduler {address!r} is not a scheduler address: give tcp://HOST:PORT "
            "(what `dask scheduler` prints)")
    try:
        return distributed.Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SchedulerUnreachableError(
            f"cannot reach the dask scheduler at {address} within {timeout:g} s ({text}); "
            "is `dask scheduler` running there, and is the port open?") from None


def local_cluster(workers_per_device: int = 1) -> Any:
    """A cluster on this machine: a scheduler and, for each usable OpenCL device, that many
    worker processes owning it (``FEINSUM_DEVICES``), each running one job at a time."""
    require_distributed()
    from distributed import Nanny, Scheduler, SpecCluster

    from feinsum import checks
    from feinsum.campaigns.owner import ENV_VAR, local_devices

    workers_per_device = checks.count("workers_per_device", workers_per_device,
                                      maximum=checks.MAX_PROCESSES)
    workers: dict[str, Any] = {}
    for dev in local_devices():
        for k in range(workers_per_device):
            name = f"{dev.name.split()[0]}-{dev.platform_index}:{dev.device_index}-{k}"
            workers[name] = {"cls": Nanny, "options": {
                "nthreads": 1, "env": {ENV_VAR: f"{dev.platform_index}:{dev.device_index}"},
                "preload": ["feinsum.campaigns.owner"], "silence_logs": logging.ERROR}}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": ":0"}}
    return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR,
                       name="feinsum-local")


def dashboard_link(client: Any) -> str | None:
    """The address of the scheduler's dashboard, or None if it serves none (no bokeh)."""
    try:
        services = client.scheduler_info().get("services", {})
    except Exception:  # a scheduler that went away: no dashboard to show
        return None
    if "dashboard" not in services:
        return None
    return str(client.dashboard_link)
