"""DG programs written with arraycontext, for ``bench_arraycontext.py`` and the compiler
guide's example: the four DG workloads of ``shared/workloads.md`` (and the inverse mass
matrix), a DG step (a divergence, a face lift and an elementwise combination), the step of
the GPU run (the same with the inverse mass matrix applied to ``div - lift``) and an
RHS-like program of 20 einsums with
elementwise work around them (a compressible-flow right-hand side: five conserved
variables, each with a flux divergence, a face lift and an inverse mass matrix, plus a
pressure gradient and four local operators).

Every program is a function ``f(actx, **arrays)`` of device arrays; :func:`inputs` makes
its arrays (numpy, float64 unless asked) and :func:`numpy_version` computes the same math
with numpy, the peer the benchmark compares against.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

NDOF, NFACE, NFDOF, DIM = 35, 4, 15, 3


def shapes(E: int) -> dict[str, tuple[int, ...]]:
    """The arrays every program draws from, for *E* elements."""
    return {
        "J": (DIM, DIM, E), "D": (DIM, NDOF, NDOF), "u": (E, NDOF), "v": (DIM, E, NDOF),
        "L": (NDOF, NFACE, NFDOF), "Jf": (NFACE, E), "flux": (NFACE, E, NFDOF),
        "Minv": (NDOF, NDOF), "q": (5, E, NDOF), "qflux": (5, NFACE, E, NFDOF),
    }


def inputs(names: list[str], E: int, dtype: Any = np.float64, seed: int = 0
           ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.random(shapes(E)[n]).astype(dtype) for n in names}


# {{{ the programs, through an array context


def local(actx: Any, D: Any, u: Any) -> Any:
    return actx.einsum("ij,ej->ei", D[0], u)


def divergence(actx: Any, J: Any, D: Any, v: Any) -> Any:
    return actx.einsum("xre,rij,xej->ei", J, D, v)


def gradient(actx: Any, J: Any, D: Any, u: Any) -> Any:
    return actx.einsum("xre,rij,ej->xei", J, D, u)


def face_mass(actx: Any, L: Any, Jf: Any, flux: Any) -> Any:
    return actx.einsum("ifj,fe,fej->ei", L, Jf, flux)


def inverse_mass(actx: Any, Minv: Any, u: Any) -> Any:
    return actx.einsum("ij,ej->ei", Minv, u)


def dg_step(actx: Any, J: Any, D: Any, v: Any, L: Any, Jf: Any, flux: Any) -> Any:
    """The issue's step: sin(divergence) + 0.5 * lift."""
    div = actx.einsum("xre,rij,xej->ei", J, D, v)
    lift = actx.einsum("ifj,fe,fej->ei", L, Jf, flux)
    return actx.np.sin(div) + 0.5 * lift


def dg_mass_step(actx: Any, J: Any, D: Any, v: Any, L: Any, Jf: Any, flux: Any, Minv: Any
                 ) -> Any:
    """The step of the GPU run (shared/gpu/diagnosis-2026-11-26.md, section 7): the inverse
    mass matrix applied to ``div - lift``, then ``sin(div) + 0.5*lift + 0.25*mass``."""
    div = actx.einsum("xre,rij,xej->ei", J, D, v)
    lift = actx.einsum("ifj,fe,fej->ei", L, Jf, flux)
    mass = actx.einsum("ij,ej->ei", Minv, div - lift)
    return actx.np.sin(div) + 0.5 * lift + 0.25 * mass


def rhs(actx: Any, J: Any, D: Any, L: Any, Jf: Any, Minv: Any, q: Any, qflux: Any) -> Any:
    """20 einsums: per conserved variable a flux divergence, a face lift and the inverse
    mass matrix; a pressure gradient; four local operators (a filter)."""
    rho = q[0]
    vel = [q[1 + k] / rho for k in range(DIM)]
    pressure = 0.4 * (q[4] - 0.5 * rho * sum(w * w for w in vel))
    out = []
    for k in range(5):
        flux_vec = actx.np.stack([q[k] * w + (pressure if k == 1 + x else 0 * rho)
                                  for x, w in enumerate(vel)])
        div = actx.einsum("xre,rij,xej->ei", J, D, flux_vec)
        lift = actx.einsum("ifj,fe,fej->ei", L, Jf, qflux[k])
        out.append(actx.einsum("ij,ej->ei", Minv, lift - div))
    grad_p = actx.einsum("xre,rij,ej->xei", J, D, pressure)
    filtered = [actx.einsum("ij,ej->ei", D[0], out[k]) for k in range(4)]
    return actx.np.stack([*filtered, out[4] + grad_p[0] * grad_p[1] * 1e-3])


PROGRAMS: dict[str, tuple[Callable[..., Any], list[str]]] = {
    "local": (local, ["D", "u"]),
    "divergence": (divergence, ["J", "D", "v"]),
    "gradient": (gradient, ["J", "D", "u"]),
    "face mass": (face_mass, ["L", "Jf", "flux"]),
    "inverse mass": (inverse_mass, ["Minv", "u"]),
    "DG step": (dg_step, ["J", "D", "v", "L", "Jf", "flux"]),
    "DG mass step": (dg_mass_step, ["J", "D", "v", "L", "Jf", "flux", "Minv"]),
    "RHS (20 einsums)": (rhs, ["J", "D", "L", "Jf", "Minv", "q", "qflux"]),
}

#: the einsums of each whole program, as programs of ``PROGRAMS`` of the same shapes (how
#: many times each): what the benchmark times alone to compare the whole program against
EINSUMS: dict[str, dict[str, int]] = {
    "DG step": {"divergence": 1, "face mass": 1},
    "DG mass step": {"divergence": 1, "face mass": 1, "inverse mass": 1},
    "RHS (20 einsums)": {"divergence": 5, "face mass": 5, "inverse mass": 5, "gradient": 1,
                         "local": 4},
}


# }}}


def numpy_version(name: str) -> Callable[..., np.ndarray]:
    """The same math in numpy (``einsum(optimize=True)``: numpy's fastest spelling)."""
    class NumpyContext:
        np = np

        @staticmethod
        def einsum(spec: str, *args: Any) -> Any:
            return np.einsum(spec, *args, optimize=True)

    fn, _ = PROGRAMS[name]
    return lambda **arrays: fn(NumpyContext, **arrays)


# vim: foldmethod=marker
