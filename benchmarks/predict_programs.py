"""Whole DG programs through arraycontext + pytato + feinsum, as a GPU model predicts them.

    .venv/bin/python benchmarks/predict_programs.py [--model h200 ...] [--elements 50000]
                                                    [--only NAME ...]

Each program of ``dg_programs.py`` is compiled through feinsum's array context for the GPU
model (the hook transforms it as it would for that GPU: recipe defaults, no database), run
once on this machine's OpenCL device (that is when the hook runs; the result is checked
against numpy), and the program it made is predicted by :func:`feinsum.predict`: every
device kernel, launches included. For the programs of ``dg_programs.EINSUMS`` (the DG step,
the step with the inverse mass matrix, the RHS) the table sets the whole program beside the
sum of its einsums, each predicted as a program of its own through the same context: what
the elementwise work, the launches and the temporaries around the einsums cost on that GPU
(1.0: nothing). ``bench_arraycontext.py --whole-only`` measures the same on a lent GPU.
Predicted, never measured: the model's limits (docs/performance-model.rst) apply, and
allocations (the context's memory pool) are not in it.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dg_programs as dp  # noqa: E402

HEADER = ("program", "model", "whole", "launches", "einsums alone", "whole / einsums",
          "bound by")


def _context(info: Any) -> Any:
    """feinsum's array context for GPU model *info* on this machine's device, keeping the
    program each compile makes (``made``)."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.opencl import get_device, get_queue

    class Keeping(FeinsumPytatoPyOpenCLArrayContext):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.made: list[Any] = []

        def transform_loopy_program(self, t_unit: Any) -> Any:
            new = super().transform_loopy_program(t_unit)
            self.made.append(new)
            return new

    return Keeping(get_queue(get_device()), feinsum_db=False, feinsum_device=info)


def predicted(actx: Any, model: str, name: str, E: int) -> Any:
    """The prediction of program *name* at *E* elements as the hook made it for *model*."""
    import feinsum

    fn, names = dp.PROGRAMS[name]
    host = dp.inputs(names, E)
    actx.made.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = actx.compile(lambda *a: fn(actx, **dict(zip(names, a, strict=True))))
        got = actx.to_numpy(f(*[actx.from_numpy(host[n]) for n in names]))
    np.testing.assert_allclose(got, dp.numpy_version(name)(**host), rtol=1e-10, atol=1e-10,
                               err_msg=f"{name} through feinsum's context for {model}")
    return feinsum.predict(actx.made[-1], model, {})


def main(argv: list[str] | None = None) -> int:
    from feinsum.devices.models import MODELS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", nargs="+", default=["h200"], choices=sorted(MODELS))
    ap.add_argument("--elements", type=int, default=50_000)
    ap.add_argument("--only", nargs="*", help="programs to predict (default: all)")
    args = ap.parse_args(argv)
    if args.elements < 1:
        ap.error(f"--elements {args.elements}: give a number of elements, 1 or more")
    unknown = set(args.only or ()) - set(dp.PROGRAMS)
    if unknown:
        ap.error(f"unknown programs {sorted(unknown)}; known: {sorted(dp.PROGRAMS)}")
    chosen = [n for n in dp.PROGRAMS if not args.only or n in args.only]
    print(f"E = {args.elements}; predicted by feinsum's performance model, nothing measured")
    print("\t".join(HEADER), flush=True)
    t0 = time.perf_counter()
    for model in args.model:
        actx = _context(MODELS[model].info)
        done: dict[str, Any] = {}

        def get(name: str, actx: Any = actx, model: str = model,
                done: dict[str, Any] = done) -> Any:
            if name not in done:
                done[name] = predicted(actx, model, name, args.elements)
            return done[name]

        for name in chosen:
            p = get(name)
            row = [name, model, f"{p.seconds * 1e3:.4g} ms", str(len(p.kernels)), "", "",
                   p.limit]
            if name in dp.EINSUMS:
                alone = sum(get(n).seconds * k for n, k in dp.EINSUMS[name].items())
                row[4:6] = [f"{alone * 1e3:.4g} ms", f"{p.seconds / alone:.2f}x"]
            print("\t".join(row), flush=True)
    print(f"# {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
