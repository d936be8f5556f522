"""Programs written with arraycontext and pytato, run through feinsum's array contexts.

Used two ways: ``tests/test_arraycontext.py`` imports it with the arraycontext/pytato
pair installed in the venv (mid-2025, contemporaries of loopy 2025.2), and
``tests/test_arraycontext_head.py`` runs it as a script (``python arraycontext_cases.py``)
with the 2026 pair first on ``PYTHONPATH``, since the two generations emit einsums
differently. Each case runs a program through the untransformed context and through
feinsum's, and returns facts the tests check: the report, the largest relative
difference to the untransformed program and to numpy.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from pytools.tag import Tag

E = 48  # elements: small, the cases check what is matched and what is computed


def _queue() -> Any:
    from feinsum.devices.opencl import get_device, get_queue

    return get_queue(get_device())


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.abs(b).max()) or 1.0
    return float(np.abs(np.asarray(a) - np.asarray(b)).max()) / scale


def _arrays(shapes: dict[str, tuple[int, ...]], dtype: Any, seed: int = 0
            ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.random(s).astype(dtype) for k, s in shapes.items()}


def shapes(E: int) -> dict[str, tuple[int, ...]]:
    return {"J": (3, 3, E), "D": (3, 35, 35), "v": (3, E, 35), "L": (35, 4, 15),
            "Jf": (4, E), "flux": (4, E, 15), "u": (E, 35), "jac": (E, 1), "Minv": (35, 35)}


DG = shapes(E)


# {{{ the programs (functions of an array context and its arrays)


class ElementAxis(Tag):
    """An application's axis metadata (at module level: pytato pickles tags)."""


def dg_step(actx: Any, a: dict[str, Any]) -> Any:
    div = actx.einsum("xre,rij,xej->ei", a["J"], a["D"], a["v"])
    lift = actx.einsum("ifj,fe,fej->ei", a["L"], a["Jf"], a["flux"])
    return actx.np.sin(div) + 0.5 * lift


def dg_mass_step(actx: Any, a: dict[str, Any]) -> Any:
    """The step of the GPU run: the inverse mass matrix applied to ``div - lift``."""
    div = actx.einsum("xre,rij,xej->ei", a["J"], a["D"], a["v"])
    lift = actx.einsum("ifj,fe,fej->ei", a["L"], a["Jf"], a["flux"])
    mass = actx.einsum("ij,ej->ei", a["Minv"], div - lift)
    return actx.np.sin(div) + 0.5 * lift + 0.25 * mass


def several(actx: Any, a: dict[str, Any]) -> Any:
    """Five einsums (two of the same shape) and elementwise work between them."""
    grad = actx.einsum("xre,rij,ej->xei", a["J"], a["D"], a["u"])
    div = actx.einsum("xre,rij,xej->ei", a["J"], a["D"], grad)
    lift = actx.einsum("ifj,fe,fej->ei", a["L"], a["Jf"], a["flux"])
    local = actx.einsum("ij,ej->ei", a["D"][0], div - lift)
    local2 = actx.einsum("ij,ej->ei", a["D"][1], actx.np.exp(-local * local))
    return local2 * a["jac"] + div


def matmul(actx: Any, a: dict[str, Any]) -> Any:
    return a["u"] @ a["D"][0]


def sum_of_products(actx: Any, a: dict[str, Any]) -> Any:
    u = a["u"]
    D = a["D"][2]
    return actx.np.sum(u.reshape(E, 1, 35) * D.reshape(1, 35, 35), axis=2)


def tagged(actx: Any, a: dict[str, Any]) -> Any:
    """actx.einsum with tags on the operation and on an axis of its result."""
    from arraycontext.metadata import NameHint

    div = actx.einsum("xre,rij,xej->ei", a["J"], a["D"], a["v"], tagged=(NameHint("div"),))
    div = actx.tag_axis(0, ElementAxis(), div)
    return 2.0 * div + a["jac"] * a["u"]


def unit_axis(actx: Any, a: dict[str, Any]) -> Any:
    """Geometric factors of shape (E, 1), as an affine mesh has them."""
    return a["jac"] * actx.einsum("ij,ej->ei", a["D"][0], a["u"])


def no_einsum(actx: Any, a: dict[str, Any]) -> Any:
    return actx.np.sin(a["u"]) * a["jac"] + 1.0


