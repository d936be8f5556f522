"""Code fingerprints: what counts as the same code, and that computing one needs no device."""

from __future__ import annotations

from typing import Any

import loopy as lp
import numpy as np
import pytest
from database_support import make_device

import feinsum as f
from feinsum.timing.fingerprint import (
    GeneratedCode,
    code_fingerprint,
    generated_code,
    is_comparable,
    normalise_build_options,
    normalise_source,
)

KERNEL = """\
#define lid(N) ((int) get_local_id(N))
/* loopy says: bulk slab for 'i' */
__kernel void __attribute__ ((reqd_work_group_size(16, 1, 1))) einsum(
    __global double const *__restrict__ a0, int const n0)
{
  double acc[1];   // an accumulator

  acc[0] = 0.0;
  if (n0 > 0) { printf("a  /* b */  c"); }
}
"""


def test_comments_blanks_and_kernel_names_do_not_count() -> None:
    base = normalise_source(KERNEL, ["einsum"])
    assert "/*" not in base.replace('"a  /* b */  c"', "") and "//" not in base
    assert '"a  /* b */  c"' in base  # string literals are left alone
    assert "_fk0(" in base and "einsum" not in base
    respaced = (KERNEL.replace("  double", "\tdouble").replace("acc[0] = 0.0;", "acc[0]  =   0.0;")
                .replace("\n\n", "\n \n\n").replace("einsum", "knl_7"))
    recommented = respaced.replace("an accumulator", "the sum").replace(
        "/* loopy says: bulk slab for 'i' */", "/* another\n   comment */")
    assert normalise_source(recommented, ["knl_7"]) == base
    assert normalise_source(KERNEL.replace("a  /*", "a /*"), ["einsum"]) != base


@pytest.mark.parametrize("change", [
    ("acc[0] = 0.0;", "acc[0] = 1.0;"),
    ("reqd_work_group_size(16, 1, 1)", "reqd_work_group_size(32, 1, 1)"),
    ("n0 > 0", "n0 >= 0"),
])
def test_real_changes_count(change: tuple[str, str]) -> None:
    assert normalise_source(KERNEL.replace(*change), ["einsum"]) != normalise_source(
        KERNEL, ["einsum"])


def test_the_order_of_a_guards_conjuncts_does_not_count() -> None:
    """loopy joins a guard's bounds checks in an order that depends on the hash seed."""
    a = normalise_source("if (-1 + n2 >= 0 && -1 + n1 >= 0)\n  x = 1;")
    assert a == normalise_source("if (-1 + n1 >= 0 && -1 + n2 >= 0)\n  x = 1;")
    assert a != normalise_source("if (-1 + n1 >= 0 || -1 + n2 >= 0)\n  x = 1;")
    assert (normalise_source("} else if (f(a, b) && (c || d)) {")
            == "} else if ((c || d) && f(a, b)) {")
    for kept in ("if (a) x = (b && c);", "y = b && a;"):
        assert normalise_source(kept) == kept


def test_build_options_are_a_set() -> None:
    a = normalise_build_options(["-cl-fast-relaxed-math", "-D X=1", "-cl-mad-enable"])
    b = normalise_build_options(["-cl-mad-enable -DX=1", "-cl-fast-relaxed-math",
                                 "-cl-mad-enable"])
    assert a == b == ("-DX=1", "-cl-fast-relaxed-math", "-cl-mad-enable")
    assert normalise_build_options(None) == ()


def test_fingerprint_fields() -> None:
    dev, other = make_device(), make_device(driver_version="9.9")
    code = GeneratedCode("x", ("-cl-mad-enable",), (("(n0)", "(16)"),))
    fp = code.fingerprint(dev)
    assert is_comparable(fp) and len(fp) <= 64 and not is_comparable("z9-" + fp[3:])
    assert fp == GeneratedCode("x", ("-cl-mad-enable",), (("(n0)", "(16)"),)).fingerprint(dev)
    for changed in (GeneratedCode("y", code.build_options, code.launch),
                    GeneratedCode("x", (), code.launch),
                    GeneratedCode("x", code.build_options, (("(n0)", "(32)"),))):
        assert changed.fingerprint(dev) != fp
    assert code.fingerprint(other) != fp  # another driver: another compiler


def _split_kernel(wg: int, name: str = "einsum") -> Any:
    from feinsum.lowering.kernel import generate_loopy

    e = f.einsum("ij,ej->ei", f.array("D", (8, 8), np.float64),
                 f.array("u", ("E", 8), np.float64))
    t_unit = generate_loopy(f.canonicalize(e))
    knl = lp.split_iname(t_unit.default_entrypoint, "i0", wg, outer_tag="g.0",
                         inner_tag="l.0")
    t_unit = t_unit.with_kernel(knl)
    return lp.rename_callable(t_unit, "einsum", name) if name != "einsum" else t_unit


def test_loopy_code_of_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyopencl as cl

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a fingerprint opened OpenCL")

    for name in ("get_platforms", "Context", "Program", "CommandQueue"):
        monkeypatch.setattr(cl, name, refuse)
    dev = make_device()
    fp = code_fingerprint(_split_kernel(16), dev)
    assert fp == code_fingerprint(_split_kernel(16, name="renamed"), dev)
    assert fp != code_fingerprint(_split_kernel(32), dev)
    code = generated_code(_split_kernel(16))
    assert code.launch and code.launch[0][1] == "(16)"
    with_options = lp.set_options(_split_kernel(16), build_options=["-cl-fast-relaxed-math"])
    assert code_fingerprint(with_options, dev) != fp
