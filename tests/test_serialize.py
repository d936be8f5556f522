"""JSON form of specs: round trips, and clear errors on malformed input."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pymbolic.primitives as prim
import pytest

import feinsum as fe
from feinsum.spec.canonical import canonical_key, canonicalize
from feinsum.spec.serialize import expression_text, spec_from_json, spec_to_json


def gaussian(**kw: Any) -> fe.BatchedEinsum:
    x = fe.array("x", ("N", 3), np.float32)
    y = fe.array("y", ("M", 3), np.float32)
    b = fe.array("b", ("M", 4), np.float32)
    s = fe.array("s", (), np.float32)
    K = fe.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2) / (2*s**2))", [x, y, s])
    return fe.einsum(K, ["i", "j"], b, ["j", "c"], ["i", "c"], **kw)


def nearest() -> fe.BatchedEinsum:
    x = fe.array("x", ("N", 3), np.float32)
    y = fe.array("y", ("M", 3), np.float32)
    dist = fe.formula("dist", "ij", "sum(d, (x[i,d] - y[j,d])**2)", [x, y])
    return fe.einsum(dist, ["i", "j"], ["i"], reduction="argmin")


def softmin() -> fe.BatchedEinsum:
    x = fe.array("x", ("N", 3), np.float32)
    y = fe.array("y", ("M", 3), np.float32)
    f = fe.array("f", ("M",), np.float32)
    eps = fe.array("eps", (), np.float32)
    F = fe.formula("F", "ij", "f[j] - sum(d, (x[i,d]-y[j,d])**2) / eps", [x, y, f, eps])
    return fe.einsum(F, ["i", "j"], ["i"], reduction="logsumexp")


def face_mass() -> fe.BatchedEinsum:
    L = fe.array("L", (35, 4, 15))
    J = fe.array("J", (4, "E"), order="F")
    return fe.batched_einsum("ifj,fe,fej->ei", [
        [L, J, fe.array(f"v{k}", (4, "E", 15))] for k in range(4)])


SPECS = {
    "plain": lambda: fe.einsum("ij,jk->ik", fe.array("A", (3, 4)), fe.array("B", (4, 5))),
    "F order and symbols": face_mass,
    "products and dtypes": lambda: fe.einsum(
        "ij,j->i", (fe.array("A", (3, 4), np.complex64), fe.array("A2", (3, 4), np.complex64)),
        (fe.array("u", 4, np.int32), fe.array("u", 4, np.int32))),
    "formula": gaussian,
    "argmin": nearest,
    "logsumexp": softmin,
    "block-sparse": lambda: gaussian(block_sparse=fe.BlockSparse("i", "j")),
    "scalar": lambda: fe.einsum(",i->i", fe.array("a", ()), fe.array("x", ("N",))),
}


@pytest.mark.parametrize("name", SPECS)
def test_round_trip(name: str) -> None:
    e = SPECS[name]()
    d = spec_to_json(e)
    assert json.loads(json.dumps(d)) == d  # plain JSON data
    assert spec_from_json(d) == e
    assert spec_from_json(json.dumps(d)) == e
    c = canonicalize(e)
    assert spec_from_json(json.loads(json.dumps(spec_to_json(c)))) == c


def test_round_trip_fuzz() -> None:
    from test_canonical_fuzz import random_valid

    rng = np.random.default_rng(7)
    for _ in range(150):
        _, e = random_valid(rng)
        assert spec_from_json(json.loads(json.dumps(spec_to_json(e)))) == e


def test_format() -> None:
    d = spec_to_json(nearest())
    assert d["format"] == "feinsum.BatchedEinsum" and d["version"] == 1
    assert d["reduction"] == "argmin"
    assert d["formulas"] == [{
        "name": "dist", "arguments": ["i", "j"],
        "expression": "sum(d, (x[i, d] + (-1) * y[j, d])**2)", "arrays": ["x", "y"]}]
    assert d["arrays"][0] == {"name": "x", "shape": ["N", 3], "dtype": "float32", "order": "C"}
    assert d["rows"] == [[["dist"]]]


def test_hand_built_expressions() -> None:
    """n-ary pymbolic sums come back in the parser's nested form: same key."""
    x = fe.array("x", ("N",))
    i = prim.Variable("i")
    expr = prim.Sum((prim.Subscript(prim.Variable("x"), i), 1, prim.Product((2, i))))
    e = fe.einsum(fe.Formula("F", ("i",), expr, (x,)), ["i"], ["i"])
    back = spec_from_json(spec_to_json(e))
    assert canonical_key(back) == canonical_key(e)
    assert expression_text(back.formulas[0].expression) == "(x[i] + 1) + 2 * i"


