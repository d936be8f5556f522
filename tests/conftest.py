"""Shared fixtures: the OpenCL device every test runs on, a queue, a seeded RNG; the
hook's persistent cache of transformed programs in a directory of the test session's own
(unless ``FEINSUM_CACHE`` says otherwise), so that tests never read what another run
wrote; programs transformed at their first call (``FEINSUM_BACKGROUND=0`` unless set)."""

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


@pytest.fixture(scope="session", autouse=True)
def _program_cache(tmp_path_factory):  # type: ignore[no-untyped-def]
    import os

    # tests see what a program's first call returns: the lazy context transforms at that
    # call unless a test asks for the background (tests/test_background.py)
    os.environ.setdefault("FEINSUM_BACKGROUND", "0")
    if "FEINSUM_CACHE" not in os.environ:
        os.environ["FEINSUM_CACHE"] = str(tmp_path_factory.mktemp("feinsum-programs"))
    yield
