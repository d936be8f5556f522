"""Helpers of the database tests (tests/test_database*.py): devices, einsums, measurements.

The fixtures (each test on SQLite and PostgreSQL) are in ``database_fixtures.py``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any


def make_device(**overrides: Any) -> Any:
    from feinsum.devices.opencl import DeviceInfo

    fields: dict[str, Any] = {
        "platform_name": "Portable Computing Language",
        "platform_version": "OpenCL 3.0 PoCL 3.1",
        "vendor": "GenuineIntel",
        "name": "pthread-Intel(R) Xeon(R) CPU",
        "driver_version": "3.1",
        "opencl_version": "OpenCL 3.0 PoCL HSTR",
        "device_type": "CPU",
        "compute_units": 2,
        "max_work_group_size": 4096,
        "max_work_item_sizes": (4096, 4096, 4096),
        "local_mem_size": 1 << 20,
        "global_mem_size": 1 << 34,
        "max_constant_buffer_size": 1 << 20,
        "preferred_vector_width_float": 16,
        "preferred_vector_width_double": 8,
        "native_vector_width_float": 16,
        "native_vector_width_double": 8,
        "has_fp64": True,
    }
    fields.update(overrides)
    return DeviceInfo(**fields)


def make_identity(name: str = "a", structure: str = "s", lengths: dict[str, int] | None = None
                  ) -> Any:
    """A stand-in for a canonical einsum (keys and text given, no canonicalisation)."""
    from feinsum.database import EinsumIdentity

    return EinsumIdentity(
        canonical_key=f"fek1-{name}",
        structure_key=f"fek1-struct-{structure}",
        canonical_text=f"sum -> [i0] | {name}",
        spec_json='{"format":"feinsum.BatchedEinsum"}',
        lengths={"n0": 50000} if lengths is None else lengths,
    )


def make_measurement(ident: Any = None, device: Any = None, *, recipe: str = "generic",
                     version: str = "v1", params: dict[str, Any] | None = None,
                     median: float = 1e-3, **kw: Any) -> Any:
    from feinsum.database import NewMeasurement

    kw.setdefault("samples", [median * 0.9, median, median * 1.2])
    return NewMeasurement(
        einsum=make_identity() if ident is None else ident,
        device=make_device() if device is None else device,
        recipe_name=recipe,
        recipe_version=version,
        params={"tile": 8} if params is None else params,
        flops=2e9,
        bytes=1e8,
        **kw,
    )


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)  # type: ignore[misc]