PROGRAMS: dict[str, tuple[Callable[[Any, dict[str, Any]], Any], list[str], int]] = {
    # name: (program, its arrays, how many einsum groups feinsum must transform)
    "dg_step": (dg_step, ["J", "D", "v", "L", "Jf", "flux"], 2),
    "dg_mass_step": (dg_mass_step, ["J", "D", "v", "L", "Jf", "flux", "Minv"], 3),
    "several": (several, ["J", "D", "u", "L", "Jf", "flux", "jac"], 5),
    "matmul": (matmul, ["u", "D"], 1),
    "sum_of_products": (sum_of_products, ["u", "D"], 1),
    "tagged": (tagged, ["J", "D", "v", "jac", "u"], 1),
    "unit_axis": (unit_axis, ["D", "u", "jac"], 1),
    "no_einsum": (no_einsum, ["u", "jac"], 0),
}


# }}}


class _NumpyContext:
    """The same programs with numpy."""

    np = np

    @staticmethod
    def einsum(spec: str, *args: Any, tagged: Any = ()) -> Any:
        return np.einsum(spec, *args)

    @staticmethod
    def tag_axis(axis: int, tag: Any, ary: Any) -> Any:
        return ary


def run_lazy(name: str, dtype: Any = np.float64, elements: int = E) -> dict[str, Any]:
    """The program through PytatoPyOpenCLArrayContext and feinsum's subclass of it, at
    *elements* elements."""
    import pyopencl.tools as clt
    from arraycontext import PytatoPyOpenCLArrayContext

    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

    fn, names, _ = PROGRAMS[name]
    host = _arrays({k: shapes(elements)[k] for k in names}, dtype)
    queue = _queue()
    results = {}
    # buffers, not PoCL's shared virtual memory: loopy's invoker releases the global
    # temporaries of pytato's own programs while their kernels run, which corrupted the
    # heap with SVM (feinsum's context makes the same choice, see feinsum.arraycontext)
    plain = PytatoPyOpenCLArrayContext(queue, clt.MemoryPool(clt.ImmediateAllocator(queue)))
    for label, ctx in (("plain", plain),
                       ("feinsum", FeinsumPytatoPyOpenCLArrayContext(queue, feinsum_db=False))):
        dev = {k: ctx.from_numpy(v) for k, v in host.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = ctx.compile(lambda **kw: fn(ctx, kw))  # noqa: B023
            results[label] = ctx.to_numpy(compiled(**dev))
            again = ctx.to_numpy(compiled(**dev))  # the compiled program, reused
        results[label + "_again"] = again
        if label == "feinsum":
            report = ctx.feinsum_last_report
            recompiled = ctx.compile(lambda **kw: fn(ctx, kw))  # noqa: B023
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ctx.to_numpy(recompiled(**dev))
            cached = ctx.feinsum_last_report.cached
    ref = fn(_NumpyContext, {k: v.astype(np.float64) for k, v in host.items()})
    after, before = report.launches, report.untransformed_launches
    return {
        "launches": [len(before.launches), len(after.launches)],
        "temporaries": [len(before.temporaries), len(after.temporaries)],
        "name": name, "dtype": np.dtype(dtype).name,
        "transformed": report.transformed, "groups": len(report.groups),
        "actions": [g.action for g in report.groups],
        "kernels": [k.action for k in report.kernel_reports],
        "report": str(report),
        "vs_plain": _rel(results["feinsum"], results["plain"]),
        "vs_numpy": _rel(results["feinsum"], ref),
        "reuse_same": bool(np.array_equal(results["feinsum"], results["feinsum_again"])),
        "recompile_cached": cached,
    }


def run_eager(sizes: tuple[int, ...] = (100, 150), dtype: Any = np.float64) -> dict[str, Any]:
    """``actx.einsum`` of FeinsumPyOpenCLArrayContext at several sizes in one process
    (each with enough work to be transformed: see ``feinsum/hook/payoff.py``)."""
    import pyopencl.array as cla

    from feinsum.arraycontext import FeinsumPyOpenCLArrayContext

    queue = _queue()
    actx = FeinsumPyOpenCLArrayContext(queue, feinsum_db=False)
    out = []
    for n in sizes:
        host = _arrays({"D": (35, 35), "u": (n, 35)}, dtype, seed=n)
        dev = {k: cla.to_device(queue, v) for k, v in host.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = actx.einsum("ij,ej->ei", dev["D"], dev["u"], arg_names=("D", "u")).get()
        report = actx.feinsum_last_report
        out.append({"size": n, "vs_numpy": _rel(got, np.einsum("ij,ej->ei", host["D"],
                                                                host["u"])),
                    "transformed": report.transformed, "report": str(report)})
    return {"runs": out, "programs": len(actx._feinsum_einsums)}


#: einsums the hook must never make worse: complex operands (no OpenCL vector types) and a
#: long chain of small matrices (the generic default would unroll every reduction loop)
EINSUMS: dict[str, tuple[str, list[tuple[int, ...]], Any]] = {
    "complex128": ("ij,ej->ei", [(35, 35), (300, 35)], np.complex128),
    "complex64": ("ij,ej->ei", [(35, 35), (300, 35)], np.complex64),
    "chain": ("ab,bc,cd,de,ef->af", [(16, 16)] * 5, np.float64),
    "batched chain": ("xab,xbc,xcd,xde,xef->xaf", [(10, 16, 16)] * 5, np.float64),
}


def run_einsum(name: str, lazy: bool) -> dict[str, Any]:
    """``actx.einsum`` of one of :data:`EINSUMS` through feinsum's lazy (compiled) or eager
    context, against numpy."""
    import pyopencl.tools as clt

    from feinsum.arraycontext import FeinsumPyOpenCLArrayContext, FeinsumPytatoPyOpenCLArrayContext

    spec, shapes, dtype = EINSUMS[name]
    rng = np.random.default_rng(3)
    host = [(rng.random(s) + (1j * rng.random(s) if np.dtype(dtype).kind == "c" else 0))
            .astype(dtype) for s in shapes]
    queue = _queue()
    if lazy:
        actx: Any = FeinsumPytatoPyOpenCLArrayContext(queue, feinsum_db=False)
    else:
        actx = FeinsumPyOpenCLArrayContext(queue, clt.MemoryPool(clt.ImmediateAllocator(queue)),
                                           feinsum_db=False)
    dev = [actx.from_numpy(a) for a in host]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if lazy:
            got = actx.to_numpy(actx.compile(lambda *a: actx.einsum(spec, *a))(*dev))
        else:
            got = actx.to_numpy(actx.einsum(spec, *dev))
    report = actx.feinsum_last_report
    ref = np.einsum(spec, *[a.astype(np.complex128 if np.dtype(dtype).kind == "c"
                                     else np.float64) for a in host])
    return {"vs_numpy": _rel(got, ref), "report": str(report),
            "transformed": report.transformed, "groups": len(report.groups),
            "notes": [g.note for g in report.groups]}


def run_freeze() -> dict[str, Any]:
    """The DG step frozen without compiling (arraycontext's ``freeze``: a program that runs
    once), through feinsum's lazy context."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

    fn, names, _ = PROGRAMS["dg_step"]
    host = _arrays({k: DG[k] for k in names}, np.float64)
    actx = FeinsumPytatoPyOpenCLArrayContext(_queue(), feinsum_db=False)
    dev = {k: actx.from_numpy(v) for k, v in host.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.freeze(fn(actx, dev)))
    report = actx.feinsum_last_report
    return {"vs_numpy": _rel(got, fn(_NumpyContext, host)), "mode": report.mode,
            "groups": len(report.groups), "kernels": [k.action for k in report.kernel_reports],
            "report": str(report)}


def main(names: list[str]) -> None:
    """Run the cases *names* (programs, ``program@elements``, ``dg_step_float32``,
    ``eager``; all if empty) and print one JSON object of their facts (the head-generation
    test reads it)."""
    import arraycontext
    import pytato

    facts: dict[str, Any] = {"versions": {"arraycontext": arraycontext.__file__,
                                          "pytato": pytato.__file__}}
    for name in names or [*PROGRAMS, "dg_step_float32", "eager"]:
        if name == "eager":
            facts[name] = run_eager()
        elif name == "dg_step_float32":
            facts[name] = run_lazy("dg_step", np.float32)
        elif "@" in name:  # program@elements
            program, elements = name.split("@")
            facts[name] = run_lazy(program, elements=int(elements))
        else:
            facts[name] = run_lazy(name)
    sys.stdout.write("FACTS " + json.dumps(facts) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])


# vim: foldmethod=marker
