"""A long reduction into few outputs on GPUs: the terms dealt over the whole device.

A dot product (``j,j->``), a norm or inner product of fields (``ej,ej->``, or ``ej->``
over a formula such as ``abs(u)**2``), the largest or smallest entry of a field (a
``max`` or ``min`` reduction: norms, time-step limits), a product of a few long rows with
a vector (``ij,j->i``, ``i`` short): the outputs are too few to give
the work-items of a GPU one each, so :mod:`feinsum.toolbox.core`'s schedules (outputs on
the work-items, the reduction shared by one work-group at most) leave all but one compute
unit idle. :func:`split_kernel` deals the *terms* instead:

* the reduction indices are flattened into one index ``f`` in their order (C order: the
  operands that end with them are read at consecutive addresses) and split as
  ``f = (t*G + g)*K + l``: ``G`` work-groups (``g.0``) of ``K`` work-items (``l.0``) sweep
  ``G*K`` consecutive terms at a time, each work-item reducing its terms in ``t`` (a term
  past the end adds zero to a sum, without a load; for ``max`` and ``min``, which are
  idempotent, it repeats the last term). One operand holds every reduction index, so
  ``f`` stays within the int32 indices of the operands;
* each work-group reduces its ``K`` partial results by a tree in local memory (loopy's
  parallel reduction) into a ``(G, outputs)`` buffer in global memory, once per output
  entry (the outputs are a loop of the work-item, unrolled or not);
* a second device kernel (after a global barrier) reduces the ``G`` partials of each
  output entry, one work-group per entry of the first output index: ``min(G, K)``
  work-items, each reducing ``G/min(G, K)`` partials, then a tree.

Formula operands are evaluated per term, as the reference kernel does. A kernel reduction
of few rows (a formula of i- and j-variables) fits too, but the hook prefers
``tiled_2d_gpu``, whose work-items fold each term into a block of rows.

The other rows of a batched einsum do the same in the same two kernels.
"""

from __future__ import annotations

import math
from typing import Any

import loopy as lp
import pymbolic.primitives as prim
from loopy.symbolic import Reduction
from pymbolic.mapper.substitutor import substitute

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.core import dense_only, is_fixed, kernel_of
from feinsum.toolbox.dense import rewritten_kernel

#: The reductions whose partial results combine as the terms do.
REDUCTIONS = ("sum", "max", "min")
#: Output entries (all rows) a work-item sums for at most: each is one sweep of its terms
#: and one tree, in sequence.
MAX_OUTPUTS = 64
#: Terms a reduction of fixed length has at least for the split to pay (fewer: one
#: work-group of generic's shares them).
MIN_TERMS = 1 << 14


def split_reason(e: BatchedEinsum) -> str | None:
    """Why the terms of *e* should not be dealt over the device (None: they should)."""
    if dense_only(e) is not None:
        return dense_only(e)
    if not e.reduction_indices:
        return "no reduction"
    if e.reduction not in REDUCTIONS:
        return (f"the reduction is {e.reduction!r}: partial results of "
                f"{', '.join(REDUCTIONS)} only")
    long_out = [i for i in e.out_indices if not is_fixed(e, i)]
    if long_out:
        return (f"the output index {long_out[0]} is long (symbolic): the outputs fill the "
                "device (generic, gemm_gpu)")
    if outputs(e) > MAX_OUTPUTS:
        return f"{outputs(e)} output entries, more than {MAX_OUTPUTS}"
    if not any(set(e.reduction_indices) <= set(idx) for idx in e.in_indices):
        return ("no operand holds every reduction index (the flat index over the terms "
                "would outgrow the operands' int32 indices)")
    long_red = [i for i in e.reduction_indices if not is_fixed(e, i)]
    if len(long_red) > 1:
        return f"several long reduction indices ({', '.join(long_red)}): one at most"
    if not long_red and math.prod(int(e.lengths[i]) for i in e.reduction_indices) < MIN_TERMS:
        return f"fewer than {MIN_TERMS} terms: one work-group shares them (generic)"
    return None


def outputs(e: BatchedEinsum) -> int:
    """Output entries of all rows (every output index fixed)."""
    return e.nrows * math.prod(int(e.lengths[i]) for i in e.out_indices)


def _length(e: BatchedEinsum, i: str) -> Any:
    n = e.lengths[i]
    return n if isinstance(n, int) else prim.Variable(str(n))


def flat_values(e: BatchedEinsum, f: Any) -> dict[str, Any]:
    """Each reduction index as a function of the flat index *f* (C order)."""
    red = e.reduction_indices
    out = {}
    for k, i in enumerate(red):
        stride: Any = 1
        for j in red[k + 1:]:
            stride = stride * _length(e, j)
        q = prim.FloorDiv(f, stride) if stride != 1 else f
        out[i] = prim.Remainder(q, _length(e, i)) if k else q
    return out


