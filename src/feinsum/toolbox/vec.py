"""Vector lanes along an output index: OpenCL vector types without touching the arguments.

:func:`vectorize_output` rewrites the reference kernel of :func:`feinsum.generate_loopy` so
that each work-item computes ``vec`` consecutive entries of one output index ``x`` as the
lanes of private vector temporaries (``float4``, ``double8``...):

* the iname ``x`` becomes the *block* of ``vec`` entries (``0 <= x, vec*x < n``; the later
  steps of :mod:`feinsum.toolbox.core` distribute it as any other output loop) and ``x_v``
  (tagged ``vec``, rectangular: ``0 <= x_v < vec``) the lane;
* an operand that depends on ``x`` is gathered lane by lane into a private vector
  ``g{c}_r{r}`` (its index clamped to ``n - 1``, so that every lane reads inside the
  array and computes finite values), inside the loops of its other indices; an operand
  that does not is read once and broadcast;
* the reduction runs on vector accumulators (loopy's, duplicated over the lanes) and
  writes the private vector ``acc_r{r}``;
* only lanes inside the output are stored, lane by lane.

loopy emits vector code for the statements it can (arithmetic on the temporaries) and
per-lane code for the others (the gathers, the stores).
"""

from __future__ import annotations

from typing import Any, cast

import islpy as isl
import loopy as lp
import numpy as np
import pymbolic.primitives as prim
from loopy.kernel.array import VectorArrayDimTag
from loopy.kernel.data import IlpBaseTag, Iname
from loopy.symbolic import IdentityMapper

from feinsum.spec.model import Array, BatchedEinsum
from feinsum.toolbox.core import has_formula, kernel_of

#: The most lanes of an OpenCL vector type.
MAX_LANES = 16


def vector_reason(e: BatchedEinsum) -> str | None:
    """``None`` if :func:`vectorize_output` supports *e*, else why not."""
    if e.block_sparse is not None:
        return "block-sparse specs are not vectorised"
    if not e.out_indices:
        return "the output is a scalar (no output index to make vector lanes of)"
    if e.reduction != "sum":
        return (f"{e.reduction} reductions use scalar helper functions (NaN-propagating "
                "min/max, argmin pairs, logsumexp) with no OpenCL vector overloads")
    kinds = {np.dtype(e.value_dtype(r)).kind for r in range(e.nrows)}
    if "c" in kinds:
        return "OpenCL has no complex vector types"
    return None


def max_lanes(e: BatchedEinsum, device: Any) -> int:
    """Twice the device's preferred vector width for the spec's widest value type (at most
    :data:`MAX_LANES`, at least 1)."""
    return max(1, min(MAX_LANES, 2 * _preferred(e, device)))


def _preferred(e: BatchedEinsum, device: Any) -> int:
    wide = max((np.dtype(e.value_dtype(r)) for r in range(e.nrows)), key=lambda d: d.itemsize)
    return int(device.preferred_vector_width_double if wide.itemsize >= 8
               else device.preferred_vector_width_float)


