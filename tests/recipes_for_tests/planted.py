"""A recipe with planted failures, for the autotuner's tests (loaded with ``recipe_path``).

``mode`` picks the behaviour: ``ok`` (a correct kernel, parallel over the first output
index in work-groups of ``wg``), ``abort`` / ``segfault`` (the worker process dies during
code generation, as a crashing compiler would), ``hang`` (never returns), ``wrong`` (the
result doubled), ``invalid`` (the recipe rejects the configuration), ``compile`` (an
OpenCL build failure).
"""

import ctypes
import os
import time

import loopy as lp

from feinsum.errors import InvalidConfigurationError
from feinsum.recipes import Choice, ParameterSpace, PowersOfTwo, Recipe

MODES = ("ok", "abort", "segfault", "hang", "wrong", "invalid", "compile")


def applies(e, device):
    return None if e.reduction == "sum" and e.nrows == 1 else "needs a one-row sum"


def space(e, device):
    return ParameterSpace(mode=Choice(MODES), wg=PowersOfTwo(2, 4))


def default(e, device):
    return {"mode": "ok", "wg": 4}


def apply(t_unit, p, e, device):
    mode = p["mode"]
    if mode == "abort":
        os.abort()
    if mode == "segfault":
        ctypes.string_at(0)
    if mode == "hang":
        time.sleep(3600)
    if mode == "invalid":
        raise InvalidConfigurationError("planted: this configuration is rejected")
    knl = t_unit.default_entrypoint
    if mode == "wrong":
        knl = knl.copy(instructions=[
            insn.copy(expression=2 * insn.expression) if insn.id == "row0" else insn
            for insn in knl.instructions])
    knl = lp.split_iname(knl, e.out_indices[0], p["wg"], outer_tag="g.0", inner_tag="l.0")
    if mode == "compile":
        knl = lp.set_options(knl, build_options=["-cl-no-such-option"])
    return t_unit.with_kernel(knl)


RECIPE = Recipe("planted", applies=applies, space=space, default=default, apply=apply)