@pytest.mark.parametrize("constant", [float("inf"), float("nan"), np.float32(2.0), 1 + 2j])
def test_constants_text_cannot_carry(constant: Any) -> None:
    x = fe.array("x", ("N",))
    expr = prim.Product((prim.Subscript(prim.Variable("x"), prim.Variable("i")), constant))
    e = fe.einsum(fe.Formula("F", ("i",), expr, (x,)), ["i"], ["i"])
    with pytest.raises(fe.SpecificationError, match="cannot be written as text"):
        spec_to_json(e)


def _broken(edit: Any) -> dict[str, Any]:
    d = copy.deepcopy(spec_to_json(gaussian()))
    edit(d)
    return d


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.update(format="numpy"), "format: expected 'feinsum.BatchedEinsum'"),
    (lambda d: d.update(version=2), "version: unsupported version 2"),
    (lambda d: d.pop("rows"), "spec: missing key 'rows'"),
    (lambda d: d.update(reduction=3), "spec.reduction: expected str, got int 3"),
    (lambda d: d.update(reduction="mean"), "unknown reduction 'mean'"),
    (lambda d: d["arrays"][0].update(shape=[True, 3]), r"arrays\[0\].shape\[0\]"),
    (lambda d: d["arrays"][0].update(shape="N3"), r"arrays\[0\].shape: expected list"),
    (lambda d: d["arrays"][0].update(dtype="float16"), "float16 is not supported"),
    (lambda d: d["arrays"][1].update(name="x"), r"arrays\[1\]: array 'x' is listed twice"),
    (lambda d: d["arrays"][0].update(shape=["N", -1]), "lengths must be >= 1"),
    (lambda d: d["rows"][0][1].append("nope"), r"rows\[0\]\[1\]: unknown array or formula 'nope'"),
    (lambda d: d["rows"][0].append(["b"]), "row 0 has 3 operands"),
    (lambda d: d["formulas"][0].update(arrays=["x", "q"]), r"formulas\[0\].arrays: unknown array"),
    (lambda d: d["formulas"][0].update(expression="exp(x[i,"), "cannot parse"),
    (lambda d: d["formulas"][0].update(expression="__import__('os').system('true')"),
     "cannot parse"),
    (lambda d: d["formulas"][0].update(expression="system(s)"), "unknown function"),
    (lambda d: d["formulas"][0].update(expression="z[i]"), "subscripts an unknown array"),
    (lambda d: d.update(in_indices=[["i", "j"], "jc"]), r"in_indices\[1\]: expected a list"),
    (lambda d: d.update(block_sparse={"out_index": "i"}), "missing key 'reduction_index'"),
    (lambda d: d.update(block_sparse={"out_index": "j", "reduction_index": "i"}),
     "not an output index"),
    (lambda d: d.update(rows="x"), "spec.rows: expected list"),
])
def test_malformed(edit: Any, message: str) -> None:
    with pytest.raises(fe.SpecificationError, match=message):
        spec_from_json(_broken(edit))


def test_malformed_documents() -> None:
    with pytest.raises(fe.SpecificationError, match="not valid JSON"):
        spec_from_json("{'single': 'quotes'}")
    with pytest.raises(fe.SpecificationError, match="expected an object, got list"):
        spec_from_json([1, 2])  # type: ignore[arg-type]
