"""A DG step through arraycontext + pytato, with feinsum transforming what pytato compiles.

    .venv/bin/python examples/arraycontext_dg.py [--elements 20000] [--db none|PATH]

The step is a divergence (``xre,rij,xej->ei``), a face lift (``ifj,fe,fej->ei``) and an
elementwise combination, float64, written once against the array-context interface. It
runs through arraycontext's ``PytatoPyOpenCLArrayContext`` and through feinsum's drop-in
subclass of it (one line changes), checks that both give numpy's result, prints what
feinsum did (``actx.feinsum_last_report``) and times both, and numpy, in the same run.

Needs arraycontext and pytato (``scripts/bootstrap test`` installs them from the wheels
built from their repositories: docs/installation.rst).
"""

from __future__ import annotations

import argparse
import timeit
import warnings

import numpy as np


def dg_step(actx, J, D, v, L, Jf, flux):  # type: ignore[no-untyped-def]
    div = actx.einsum("xre,rij,xej->ei", J, D, v)
    lift = actx.einsum("ifj,fe,fej->ei", L, Jf, flux)
    return actx.np.sin(div) + 0.5 * lift


def numpy_step(J, D, v, L, Jf, flux):  # type: ignore[no-untyped-def]
    div = np.einsum("xre,rij,xej->ei", J, D, v, optimize=True)
    lift = np.einsum("ifj,fe,fej->ei", L, Jf, flux, optimize=True)
    return np.sin(div) + 0.5 * lift


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=20_000)
    parser.add_argument("--db", default="none",
                        help="feinsum's timing database: a path, or none for recipe defaults")
    args = parser.parse_args()

    import pyopencl.tools as clt
    from arraycontext import PytatoPyOpenCLArrayContext

    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.opencl import get_device, get_queue

    E = args.elements
    rng = np.random.default_rng(0)
    host = {"J": rng.random((3, 3, E)), "D": rng.random((3, 35, 35)),
            "v": rng.random((3, E, 35)), "L": rng.random((35, 4, 15)),
            "Jf": rng.random((4, E)), "flux": rng.random((4, E, 15))}
    reference = numpy_step(**host)

    queue = get_queue(get_device())
    contexts = {
        "pytato": PytatoPyOpenCLArrayContext(
            queue, clt.MemoryPool(clt.ImmediateAllocator(queue))),
        "pytato + feinsum": FeinsumPytatoPyOpenCLArrayContext(
            queue, feinsum_db=False if args.db == "none" else args.db),
    }
    times = {"numpy": min(timeit.repeat(lambda: numpy_step(**host), number=1, repeat=3))}
    for name, actx in contexts.items():
        arrays = {k: actx.from_numpy(a) for k, a in host.items()}
        step = actx.compile(lambda **kw: dg_step(actx, **kw))  # noqa: B023
        with warnings.catch_warnings():  # arraycontext warns that it transforms nothing
            warnings.simplefilter("ignore")
            out = actx.to_numpy(step(**arrays))
            if name == "pytato + feinsum":
                # the first call ran untransformed while a background process transformed
                # the program; wait for it, and the next call runs the transformed one
                actx.feinsum_wait()
                out = actx.to_numpy(step(**arrays))
        err = np.abs(out - reference).max() / np.abs(reference).max()
        print(f"{name}: largest difference to numpy {err:.1e} (relative)")
        if name == "pytato + feinsum":
            print(actx.feinsum_last_report)

        def run(step=step, arrays=arrays) -> None:  # type: ignore[no-untyped-def]
            step(**arrays)
            queue.finish()

        times[name] = min(timeit.repeat(run, number=1, repeat=10))
    base = times["pytato"]
    print(f"\nE = {E}, float64, fastest of repeated calls:")
    for name, t in times.items():
        print(f"  {name:18s} {t * 1e3:9.2f} ms  {base / t:6.1f}x untransformed pytato")


if __name__ == "__main__":
    main()
