"""The background worker of :mod:`feinsum.hook.background`:
``python -m feinsum.hook.worker DIRECTORY`` reads the program and the options of
:func:`feinsum.transform_program` from ``DIRECTORY/job.pickle`` (written by the process
that started it), transforms the program (which stores it in the persistent cache),
builds it for the device (so that pyopencl's binary cache has it) and writes the program
and its report to ``DIRECTORY/result.pickle`` (or, if the process that started it has
ended meanwhile, removes DIRECTORY: the persistent cache holds the program). It runs at a
lower priority (:data:`NICE`). Exit status 0: done; otherwise the last
line on standard error says why."""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

#: How much lower the worker's scheduling priority is than its parent's.
NICE = 5


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m feinsum.hook.worker DIRECTORY", file=sys.stderr)
        return 2
    directory = Path(args[0])
    job = pickle.loads((directory / "job.pickle").read_bytes())
    with contextlib.suppress(OSError):  # background work: the user's program comes first
        os.nice(NICE)
    from feinsum.devices.opencl import get_context, get_device
    from feinsum.hook.program import transform_program

    options = dict(job["options"])
    device = get_device(options.pop("device"))
    t_unit, report = transform_program(job["t_unit"], device=device, **options)
    if report.changed:
        executor: Any = t_unit.executor(get_context(device))
        if not executor.has_runtime_typed_args:
            executor.translation_unit_info(None)
            if device.type & cl_device_type_cpu():
                dry_run(executor, device)
    if os.getppid() != job.get("parent"):  # its process has ended: the cache has it
        shutil.rmtree(directory, ignore_errors=True)
        return 0
    part = directory / "result.part"
    part.write_bytes(pickle.dumps((t_unit, report), protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(part, directory / "result.pickle")
    return 0


def cl_device_type_cpu() -> int:
    import pyopencl as cl

    return int(cl.device_type.CPU)


#: Inputs the dry run allocates at most (bytes): it runs beside the user's program.
DRY_RUN_BYTES = 256 * 2**20


def dry_run(executor: Any, device: Any) -> None:
    """Run the program once on zeros, so that the OpenCL implementation's kernel cache
    holds what it compiles at a kernel's first launch (PoCL does, per work-group size):
    the process that switches to the program then does not wait for it. Skipped for
    programs with length parameters or more than :data:`DRY_RUN_BYTES` of inputs; any
    failure only means no dry run."""
    import loopy as lp
    import numpy as np
    import pyopencl.array as cla

    from feinsum.devices.opencl import get_queue

    knl = executor.t_unit[executor.entrypoint]
    read = knl.get_read_variables()
    inputs: list[Any] = [a for a in knl.args if isinstance(a, lp.ArrayArg) and a.name in read]
    if any(isinstance(a, lp.ValueArg) for a in knl.args) or not all(
            isinstance(a.shape, tuple) and a.dtype is not None
            and all(isinstance(n, (int, np.integer)) for n in a.shape) for a in inputs):
        return
    shapes = {a.name: tuple(int(n) for n in a.shape) for a in inputs}
    dtypes = {a.name: a.dtype.numpy_dtype for a in inputs}
    if sum(int(np.prod(shapes[n])) * dtypes[n].itemsize for n in shapes) > DRY_RUN_BYTES:
        return
    queue = get_queue(device)
    try:
        arrays = {n: cla.zeros(queue, shapes[n], dtypes[n]) for n in shapes}
        executor(queue, **arrays)
        queue.finish()
    except Exception:  # a dry run is only a head start
        pass


if __name__ == "__main__":
    sys.exit(main())
