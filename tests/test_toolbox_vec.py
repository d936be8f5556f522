"""toolbox_vec: OpenCL vector lanes along the last output index, arguments untouched."""

from __future__ import annotations

from types import SimpleNamespace

import loopy as lp
import numpy as np
import pytest

import feinsum
from feinsum.lowering.kernel import generate_loopy
from feinsum.recipes.testing import run_kernel
from feinsum.spec.canonical import canonicalize
from feinsum.toolbox import core as tb
from feinsum.toolbox import vec as tv


def _gemv(dtype=np.float32, reduction="sum"):  # type: ignore[no-untyped-def]
    return canonicalize(feinsum.einsum("ij,j->i", feinsum.array("A", ("N", 21), dtype),
                                       feinsum.array("b", (21,), dtype), reduction=reduction))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_lanes_match_reference(cl_queue, dtype) -> None:  # type: ignore[no-untyped-def]
    e = _gemv(dtype)
    x = e.out_indices[-1]
    t = tb.assume_nonempty(generate_loopy(e), e)
    t = tv.vectorize_output(t, e, 4)
    t = tb.distribute(t, x, work_items=2, axis=0, per_item=2, per_item_tag="ilp")
    t = tv.finish_lanes(t)
    assert t.default_entrypoint.args == generate_loopy(e).default_entrypoint.args  # untouched
    code = lp.generate_code_v2(t).device_code()
    assert ("float4" if dtype == np.float32 else "double4") in code
    for n in (1, 7, 37):  # not multiples of the 2 x 2 x 4 entries of a work-group
        got, ref = run_kernel(t, e, {e.length_symbols[0]: n}, cl_queue)
        np.testing.assert_allclose(got["out0"], ref["out0"], rtol=1e-5)


def test_vector_reason_and_lanes() -> None:
    assert tv.vector_reason(_gemv()) is None
    assert "argmin" in str(tv.vector_reason(_gemv(reduction="argmin")))
    assert "complex" in str(tv.vector_reason(_gemv(np.complex64)))
    scalar = canonicalize(feinsum.einsum("i,i->", feinsum.array("x", ("N",)),
                                         feinsum.array("y", ("N",))))
    assert "scalar" in str(tv.vector_reason(scalar))
    small = SimpleNamespace(preferred_vector_width_float=4, preferred_vector_width_double=2)
    wide = SimpleNamespace(preferred_vector_width_float=16, preferred_vector_width_double=8)
    assert tv.max_lanes(_gemv(), small) == 8 and tv.max_lanes(_gemv(np.float64), small) == 4
    assert tv.max_lanes(_gemv(), wide) == 16  # OpenCL vectors have at most 16 lanes
    with pytest.raises(ValueError, match="argmin"):
        tv.vectorize_output(generate_loopy(_gemv(reduction="argmin")),
                            _gemv(reduction="argmin"), 4)