def split_kernel(t_unit: lp.TranslationUnit, e: BatchedEinsum, K: int, G: int,
                 unroll_outputs: bool) -> lp.TranslationUnit:
    """The two-kernel program of :mod:`this module <feinsum.toolbox.split>` for the
    reference kernel of *e* (:func:`split_reason` must be None): ``G`` work-groups of ``K``
    work-items; *unroll_outputs*: the work-item's loops over the output entries
    unrolled."""
    knl = kernel_of(t_unit)
    rows = [i for i in knl.instructions if isinstance(i, lp.Assignment)]
    outs = list(e.out_indices)
    total = total_terms(e)
    syms = sorted({str(e.lengths[i]) for i in e.reduction_indices if not is_fixed(e, i)})
    params = f"[{', '.join(syms)}] -> " if syms else ""
    f = (prim.Variable("rt") * G + prim.Variable("rg")) * K + prim.Variable("rl")
    flat = flat_values(e, f)
    sweep = {i: prim.Variable(f"{i}_p") for i in outs}
    final = {i: prim.Variable(f"{i}_f") for i in outs}
    lanes = min(G, K)
    domains = [f"{params}{{[rg, rl, rt]: 0 <= rg < {G} and 0 <= rl < {K} and 0 <= rt "
               f"and rt*{G * K} < {total}}}",
               f"{{[gl, gs]: 0 <= gl < {lanes} and 0 <= gs < {G // lanes}}}",
               *(f"{{[{v.name}]: 0 <= {v.name} < {e.lengths[i]}}}"
                 for i in outs for v in (sweep[i], final[i]))]
    domains += _feature_domains(knl, e)
    temps: list[Any] = []
    insns: list[Any] = []
    values: dict[Any, Any] = {**flat, **sweep}
    for r, insn in enumerate(rows):
        red: Any = insn.expression
        op = red.operation  # the reference's: feinsum's max and min propagate NaN
        dt = e.value_dtype(r)
        # f < total, written so that no int32 overflows: the last sweep's f may pass it
        inside = prim.Comparison(prim.Variable("rt") * (G * K), "<", total - (
            prim.Variable("rg") * K + prim.Variable("rl")))
        if e.reduction == "sum":  # a term past the end adds zero, without a load
            guarded = prim.If(inside, substitute(red.expr, values), dt.type(0))
        else:  # min and max are idempotent: a term past the end repeats the last
            last = {**flat_values(e, prim.If(inside, f, total - 1)), **sweep}
            guarded = substitute(red.expr, last)
        name = f"part{r}"
        temps.append(lp.TemporaryVariable(
            name, dt, shape=(G, *(int(e.lengths[i]) for i in outs)),
            address_space=lp.AddressSpace.GLOBAL))
        insns.append(lp.Assignment(
            prim.Subscript(prim.Variable(name), (prim.Variable("rg"), *sweep.values())),
            Reduction(op, ("rl",), Reduction(op, ("rt",), guarded)),
            id=f"part_{r}", within_inames=frozenset({"rg", *(v.name for v in sweep.values())})))
        insns.append(lp.Assignment(
            substitute(insn.assignee, final),
            Reduction(op, ("gl",), Reduction(op, ("gs",), prim.Subscript(
                prim.Variable(name), (prim.Variable("gs") * lanes + prim.Variable("gl"),
                                      *final.values())))),
            id=f"sum_{r}", depends_on=frozenset({"gbarrier"}),
            within_inames=frozenset(v.name for v in final.values())))
    insns.append(lp.BarrierInstruction(
        id="gbarrier", synchronization_kind="global", mem_kind="global",
        depends_on=frozenset(f"part_{r}" for r in range(len(rows)))))
    new = rewritten_kernel(knl, domains, insns, temps)
    tags = {"rg": "g.0", "rl": "l.0", "gl": "l.0"}
    if outs:
        tags[final[outs[0]].name] = "g.0"
    if unroll_outputs:
        tags.update({v.name: "unr" for v in sweep.values()})
    new = lp.tag_inames(new, tags)
    return lp.set_options(new, enforce_variable_access_ordered="no_check")


def _feature_domains(knl: lp.LoopKernel, e: BatchedEinsum) -> list[Any]:
    """The reference kernel's domains of the formulas' feature indices (a reduction inside
    a formula, as ``sum(d, (x[i,d] - y[j,d])**2)``), the einsum's indices projected out."""
    import islpy as isl

    indices = {i for idx in (*e.in_indices, e.out_indices) for i in idx}
    out = []
    for dom in knl.domains:
        names = {str(n) for n in dom.get_var_names(isl.dim_type.set)} - indices
        if names:
            out.append(dom.project_out_except(sorted(names), [isl.dim_type.set]))
    return out


def total_terms(e: BatchedEinsum) -> Any:
    """The number of terms: the product of the reduction lengths."""
    total: Any = 1
    for i in e.reduction_indices:
        total = total * _length(e, i)
    return total


#: Work-groups per compute unit the default deals the terms to, at least.
GROUPS_PER_UNIT = 4


def default_groups(compute_units: int) -> int:
    """``G``: the power of two at or above :data:`GROUPS_PER_UNIT` work-groups per compute
    unit."""
    want = max(1, GROUPS_PER_UNIT * compute_units)
    return 1 << (want - 1).bit_length()

