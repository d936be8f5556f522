"""Shared fixtures: the OpenCL device every test runs on, a queue, a seeded RNG."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="session")
def cl_device():  # type: ignore[no-untyped-def]
    """The default usable OpenCL device (PoCL on CPU in CI)."""
    from feinsum.devices.opencl import get_device

    return get_device()


@pytest.fixture(scope="session")
def cl_context(cl_device):  # type: ignore[no-untyped-def]
    from feinsum.devices.opencl import get_context

    return get_context(cl_device)


@pytest.fixture
def cl_queue(cl_device):  # type: ignore[no-untyped-def]
    from feinsum.devices.opencl import get_queue

    return get_queue(cl_device)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
