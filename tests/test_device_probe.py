"""The device probe: run in a child process, so a driver that aborts cannot take the caller
down, and cached per device identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from feinsum.devices import probe as device_probe
from feinsum.devices.opencl import get_device


def _indices(device: Any) -> tuple[int, int]:
    import pyopencl as cl

    for pi, p in enumerate(cl.get_platforms()):
        for di, d in enumerate(p.get_devices()):
            if d == device:
                return pi, di
    raise AssertionError("the default device is in no platform")


def test_default_device_passes_and_is_cached(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "probes.json"
    monkeypatch.setenv(device_probe.ENV_VAR, str(cache))
    dev = get_device()
    assert device_probe.probe(dev, *_indices(dev)) is None
    assert json.loads(cache.read_text())[device_probe._cache_key(dev)] is None
    # the cached verdict answers without a child process
    monkeypatch.setattr(device_probe, "run_probe", lambda *a: pytest.fail("probed again"))
    assert device_probe.probe(dev, *_indices(dev)) is None


def test_a_child_killed_by_the_driver_is_a_reason_not_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = get_device()  # before the probe is broken below
    cache = tmp_path / "probes.json"
    monkeypatch.setenv(device_probe.ENV_VAR, str(cache))
    monkeypatch.setattr(device_probe, "_CHILD", "import os, sys\n"
                        "print('LLVM ERROR: Cannot select: fma', file=sys.stderr, flush=True)\n"
                        "os.abort()")
    why = device_probe.probe(dev, *_indices(dev))
    assert why is not None
    assert "signal 6" in why and "LLVM ERROR: Cannot select" in why
    assert json.loads(cache.read_text()) == {device_probe._cache_key(dev): why}


def test_wrong_values_are_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = get_device()
    monkeypatch.setenv(device_probe.ENV_VAR, "none")
    pi, di = _indices(dev)
    monkeypatch.setattr(device_probe, "_CHILD", device_probe._CHILD.replace(
        "x * x + np.exp(x)", "x * x + np.exp(x) + 1"))
    assert device_probe.probe(dev, pi, di) == "kernel vec_f computed wrong values"


def test_unreadable_cache_is_ignored_and_rewritten(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "probes.json"
    cache.write_text("{not json")
    monkeypatch.setenv(device_probe.ENV_VAR, str(cache))
    dev = get_device()
    assert device_probe.probe(dev, *_indices(dev)) is None
    assert json.loads(cache.read_text())[device_probe._cache_key(dev)] is None