def default_lanes(e: BatchedEinsum, device: Any) -> int:
    """The lanes worth using by default: the preferred width for the dtype, at most half
    the preferred float width, on CPUs when the last output index is long and every
    operand that depends on it is a C-order array whose last axis it is (the gathers read
    consecutive addresses); else 1.
    Measured on this project's PoCL CPU (docs/recipe-library.rst): GEMM 1.9-2.9x faster
    with 8 lanes (float32 and float64); ``ij,ej->ei`` (last index 35, strided gathers)
    0.6-0.7x and a memory-bound ``ij,j->i`` unchanged, hence 1 there."""
    if vector_reason(e) is not None or not getattr(device, "is_cpu", False):
        return 1
    x = e.out_indices[-1]
    if isinstance(e.lengths[x], int):
        return 1
    for c in range(e.noperands):
        if x in e.in_indices[c] and (e.in_indices[c][-1] != x or not all(
                isinstance(f, Array) and f.order == "C" for row in e.arguments for f in row[c])):
            return 1
    # measured best: 8 float64 lanes (the preferred 8), 8 float32 lanes (half the 16)
    pref_float = int(device.preferred_vector_width_float)
    return max(1, min(MAX_LANES, _preferred(e, device), pref_float // 2))


def _block_domain(dom: Any, x: str, lanes: tuple[str, ...], vec: int, n: Any) -> Any:
    dt = isl.dim_type.set
    k = dom.find_dim_by_name(dt, x)
    dom = dom.project_out(dt, k, 1).insert_dims(dt, k, 1 + len(lanes))
    for j, name in enumerate((x, *lanes)):
        dom = dom.set_dim_name(dt, k + j, name)
    params = ", ".join(dom.get_var_names(isl.dim_type.param))
    cons = " and ".join(f"0 <= {ln} < {vec}" for ln in lanes)
    extra = isl.BasicSet(f"[{params}] -> {{ [{x}, {', '.join(lanes)}]: 0 <= {x} and "
                         f"{vec}*{x} < {n} and {cons} }}")
    return dom & isl.align_spaces(extra, dom)


def _operand_dtype(e: BatchedEinsum, row: int, column: int) -> np.dtype[Any]:
    from feinsum.spec.formulas import formula_result_dtype

    return np.result_type(*(f.dtype if isinstance(f, Array) else formula_result_dtype(f)
                            for f in e.arguments[row][column]))


def _sub(name: str, *idx: Any) -> Any:
    return prim.Subscript(prim.Variable(name), tuple(idx)) if idx else prim.Variable(name)


def _private(name: str, dtype: Any, vec: int) -> lp.TemporaryVariable:
    return lp.TemporaryVariable(name, dtype, shape=(vec,) if vec else (),
                                dim_tags=cast(Any, "vec") if vec else None,
                                address_space=lp.AddressSpace.PRIVATE)


def gathered(e: BatchedEinsum, column: int, vec: int) -> bool:
    """Whether :func:`vectorize_output` with *vec* lanes gathers operand *column* lane by
    lane (it depends on the last output index): such an operand cannot be staged."""
    return vec > 1 and bool(e.out_indices) and e.out_indices[-1] in e.in_indices[column]


def vectorize_output(t_unit: lp.TranslationUnit, e: BatchedEinsum, vec: int,
                     x: str | None = None) -> lp.TranslationUnit:
    """Make ``vec`` consecutive entries of output index *x* (default: the last, the
    contiguous one) the vector lanes of a work-item (see the module docstring). Call it on
    the reference kernel before any other step (afterwards ``x`` is the block iname,
    ``{x}_v`` the vector lane), and :func:`finish_lanes` after the last. ``vec=1`` returns
    *t_unit* unchanged.

    Sum reductions become explicit statements (init, update, store), so that the lane loop
    can be the innermost one; formula operands are evaluated into private temporaries
    before the update (their feature loops must not sit inside the lane loop)."""
    if vec <= 1:
        return t_unit
    x = x if x is not None else e.out_indices[-1]
    reason = vector_reason(e)
    if reason is not None or x not in e.out_indices:
        raise ValueError(f"cannot vectorise {x}: {reason or 'not an output index'}")
    knl = kernel_of(t_unit)
    n = e.lengths[x]
    lane, glane, slane = f"{x}_v", f"{x}_vg", f"{x}_vs"
    n_expr = prim.Variable(n) if isinstance(n, str) else n

    def entry(ln: str) -> Any:
        return prim.Variable(x) * vec + prim.Variable(ln)

    outs, red = set(e.out_indices), set(e.reduction_indices)
    temps = dict(knl.temporary_variables)
    insns: list[Any] = []
    for insn in knl.instructions:
        if not insn.id.startswith("row"):
            insns.append(insn)
            continue
        r = int(insn.id[3:])
        factors, loads = [], []
        for c in range(e.noperands):
            idx, rule = e.in_indices[c], f"op{c}_r{r}"
            if x in idx:  # gathered lane by lane, the index clamped
                name = f"g{c}_r{r}"
                temps[name] = _private(name, _operand_dtype(e, r, c), vec)
                clamped = prim.Min((entry(glane), n_expr - 1))
                args = [clamped if i == x else prim.Variable(i) for i in idx]
                loads.append(lp.Assignment(_sub(name, prim.Variable(glane)),
                                           prim.Variable(rule)(*args), id=f"gather{c}_r{r}",
                                           within_inames=frozenset({*outs, *idx, glane})))
                factors.append(_sub(name, prim.Variable(lane)))
            elif has_formula(e, c):  # evaluated once, broadcast
                name = f"h{c}_r{r}"
                temps[name] = _private(name, _operand_dtype(e, r, c), 0)
                loads.append(lp.Assignment(prim.Variable(name),
                                           prim.Variable(rule)(*map(prim.Variable, idx)),
                                           id=f"bcast{c}_r{r}",
                                           within_inames=frozenset({*outs - {x}, *idx})))
                factors.append(prim.Variable(name))
            else:
                factors.append(prim.Variable(rule)(*map(prim.Variable, idx)))
        acc, cell = f"acc_r{r}", _sub(f"acc_r{r}", prim.Variable(lane))
        temps[acc] = _private(acc, e.value_dtype(r), vec)
        body = prim.Product(tuple(factors)) if len(factors) > 1 else factors[0]
        deps = frozenset(ld.id for ld in loads)
        if red:
            insns += [lp.Assignment(cell, e.value_dtype(r).type(0), id=f"init_r{r}",
                                    within_inames=frozenset({*outs, lane})),
                      *loads,
                      lp.Assignment(cell, cell + body, id=f"update_r{r}",
                                    depends_on=deps | {f"init_r{r}"},
                                    within_inames=frozenset({*outs, *red, lane}))]
        else:
            insns += [*loads, lp.Assignment(cell, body, id=f"update_r{r}", depends_on=deps,
                                            within_inames=frozenset({*outs, lane}))]
        (assignee,) = insn.assignees
        index = tuple(entry(slane) if i == x else prim.Variable(i) for i in e.out_indices)
        insns.append(lp.Assignment(
            prim.Subscript(assignee.aggregate, index), _sub(acc, prim.Variable(slane)),
            id=insn.id, depends_on=frozenset({f"update_r{r}"}),
            within_inames=frozenset({*outs, slane}),
            predicates=frozenset({cast(Any, prim.Comparison(entry(slane), "<", n_expr))})))
    lanes = (lane, glane, slane)
    domains = [_block_domain(d, x, lanes, vec, n) if x in d.get_var_names(isl.dim_type.set)
               else d for d in knl.domains]
    names: set[str] = {str(i) for d in domains for i in d.get_var_names(isl.dim_type.set)}
    inames = {**{i: Iname(i, frozenset()) for i in names}, **knl.inames}
    knl = knl.copy(domains=domains, instructions=insns, temporary_variables=temps,
                   inames=inames, silenced_warnings=knl.silenced_warnings | {"vectorize_failed"})
    return lp.tag_inames(t_unit.with_kernel(knl), {lane: "vec", glane: "unr", slane: "unr"})


def finish_lanes(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """Give the vector temporaries of :func:`vectorize_output` one vector per entry of
    the ILP loops around them (loopy's own privatisation would append those axes after
    the vector axis and drop its ``vec`` tag); and a formula operand broadcast outside
    the vector index's loop (a scalar factor) every hardware axis the kernel uses (loopy
    refuses a statement outside one). Call it after the last step."""
    if any(i.id.startswith("bcast") for i in kernel_of(t_unit).instructions):
        t_unit = lp.add_inames_for_unused_hw_axes(t_unit, within="id:bcast*")
    knl = kernel_of(t_unit)
    ilp = {i for i in knl.all_inames() if knl.iname_tags_of_type(i, IlpBaseTag)}
    writers = knl.writer_map()
    extra: dict[str, tuple[str, ...]] = {}
    temps = dict(knl.temporary_variables)
    for name, tv in knl.temporary_variables.items():
        shape, tags = cast(tuple[Any, ...], tv.shape), cast(Any, tv.dim_tags)
        if not (name.startswith(("g", "acc_r")) and len(shape) == 1
                and isinstance(tags[0], VectorArrayDimTag)):
            continue
        around = set.intersection(*(set(knl.id_to_insn[w].within_inames)
                                    for w in writers.get(name, ())))
        axes = tuple(sorted(around & ilp))
        if axes:
            extra[name] = axes
            sizes = tuple(int(knl.get_constant_iname_length(i)) for i in axes)
            temps[name] = tv.copy(shape=(*sizes, *shape), dim_tags=",".join(
                ["c"] * len(axes) + ["vec"]), dim_names=None)
    if not extra:
        return t_unit

    class Prepend(IdentityMapper):  # type: ignore[misc]
        def map_subscript(self, expr: Any, *args: Any) -> Any:
            name = getattr(expr.aggregate, "name", None)
            if name in extra:
                return _sub(name, *map(prim.Variable, extra[name]), *expr.index_tuple)
            return super().map_subscript(expr, *args)

    mapper = Prepend()
    insns = [i.with_transformed_expressions(mapper) for i in knl.instructions]
    return t_unit.with_kernel(knl.copy(instructions=insns, temporary_variables=temps))


def vector_parameters(e: BatchedEinsum, device: Any, unrolled: Any = None,
                      shared: str | None = None) -> tuple[dict[str, Any], list[Any]]:
    """The parameter ``vec`` (lanes along the last output index: 1, 2, 4... up to
    :func:`max_lanes`) and its constraints: ``vec`` (the spec can be vectorised, else
    why not) and ``vec_length`` (no more lanes than the index's length rounded up to a
    power of two). *unrolled*, if given, maps a configuration to the work-item's other
    unrolled entries: ``vector_code_size`` caps their product with ``vec`` at 256.
    *shared*, if given, names the parameter of work-items sharing a reduction (a loopy
    reduction): ``vec_shared_reduction`` keeps it 1 when ``vec > 1``."""
    from feinsum.toolbox.parameters import Constraint, PowersOfTwo, at_most

    reason = vector_reason(e)
    n = e.lengths[e.out_indices[-1]] if e.out_indices else 1
    cap = 1 << max(0, n - 1).bit_length() if isinstance(n, int) else MAX_LANES
    cons = [
        Constraint("vec", lambda p: p["vec"] == 1 or reason is None,
                   f"vec = 1: {reason}" if reason else "vec: vectorisable"),
        at_most("vec_length", lambda p: p["vec"], cap,
                f"vec <= {cap}: lanes past the last output index's length ({n}) only "
                "compute clamped copies")]
    if shared is not None:
        cons.append(Constraint("vec_shared_reduction", lambda p: p["vec"] == 1
                               or p[shared] == 1, f"{shared} = 1 when vec > 1 (vector lanes "
                               "sum with explicit updates, not a shared loopy reduction)"))
    if unrolled is not None:
        cons.append(at_most("vector_code_size", lambda p: p["vec"] * unrolled(p), 256,
                            "vec*px*py*rtile <= 256 (per-lane gathers are unrolled code)"))
    return {"vec": PowersOfTwo(1, max_lanes(e, device))}, cons
