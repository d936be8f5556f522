"""An array program built from several loopy kernels, transformed by feinsum's hook.

The program is one time step of a DG-style operator on tetrahedra of degree 4 (35 volume
nodes, 4 faces of 15 nodes), written the way an array compiler writes it, with no thought
of feinsum: a kernel with the lifting of two fields (a two-row batched einsum), one with the
mass-matrix application, and an elementwise update (which the hook leaves alone).

    python examples/hook_speedup.py                     # recipe defaults / database records
    python examples/hook_speedup.py --on-miss tune --budget 8   # tune what is missing first

It prints what the hook applied to each einsum (and from which rung of the database's
fallback chain), checks that the transformed program computes the same arrays, and times
both programs, kernel by kernel, in the same run.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import loopy as lp
import numpy as np

import feinsum
from feinsum.devices.opencl import get_device, get_queue
from feinsum.hook.program import kernel_names

NDOF, NFACE, NFACEDOF = 35, 4, 15


def build_program() -> lp.TranslationUnit:
    lift = lp.make_kernel(
        "{[iel, idof, iface, jdof]: 0 <= iel < nelements and 0 <= idof < 35"
        " and 0 <= iface < 4 and 0 <= jdof < 15}",
        """
        lift_rho[iel, idof] = sum((iface, jdof), lift_mat[idof, iface, jdof]
                        * face_jac[iface, iel] * flux_rho[iface, iel, jdof])  {id=lift_rho}
        lift_e[iel, idof] = sum((iface, jdof), lift_mat[idof, iface, jdof]
                        * face_jac[iface, iel] * flux_e[iface, iel, jdof])  {id=lift_e}
        """,
        [lp.GlobalArg("lift_mat,face_jac,flux_rho,flux_e,lift_rho,lift_e", np.float64,
                      shape=lp.auto), lp.ValueArg("nelements", np.int32)],
        name="lift", lang_version=(2018, 2))
    mass = lp.make_kernel(
        "{[e, i, j]: 0 <= e < nelements and 0 <= i, j < 35}",
        "minv_u[e, i] = sum(j, inv_mass[i, j] * rhs[e, j])  {id=apply_mass}",
        [lp.GlobalArg("inv_mass,rhs,minv_u", np.float64, shape=lp.auto),
         lp.ValueArg("nelements", np.int32)],
        name="inverse_mass", lang_version=(2018, 2))
    update = lp.make_kernel(
        "{[e, i]: 0 <= e < nelements and 0 <= i < 35}",
        "u_new[e, i] = u[e, i] + dt * minv_u[e, i]  {id=update}",
        [lp.GlobalArg("u,minv_u,u_new", np.float64, shape=lp.auto),
         lp.ValueArg("dt", np.float64), lp.ValueArg("nelements", np.int32)],
        name="update", lang_version=(2018, 2))
    return lp.merge([lift, mass, update])


class Program:
    """Executors for every kernel of a translation unit, built once."""

    def __init__(self, t_unit: lp.TranslationUnit, queue: Any) -> None:
        self.queue = queue
        self.kernels = {}
        for name in kernel_names(t_unit):
            t = lp.set_options(t_unit.with_entrypoints(frozenset([name])), return_dict=True)
            self.kernels[name] = (t.executor(queue.context, entrypoint=name),
                                  {a.name for a in t_unit[name].args})

    def run(self, name: str, arrays: dict[str, Any]) -> dict[str, Any]:
        executor, args = self.kernels[name]
        _, out = executor(self.queue, **{k: v for k, v in arrays.items() if k in args})
        return dict(out)

    def time(self, name: str, arrays: dict[str, Any], repeat: int) -> float:
        """Median wall time of one call (the queue drained after each)."""
        self.run(name, arrays)
        self.queue.finish()
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self.run(name, arrays)
            self.queue.finish()
            samples.append(time.perf_counter() - t0)
        return float(np.median(samples))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--elements", type=int, default=20000)
    p.add_argument("--db", default=None, help="timing database (default: FEINSUM_DB / the "
                   "per-user one); 'none' for recipe defaults only")
    p.add_argument("--on-miss", default="default", choices=["default", "tune", "skip"])
    p.add_argument("--budget", type=int, default=None)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--device", default=None)
    p.add_argument("--prefer", nargs="*", default=None, metavar="RECIPE",
                   help="recipes the default rung tries first (feinsum.hook.PREFERENCE)")
    args = p.parse_args()

    import pyopencl.array as cla

    # loopy cannot infer nelements from the face arrays' shapes; it is passed explicitly
    warnings.filterwarnings("ignore", message=".*automatically find 'nelements'")

    device = get_device(args.device)
    queue = get_queue(device)
    n = args.elements
    rng = np.random.default_rng(0)
    host = {"lift_mat": rng.random((NDOF, NFACE, NFACEDOF)), "face_jac": rng.random((NFACE, n)),
            "flux_rho": rng.random((NFACE, n, NFACEDOF)),
            "flux_e": rng.random((NFACE, n, NFACEDOF)), "inv_mass": rng.random((NDOF, NDOF)),
            "rhs": rng.random((n, NDOF)), "u": rng.random((n, NDOF)),
            "minv_u": rng.random((n, NDOF))}
    arrays: dict[str, Any] = {k: cla.to_device(queue, v) for k, v in host.items()}
    arrays.update(dt=0.01, nelements=n)

    program = build_program()
    t0 = time.perf_counter()
    db: Any = False if args.db == "none" else args.db
    transformed, report = feinsum.transform_program(
        program, device=device, db=db, on_miss=args.on_miss, budget=args.budget,
        lengths={"nelements": n}, prefer=args.prefer)
    first = time.perf_counter() - t0
    rebuilt = build_program()  # an equal program, built again as array compilers do
    t0 = time.perf_counter()
    _, again = feinsum.transform_program(rebuilt, device=device, db=db,
                                         on_miss=args.on_miss, budget=args.budget,
                                         lengths={"nelements": n}, prefer=args.prefer)
    print(report)
    print(f"hook: {first:.2f} s the first time, {1e3 * (time.perf_counter() - t0):.1f} ms for "
          f"the same program rebuilt (cached: {again.cached})\n")

    before, after = Program(program, queue), Program(transformed, queue)
    total_b = total_a = 0.0
    print(f"{'kernel':<14}{'untransformed ms':>18}{'transformed ms':>16}{'speed-up':>10}")
    for name in kernel_names(program):
        ref = {k: v.get() for k, v in before.run(name, arrays).items()}
        got = {k: v.get() for k, v in after.run(name, arrays).items()}
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-11, atol=1e-11, err_msg=k)
        tb = before.time(name, arrays, args.repeat)
        ta = after.time(name, arrays, args.repeat)
        total_b, total_a = total_b + tb, total_a + ta
        print(f"{name:<14}{1e3 * tb:>18.3f}{1e3 * ta:>16.3f}{tb / ta:>9.2f}x")
    print(f"{'program':<14}{1e3 * total_b:>18.3f}{1e3 * total_a:>16.3f}"
          f"{total_b / total_a:>9.2f}x   (same results: checked)")


if __name__ == "__main__":
    main()
