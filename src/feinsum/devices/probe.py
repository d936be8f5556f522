"""Whether an OpenCL device builds and runs the code feinsum generates, checked in a child
process and remembered on disk.

Some drivers do not fail politely: PoCL 3.0 from PyPI (LLVM 14) on AVX-512 CPUs it does not
know aborts the whole process (``LLVM ERROR: Cannot select ... fma``) when it builds a
``float16`` or ``double8`` fused multiply-add, the code of every vectorised recipe. So the
probe, which builds scalar and widest-vector kernels and checks their results, runs in a
child process; its verdict is cached per device identity (platform version, device name,
driver version) in ``platformdirs.user_cache_dir("feinsum")/device-probes.json`` (or
``$FEINSUM_PROBE_CACHE``; ``none`` turns the cache off).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyopencl as cl

ENV_VAR = "FEINSUM_PROBE_CACHE"
#: Seconds the child may take (a cold PoCL build of the probe takes about one).
TIMEOUT = 300
#: The verdict of a probe that ran out of time: a busy machine's, so it is not cached.
TIMED_OUT = f"building the probe kernels took over {TIMEOUT} s"

# The child: argv = platform index, device index, expected device name. It prints "ok" or
# the reason, and exits 0 only if every kernel built and computed what numpy computes.
_CHILD = r'''
import sys
import numpy as np
import pyopencl as cl

p, d, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
scalar_only = sys.argv[4:] == ["scalar"]
dev = cl.get_platforms()[p].get_devices()[d]
if dev.name.strip() != name:
    print(f"device {p}:{d} is {dev.name.strip()!r} in a child process, not {name!r}")
    sys.exit(1)
fp64 = "cl_khr_fp64" in dev.extensions and not scalar_only
src = """
__kernel void scalar(__global float *a) { a[0] = exp(a[0]); }
""" + ("" if scalar_only else """
__kernel void vec_f(__global float16 *x) {
    int i = get_global_id(0); x[i] = fma(x[i], x[i], exp(x[i])); }
""") + ("""
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void vec_d(__global double8 *y) {
    int i = get_global_id(0); y[i] = fma(y[i], y[i], exp(y[i])); }
""" if fp64 else "")
ctx = cl.Context([dev])
queue = cl.CommandQueue(ctx)
prg = cl.Program(ctx, src).build()
for kname, dt, n, tol in [("scalar", np.float32, 1, 1e-5),
                          *([] if scalar_only else [("vec_f", np.float32, 64, 1e-5)]),
                          *([("vec_d", np.float64, 32, 1e-12)] if fp64 else [])]:
    x = np.linspace(-1, 1, n * (1 if kname == "scalar" else (16 if dt == np.float32 else 8)),
                    dtype=dt)
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    getattr(prg, kname)(queue, (n,), None, buf)
    got = np.empty_like(x)
    cl.enqueue_copy(queue, got, buf)
    want = np.exp(x) if kname == "scalar" else x * x + np.exp(x)
    if not np.allclose(got, want, rtol=tol, atol=tol):
        print(f"kernel {kname} computed wrong values")
        sys.exit(1)
print("ok")
'''


def _identity(device: cl.Device) -> str:
    return " | ".join(s.strip() for s in (device.platform.name, device.platform.version,
                                           device.vendor, device.name, device.version,
                                           device.driver_version))


def _cache_path() -> Path | None:
    env = os.environ.get(ENV_VAR)
    if env:
        return None if env.lower() == "none" else Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("feinsum")) / "device-probes.json"


def _cache_key(device: cl.Device, scalar_only: bool = False) -> str:
    text = f"{_identity(device)}\n{_CHILD}" + ("\nscalar" if scalar_only else "")
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _read_cache(path: Path) -> dict[str, str | None]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, key: str, verdict: str | None) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache(path) | {key: verdict}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:  # an unwritable cache only costs the next process another probe
        pass


def _reason(proc: subprocess.CompletedProcess[str]) -> str:
    said = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode > 0 and said:  # the child's own verdict, not a driver's warning
        return said[-1][:200]
    lines = [ln.strip() for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip()]
    line = next((ln for ln in lines if ln.startswith("LLVM ERROR")), None) or next(
        (ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")
    if proc.returncode < 0:
        return (f"the driver killed the probe process (signal {-proc.returncode}) building "
                f"or running float16/double8 kernels{': ' + line[:160] if line else ''}")
    return line[:200] or f"the probe exited with status {proc.returncode}"


def run_probe(device: cl.Device, platform_index: int, device_index: int,
              scalar_only: bool = False) -> str | None:
    """Build and run the probe kernels (*scalar_only*: the scalar one) on *device* in a
    child process (no cache): ``None`` if it works, else why not."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(platform_index), str(device_index),
             device.name.strip(), *(["scalar"] if scalar_only else [])],
            capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return TIMED_OUT
    if proc.returncode == 0 and proc.stdout.strip().endswith("ok"):
        return None
    return _reason(proc)


def probe(device: cl.Device, platform_index: int, device_index: int,
          scalar_only: bool = False) -> str | None:
    """``None`` if *device* builds and runs scalar and vector kernels (*scalar_only*: a
    scalar kernel), else why not; the verdict of an earlier probe of the same device
    identity is reused."""
    path = _cache_path()
    key = _cache_key(device, scalar_only)
    if path is not None:
        cached = _read_cache(path)
        if key in cached:
            return cached[key]
    verdict = run_probe(device, platform_index, device_index, scalar_only)
    if path is not None and verdict != TIMED_OUT:
        _write_cache(path, key, verdict)
    return verdict
