"""Whole OpenCL vectors to and from global arrays at any alignment: ``vloadN``/``vstoreN``.

loopy reads and writes OpenCL vectors only through a ``vec``-tagged array axis, which needs
the array's base and the vector's offset aligned to the vector (element-blocked data). The
plain layouts of most einsums have contiguous runs at any offset (a row of 35 entries of
``u[e, :]``, a segment of a GEMM row). These helpers emit the OpenCL builtins as loopy
:class:`~loopy.CInstruction` statements, with the flat offset computed by loopy from the
array's strides (so parallel inames and length parameters are substituted as in any other
statement). The private temporaries they touch are single vectors (shape ``(vec,)``, a
``vec`` axis): loopy then knows exactly which statements touch each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

import loopy as lp
import pymbolic.primitives as prim

#: The vector widths OpenCL has ``vloadN``/``vstoreN`` for.
WIDTHS = (2, 4, 8, 16)
#: A vector access in the code :func:`vload_clamped` and :func:`vstore` write, read back:
#: ``(kind, width, array, offset)``, ``kind`` ``"vload"`` or ``"vstore"``, ``offset`` the
#: name loopy binds the flat offset to.
ACCESS = re.compile(r"\b(vload|vstore)(\d+)\((?:[^;]*?,\s*)?0,\s*(\w+)\s*\+\s*(\w+)\)")


def array_arg(knl: lp.LoopKernel, name: str) -> lp.ArrayArg:
    """The global array argument *name* of *knl*."""
    arg = knl.arg_dict[name]
    if not isinstance(arg, lp.ArrayArg):
        raise ValueError(f"{name} is not a global array argument")
    return arg


def flat_offset(arg: lp.ArrayArg, idx: Sequence[Any]) -> Any:
    """The offset of ``arg[idx]`` from the array's base, in entries."""
    tags = cast(Sequence[Any], arg.dim_tags)
    return sum((t.stride * i for t, i in zip(tags, idx, strict=True)), cast(Any, 0))


def contiguous_axis(arg: lp.ArrayArg, axis: int) -> bool:
    """Whether consecutive values of index *axis* of *arg* are adjacent in memory."""
    return cast(Any, arg.dim_tags)[axis].stride == 1


def _bind(pairs: Sequence[tuple[str, Any]]) -> tuple[list[str], list[tuple[str, Any]]]:
    """C names for expressions: loopy declares ``int const name = expr`` for each pair,
    except for a bare variable, which is used by its own name."""
    names, exprs = [], []
    for name, expr in pairs:
        if isinstance(expr, prim.Variable):
            names.append(expr.name)
        else:
            names.append(name)
            exprs.append((name, expr))
    return names, exprs


def vstore(arg: lp.ArrayArg, idx: Sequence[Any], temp: str, vec: int, *, id: str,
           depends_on: frozenset[str], within: frozenset[str],
           predicates: frozenset[Any] = frozenset()) -> lp.CInstruction:
    """``arg[idx : idx + vec]`` (along the contiguous last run) ``=`` the private vector
    temporary *temp* (shape ``(vec,)``, a ``vec`` axis: one OpenCL vector)."""
    (off,), exprs = _bind([(f"feinsum_off_{id}", flat_offset(arg, idx))])
    return lp.CInstruction(
        exprs, f"vstore{vec}({temp}, 0, {arg.name} + {off});",
        read_variables=frozenset({temp}),
        assignees=(prim.Subscript(prim.Variable(arg.name), tuple(idx)),),
        id=id, depends_on=depends_on, within_inames=within, predicates=predicates)


def vload_clamped(arg: lp.ArrayArg, idx: Sequence[Any], start: Any, length: Any, temp: str,
                  vec: int, ctype: str, *, id: str, within: frozenset[str]
                  ) -> lp.CInstruction:
    """The private vector temporary *temp* (shape ``(vec,)``) ``=`` ``arg[idx : idx + vec]``
    along a contiguous index that starts at *start* and has *length* entries: one
    ``vloadN`` when the whole vector is inside, else lane by lane with the index clamped
    to the last entry (as the gathers of :mod:`feinsum.toolbox.dense` clamp)."""
    (off, x0, n), exprs = _bind([(f"feinsum_off_{id}", flat_offset(arg, idx)),
                                 (f"feinsum_x0_{id}", start), (f"feinsum_n_{id}", length)])
    code = (f"if ({x0} + {vec} <= {n}) {temp} = vload{vec}(0, {arg.name} + {off});\n"
            f"else for (int feinsum_l = 0; feinsum_l < {vec}; ++feinsum_l)\n"
            f"  ((__private {ctype} *) &{temp})[feinsum_l] = "
            f"{arg.name}[{off} + min(feinsum_l, {n} - 1 - {x0})];")
    return lp.CInstruction(
        exprs, code,
        read_variables=frozenset({arg.name}),
        assignees=(prim.Variable(temp),),
        id=id, within_inames=within)
