"""Time to the first result: arraycontext programs with and without feinsum, cold and warm.

    .venv/bin/python benchmarks/bench_first_call.py [--elements 500] [--only NAME ...]

Each program is run in processes of its own, four ways, in one run of this script:

* ``plain cold``: arraycontext's own context, in a process whose caches are empty;
* ``plain warm``: the same, in a later process that finds a cold one's caches;
* ``feinsum cold``: feinsum's context, caches empty;
* ``feinsum warm``: later processes that find a cold one's caches (feinsum's cache of
  transformed programs included).

A process's first call on this shared machine varies by tens of percent from one process
to the next, so each way runs ``--cold`` times (each in fresh caches, followed by its share
of the ``--warm`` processes), plain and feinsum alternating which goes first, and the
table shows medians.

*hook* is the hook's own part of the first call (its report's ``seconds``: what feinsum
adds to the call, measured inside the process, free of the variation between processes;
for a program made in the background, the context's decision to do so).

*The first call* is the time from compiling the program (``actx.compile``; ``actx.einsum``
for the eager cases) to its result on the host (``actx.to_numpy``), after the imports and
the transfer of the inputs to the device; every result is checked against numpy.

*Cold* means: loopy's and pytools' persistent caches, pyopencl's binary cache, PoCL's kernel
cache and feinsum's cache of transformed programs all in a fresh empty directory
(``XDG_CACHE_HOME``, ``POCL_CACHE_DIR``, ``PYOPENCL_CACHE_DIR``, ``FEINSUM_CACHE``). What
an installation makes once is kept, since every process after the first has it: the
verdict of feinsum's device probe (``FEINSUM_PROBE_CACHE``), the SQLite file of the
shipped records (``FEINSUM_CACHE_DIR``), the byte code of feinsum's modules (compiled
into ``PYTHONPYCACHEPREFIX`` before timing starts, as ``pip install`` does) and an empty
database of the user's own (``FEINSUM_DB``: the shipped records are what decides; a
private file, so that other processes on the machine writing to the default database do
not change what is measured). *Warm* is the process after a cold one with the same
directories.

The programs: the DG examples of ``tests/arraycontext_cases.py`` (lazy context,
``actx.compile``), the DG step and the 20-einsum right-hand side of ``dg_programs.py``, a
program run once (``actx.freeze`` of a non-compiled expression), and, through both the
eager and the lazy context, a complex128 einsum and a chain of five 16x16 matrices.
Targets (issue 21): feinsum cold <= 1.5x plain cold, feinsum warm <= 1.1x plain warm for
the DG programs; <= 3x plain for the complex einsum and the chain.

The lazy context transforms a compiled program the caches do not hold in a background
process (:mod:`feinsum.hook.background`): its first result comes from the untransformed
program. The child then keeps calling it, as a time-stepping loop would, and *fast from*
is the time from compiling to the result of the first call that ran the transformed
program (checked against numpy too). ``FEINSUM_BACKGROUND=0`` in the environment of this
script measures transforming at the first call instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

#: program name -> (kind, what the row says)
PROGRAMS: dict[str, tuple[str, str]] = {
    "dg_step": ("cases", "divergence + lift, sin, axpy (3 einsums' worth)"),
    "several": ("cases", "5 einsums, elementwise work between"),
    "matmul": ("cases", "u @ D[0]"),
    "sum_of_products": ("cases", "sum(u * D, axis=2)"),
    "tagged": ("cases", "einsum with tags"),
    "unit_axis": ("cases", "(E, 1) factor * einsum"),
    "no_einsum": ("cases", "elementwise only"),
    "DG step": ("dg", "dg_programs' DG step"),
    "RHS (20 einsums)": ("dg", "dg_programs' right-hand side"),
    "freeze": ("freeze", "actx.freeze of an uncompiled DG step (runs once)"),
    "complex eager": ("complex", "complex128 ij,ej->ei, eager context"),
    "complex lazy": ("complex", "complex128 ij,ej->ei, lazy context"),
    "chain eager": ("chain", "ab,bc,cd,de,ef->af, 16x16, eager context"),
    "chain lazy": ("chain", "ab,bc,cd,de,ef->af, 16x16, lazy context"),
}


# {{{ the child: one program, one way, one process


def _rel(a: Any, b: Any) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / (np.abs(b).max() or 1.0))


def _lazy(queue: Any, feinsum: bool) -> Any:
    import pyopencl.tools as clt
    from arraycontext import PytatoPyOpenCLArrayContext

    if feinsum:
        from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

        return FeinsumPytatoPyOpenCLArrayContext(queue)
    return PytatoPyOpenCLArrayContext(queue, clt.MemoryPool(clt.ImmediateAllocator(queue)))


def _eager(queue: Any, feinsum: bool) -> Any:
    import pyopencl.tools as clt
    from arraycontext import PyOpenCLArrayContext

    allocator = clt.MemoryPool(clt.ImmediateAllocator(queue))
    if feinsum:
        from feinsum.arraycontext import FeinsumPyOpenCLArrayContext

        return FeinsumPyOpenCLArrayContext(queue, allocator)
    return PyOpenCLArrayContext(queue, allocator)


def child(name: str, feinsum: bool, elements: int) -> dict[str, Any]:
    """Run *name* once; the seconds to its first result and what the hook reports."""
    import pyopencl as cl

    kind = PROGRAMS[name][0]
    queue = cl.CommandQueue(cl.create_some_context(interactive=False))
    rng = np.random.default_rng(0)
    report = first_report = None
    switched: float | None = None
    if kind in ("cases", "dg", "freeze"):
        import arraycontext_cases as cases
        import dg_programs as dp

        if kind == "cases":
            cases_e, cases.E = cases.E, elements
            cases.DG = {k: tuple(elements if s == cases_e else s for s in v)
                        for k, v in cases.DG.items()}
            fn, names, _ = cases.PROGRAMS[name]
            host = {k: rng.random(cases.DG[k]) for k in names}

            def program(actx: Any, a: dict[str, Any]) -> Any:
                return fn(actx, a)

            ref = fn(cases._NumpyContext, host)
        else:
            fn, names = dp.PROGRAMS["DG step" if kind == "freeze" else name]
            host = dp.inputs(names, elements)

            def program(actx: Any, a: dict[str, Any]) -> Any:
                return fn(actx, **a)

            ref = dp.numpy_version("DG step" if kind == "freeze" else name)(**host)
        actx = _lazy(queue, feinsum)
        dev = {k: actx.from_numpy(v) for k, v in host.items()}
        queue.finish()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            if kind == "freeze":
                out = actx.to_numpy(actx.freeze(program(actx, dev)))
            else:
                compiled = actx.compile(lambda **kw: program(actx, kw))
                out = actx.to_numpy(compiled(**dev))
            seconds = time.perf_counter() - t0
            report = getattr(actx, "feinsum_last_report", None)
            first_report = report
            if report is not None and report.mode == "background":
                switched = _until_switched(actx, lambda: compiled(**dev), ref, t0)
                report = actx.feinsum_last_report
    else:
        if kind == "complex":
            spec = "ij,ej->ei"
            host_list = [rng.random(s) + 1j * rng.random(s) for s in ((35, 35), (elements, 35))]
        else:
            spec = "ab,bc,cd,de,ef->af"
            host_list = [rng.random((16, 16)) for _ in range(5)]
        ref = np.einsum(spec, *host_list)
        actx = (_eager if name.endswith("eager") else _lazy)(queue, feinsum)
        dev_list = [actx.from_numpy(a) for a in host_list]
        queue.finish()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            if name.endswith("eager"):
                out = actx.to_numpy(actx.einsum(spec, *dev_list))
            else:
                out = actx.to_numpy(actx.compile(
                    lambda *a: actx.einsum(spec, *a))(*dev_list))
            seconds = time.perf_counter() - t0
        report = first_report = getattr(actx, "feinsum_last_report", None)
    err = _rel(out, ref)
    if err > 1e-8:
        raise SystemExit(f"{name}: relative error {err:.1e} against numpy")
    facts: dict[str, Any] = {"seconds": seconds, "error": err}
    if switched is not None:
        facts["switched"] = switched
    if first_report is not None:  # the hook's own part of the first call
        facts["hook"] = first_report.seconds
    if report is not None:
        facts.update(cached=report.cached, groups=len(report.groups),
                     transformed=report.transformed, mode=report.mode,
                     timings=dict(getattr(report, "timings", {}) or {}))
    return facts


def _until_switched(actx: Any, call: Any, ref: Any, t0: float, limit: float = 900.0
                    ) -> float | None:
    """Call the program (as a time-stepping loop would) until it runs the program the
    background worker transformed; the seconds from *t0* to that call's result (None: not
    within *limit*, or the worker failed). That result is checked too."""
    while time.perf_counter() - t0 < limit:
        out = actx.to_numpy(call())
        report = actx.feinsum_last_report
        if report.mode != "background":
            if not report.changed:
                return None
            err = _rel(out, ref)
            if err > 1e-8:
                raise SystemExit(f"relative error {err:.1e} of the transformed program")
            return time.perf_counter() - t0
    return None


# }}}


# {{{ the parent


_PYCACHE = Path(tempfile.gettempdir()) / "feinsum-bench-first-call-pycache"
_DB = Path(tempfile.gettempdir()) / "feinsum-bench-first-call.sqlite"


def _environment(cache: Path) -> dict[str, str]:
    import platformdirs

    user = Path(platformdirs.user_cache_dir("feinsum"))
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({
        "PYTHONPYCACHEPREFIX": str(_PYCACHE),
        "FEINSUM_DB": str(_DB),
        "XDG_CACHE_HOME": str(cache),
        "POCL_CACHE_DIR": str(cache / "pocl"),
        "PYOPENCL_CACHE_DIR": str(cache / "pyopencl"),
        "FEINSUM_CACHE": str(cache / "feinsum-programs"),
        # made once per machine: kept (see the module docstring)
        "FEINSUM_PROBE_CACHE": os.environ.get("FEINSUM_PROBE_CACHE",
                                              str(user / "device-probes.json")),
        "FEINSUM_CACHE_DIR": os.environ.get("FEINSUM_CACHE_DIR", str(user)),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"),
                                       *filter(None, [os.environ.get("PYTHONPATH")])]),
    })
    return env


def run_child(name: str, feinsum: bool, cache: Path, elements: int, timeout: float
              ) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", name, "--elements", str(elements)]
    if feinsum:
        cmd.append("--feinsum")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_environment(cache),
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "failed": f"over {timeout:.0f} s"}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("FIRST ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"seconds": None, "failed": tail[:200]}
    return json.loads(line[len("FIRST "):])  # type: ignore[no-any-return]


def _prepare() -> None:
    """What an installation makes once, made before timing: the device probe, the shipped
    records' file, the byte code of feinsum's modules and recipes."""
    from feinsum.database import open_database
    from feinsum.devices.opencl import get_device, vector_problem

    vector_problem(get_device())
    open_database(None).close()
    _DB.unlink(missing_ok=True)
    open_database(_DB).close()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src"),
                        str(ROOT / "transforms")], env=_environment(Path(tmp)), check=True,
                       capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=500)
    parser.add_argument("--only", nargs="*", help="programs to run (default: all)")
    parser.add_argument("--cold", type=int, default=3,
                        help="cold processes per program and way, plain and feinsum "
                             "alternating (the median is shown)")
    parser.add_argument("--warm", type=int, default=3,
                        help="warm processes per program and way, spread over the cold "
                             "ones' caches (the median is shown)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds a process may take before it counts as failed")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--feinsum", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        facts = child(args.child, args.feinsum, args.elements)
        sys.stdout.write("FIRST " + json.dumps(facts) + "\n")
        return

    _prepare()
    from feinsum.devices.opencl import device_info, get_device

    per_cold = -(-max(1, args.warm) // max(1, args.cold))
    print(f"device: {device_info(get_device()).name}; E = {args.elements}; seconds from "
          "compile to the first result on the host; each a process of its own; medians of "
          f"{max(1, args.cold)} cold and {max(1, args.cold) * per_cold} warm processes per "
          "way, plain and feinsum alternating")
    rows = []
    for name in args.only or list(PROGRAMS):
        runs: dict[str, list[dict[str, Any]]] = {
            f"{label} {how}": [] for label in ("plain", "feinsum") for how in ("cold", "warm")}
        for rep in range(max(1, args.cold)):
            ways = [("plain", False), ("feinsum", True)]
            for label, feinsum in ways if rep % 2 == 0 else ways[::-1]:
                with tempfile.TemporaryDirectory(prefix="feinsum-first-call-") as tmp:
                    runs[f"{label} cold"].append(run_child(name, feinsum, Path(tmp),
                                                           args.elements, args.timeout))
                    runs[f"{label} warm"].extend(
                        run_child(name, feinsum, Path(tmp), args.elements, args.timeout)
                        for _ in range(per_cold))
        res = {way: _median(found) for way, found in runs.items()}
        fast = sorted(r["switched"] for r in runs["feinsum cold"]
                      if r.get("switched") is not None)
        if fast and res["feinsum cold"].get("seconds") is not None:
            res["feinsum cold"] = {**res["feinsum cold"], "switched": fast[len(fast) // 2]}
        res["processes"] = {way: len(found) for way, found in runs.items()}
        rows.append((name, res))
        _print_row(name, res, header=len(rows) == 1)
    if args.json:
        Path(args.json).write_text(json.dumps(dict(rows), indent=1))


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median time (a failed run counts as the slowest)."""
    ok = sorted((r for r in runs if r.get("seconds") is not None), key=lambda r: r["seconds"])
    if len(ok) < len(runs):
        return next(r for r in runs if r.get("seconds") is None)
    return ok[len(ok) // 2]


def _cell(r: dict[str, Any]) -> str:
    return f"{r['seconds']:8.2f}" if r.get("seconds") is not None else f"{'failed':>8s}"


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> str:
    if a.get("seconds") is None or b.get("seconds") is None:
        return f"{'-':>6s}"
    return f"{a['seconds'] / b['seconds']:5.2f}x"


def _print_row(name: str, res: dict[str, Any], header: bool) -> None:
    if header:
        print(f"\n{'program':18s} {'plain':>8s} {'feinsum':>8s} {'ratio':>6s} "
              f"{'fast':>8s} | {'plain':>8s} {'feinsum':>8s} {'ratio':>6s} | {'hook':>6s} "
              f"{'hook':>6s} | hook's phases, cold (s)")
        print(f"{'':18s} {'cold':>8s} {'cold':>8s} {'':6s} {'from':>8s} | {'warm':>8s} "
              f"{'warm':>8s} {'':6s} | {'cold':>6s} {'warm':>6s} (ms)")
    fc, fw = res["feinsum cold"], res["feinsum warm"]
    hook = ""
    if fc.get("seconds") is not None:
        t = fc.get("timings") or {}
        hook = " ".join(f"{k} {v:.2f}" for k, v in t.items() if isinstance(v, float))
        hook = (f"{fc.get('transformed', 0)}/{fc.get('groups', 0)} groups"
                + (" (background)" if fc.get("switched") is not None else "")) + (
            f"; {hook}" if hook else "") + ("; warm hit" if fw.get("cached") else "")
    else:
        hook = fc.get("failed", "")
    after = f"{fc['switched']:8.2f}" if fc.get("switched") is not None else f"{'-':>8s}"
    print(f"{name:18s} {_cell(res['plain cold'])} {_cell(fc)} "
          f"{_ratio(fc, res['plain cold'])} {after} | {_cell(res['plain warm'])} "
          f"{_cell(fw)} {_ratio(fw, res['plain warm'])} | {_ms(fc)} {_ms(fw)} | {hook}",
          flush=True)


def _ms(r: dict[str, Any]) -> str:
    """The hook's own part of a first call, in milliseconds."""
    return f"{1e3 * r['hook']:6.1f}" if r.get("hook") is not None else f"{'-':>6s}"


# }}}


if __name__ == "__main__":
    main()


# vim: foldmethod=marker
