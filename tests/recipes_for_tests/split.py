"""A well-behaved recipe for the autotuner's tests: the first output index split into
work-groups of ``wg`` work-items, optionally with the reduction loop unrolled by ``unr``."""

import loopy as lp

from feinsum.recipes import Constraint, ParameterSpace, PowersOfTwo, Recipe


def applies(e, device):
    return None if e.reduction == "sum" and e.nrows == 1 else "needs a one-row sum"


def space(e, device):
    return ParameterSpace(
        wg=PowersOfTwo(1, 64), unr=PowersOfTwo(1, 4),
        constraints=[Constraint("small_unroll", lambda p: p["unr"] <= p["wg"],
                                "unr <= wg")])


def default(e, device):
    return {"wg": 8, "unr": 1}


def apply(t_unit, p, e, device):
    knl = t_unit.default_entrypoint
    knl = lp.split_iname(knl, e.out_indices[0], p["wg"], outer_tag="g.0", inner_tag="l.0")
    red = [i for i in e.reduction_indices if isinstance(e.lengths[i], int)]
    if p["unr"] > 1 and red:
        knl = lp.split_iname(knl, red[0], p["unr"], inner_tag="unr")
    return t_unit.with_kernel(knl)


RECIPE = Recipe("split", applies=applies, space=space, default=default, apply=apply)
