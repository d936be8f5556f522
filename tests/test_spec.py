"""The specification model (feinsum.spec.model) and formula operands (feinsum.spec.formulas):
builders, implicit output, the interleaved form, derived properties, and every error path,
each checked for the message a user reads."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pymbolic.primitives as prim
import pytest

import feinsum
from feinsum.errors import (
    DTypeError,
    FeinsumError,
    FormulaError,
    ShapeError,
    SpecificationError,
    SubscriptError,
)
from feinsum.spec import (
    INDEX_REDUCTIONS,
    REDUCTION_KINDS,
    SUPPORTED_DTYPES,
    Array,
    BatchedEinsum,
    BlockSparse,
    formulas,
    parse_subscripts,
)

A = feinsum.array("A", (2, 3))
B = feinsum.array("B", (3, 4))
C = feinsum.array("C", (4, 4))


def raises(exc: type[Exception], *fragments: str):  # type: ignore[no-untyped-def]
    """pytest.raises that also checks the message contains every fragment, verbatim."""
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


# {{{ arrays


def test_array_defaults_and_normalisation():
    a = feinsum.array("a", 5)
    assert a == Array("a", (5,), np.dtype(np.float64), "C")
    assert feinsum.array("a", "N").shape == ("N",)
    assert feinsum.array("a", [2, "N"]).shape == (2, "N")
    assert feinsum.array("a", (np.int64(7),)).shape == (7,)
    assert type(feinsum.array("a", (np.int64(7),)).shape[0]) is int
    s = feinsum.array("s", ())
    assert s.ndim == 0 and s.shape == ()


def test_array_repr_and_order():
    assert repr(feinsum.array("x", ("M", 3), np.float32)) == "array('x', ('M', 3), float32)"
    f = feinsum.array("x", ("M", 3), np.float32, order="F")
    assert repr(f) == "array('x', ('M', 3), float32, order='F')"
    assert f != feinsum.array("x", ("M", 3), np.float32)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_supported_dtypes(dtype):
    assert feinsum.array("a", (2,), dtype).dtype == dtype
    assert feinsum.array("a", (2,), dtype.str).dtype == dtype  # "<f8" and friends


def test_dtype_spellings_normalise():
    assert feinsum.array("a", 2, "float32") == feinsum.array("a", 2, np.float32)
    assert feinsum.array("a", 2, "=c16").dtype == np.complex128
    assert feinsum.array("a", 2, int).dtype in (np.dtype(np.int64), np.dtype(np.int32))


@pytest.mark.parametrize("dtype", [np.float16, np.bool_, np.uint32, np.int8, object, "U3"])
def test_unsupported_dtype(dtype):
    with raises(DTypeError, "array 'h'", "is not supported", "supported: float32, float64"):
        feinsum.array("h", (2,), dtype)


def test_big_endian_dtype_is_rejected_with_the_fix():
    with raises(DTypeError, "array 'a'", "big-endian", "use float64"):
        feinsum.array("a", (2,), ">f8")


def test_not_a_dtype_direct():
    with raises(DTypeError, "array 'a'", "'nonsense' is not a dtype"):
        Array("a", (2,), "nonsense")  # type: ignore[arg-type]


def test_not_a_dtype_builder():
    with raises(DTypeError, "array 'a'", "not a dtype"):
        feinsum.array("a", (2,), "nonsense")


@pytest.mark.parametrize(
    ("shape", "fragments"),
    [
        ((0,), ("array 'a', axis 0", "lengths must be >= 1, got 0")),
        ((3, -2), ("array 'a', axis 1", "lengths must be >= 1, got -2")),
        ((2.5,), ("array 'a', axis 0", "a positive integer or a symbol name, got 2.5")),
        (("N-1",), ("array 'a', axis 0", "got 'N-1'")),
        ((True,), ("array 'a', axis 0", "True is not a length")),
    ],
)
def test_bad_lengths(shape, fragments):
    with raises(ShapeError, *fragments):
        feinsum.array("a", shape)


def test_shape_must_be_a_tuple_in_the_dataclass():
    with raises(ShapeError, "array 'a'", "shape must be a tuple"):
        Array("a", [2, 3], np.dtype(np.float64))  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [None, 2.0])
def test_shape_not_a_sequence(shape):
    with raises(ShapeError, "array 'a'"):
        feinsum.array("a", shape)


@pytest.mark.parametrize("name", ["1a", "", "a-b", "a b", 3, None])
def test_bad_array_names(name):
    with raises(SpecificationError, "an array name must be an identifier", repr(name)):
        feinsum.array(name, (2,))


def test_bad_order():
    with raises(SpecificationError, "array 'a'", "order must be 'C' or 'F', got 'K'"):
        feinsum.array("a", (2,), order="K")  # type: ignore[arg-type]


def test_arrays_are_frozen_and_hashable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        A.name = "Z"  # type: ignore[misc]
    assert len({A, feinsum.array("A", (2, 3)), B}) == 2


# }}}


# {{{ einsum: subscripts, implicit output, interleaved form


def test_explicit_subscripts():
    e = feinsum.einsum("ij,jk->ik", A, B)
    assert e.in_indices == (("i", "j"), ("j", "k"))
    assert e.out_indices == ("i", "k")
    assert e.reduction_indices == ("j",)
    assert e.indices == ("i", "k", "j")
    assert dict(e.lengths) == {"i": 2, "k": 4, "j": 3}
    assert e.nrows == 1 and e.noperands == 2
    assert e.reduction == "sum" and e.block_sparse is None
    assert e.subscripts == "ij,jk->ik"
    assert str(e) == "BatchedEinsum('ij,jk->ik', [A, B])"
    assert e.is_plain_einsum


def test_whitespace_and_uppercase_in_subscripts():
    e = feinsum.einsum(" iJ , Jk -> ik ", feinsum.array("X", (2, 3)), B)
    assert e.in_indices == (("i", "J"), ("J", "k"))


def test_scalar_output():
    e = feinsum.einsum("ij,ij->", A, A)
    assert e.out_indices == ()
    assert e.reduction_indices == ("i", "j")


@pytest.mark.parametrize(
    "subscripts",
    ["ij,jk", "ba", "ij,ij", "ijk,kl,lm", "Ab,bc", "zyx,xw", "iI,Ij", "i,i", "ij,kl"],
)
def test_implicit_output_follows_numpy(subscripts):
    ops = subscripts.split(",")
    letters = sorted(set("".join(ops)))
    primes = [2, 3, 5, 7, 11, 13, 17, 19]
    length = dict(zip(letters, primes, strict=False))
    arrays = [feinsum.array(f"a{k}", tuple(length[c] for c in op)) for k, op in enumerate(ops)]
    e = feinsum.einsum(subscripts, *arrays)
    expected_shape = np.einsum(subscripts, *(np.ones(a.shape) for a in arrays)).shape
    assert tuple(length[c] for c in e.out_indices) == expected_shape
    explicit = feinsum.einsum(subscripts + "->" + "".join(e.out_indices), *arrays)
    assert explicit == e


def test_interleaved_form_equals_the_string_form():
    J = feinsum.array("J", (3, 3, "E"))
    D = feinsum.array("D", (3, 35, 35))
    u = feinsum.array("u", (3, "E", 35))
    e = feinsum.einsum("xre,rij,xej->ei", J, D, u)
    f = feinsum.einsum(J, ["x", "r", "e"], D, ("r", "i", "j"), u, ["x", "e", "j"], ["e", "i"])
    assert f == e and hash(f) == hash(e)


def test_interleaved_multi_letter_indices_and_implicit_output():
    P = feinsum.array("P", ("E", 35))
    w = feinsum.array("w", (35,))
    e = feinsum.einsum(P, ["elem", "dof"], w, ["dof"])
    assert e.out_indices == ("elem",)
    assert e.subscripts == "[elem dof],[dof]->[elem]"
    assert dict(e.lengths) == {"elem": "E", "dof": 35}


def test_no_limit_on_the_number_of_indices():
    n = 60
    names = [f"i{k}" for k in range(n)]
    big = feinsum.array("T", (2,) * n)
    vec = feinsum.array("v", (2,))
    e = feinsum.einsum(big, names, vec, ["i0"], names[1:])
    assert len(e.indices) == n
    assert e.reduction_indices == ("i0",)


@pytest.mark.parametrize(
    ("subscripts", "operands", "fragments"),
    [
        ("...i,ij->...j", (A, B), ("'...i,ij->...j'", "ellipsis", "not supported")),
        ("i.j->i", (A,), ("ellipsis",)),
        ("ij->j->i", (A,), ("more than one '->'",)),
        ("ij,jk-ik", (A, B), ("malformed output marker", "write 'ij,jk->ik'")),
        ("ij>i", (A,), ("malformed output marker",)),
        ("i1,jk->ik", (A, B), ("unexpected character '1'", "single ASCII letters",
                               "interleaved form")),
        ("éj->j", (A,), ("unexpected character 'é'",)),
        ("ij,jk->i,k", (A, B), ("unexpected character ','",)),
        ("ij,jk->ik", (A,), ("'ij,jk->ik' names 2 operand(s) but 1 were given",)),
        ("ij->ik", (A,), ("output index 'k' does not appear in any operand",)),
        ("ij->ii", (A,), ("output indices ('i', 'i') repeat an index",)),
        ("ii->i", (C,), ("operand 0", "index 'i' is repeated inside one operand",
                         "diagonals and traces are not supported")),
    ],
)
def test_subscript_errors(subscripts, operands, fragments):
    with raises(SubscriptError, *fragments):
        feinsum.einsum(subscripts, *operands)


def test_parse_subscripts_needs_a_string():
    with raises(SubscriptError, "subscripts must be a string, got int"):
        parse_subscripts(3, 1)  # type: ignore[arg-type]


def test_einsum_needs_arguments():
    with raises(SubscriptError, "einsum() needs subscripts and operands"):
        feinsum.einsum()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        ((A, "ij", B, ["j", "k"], ["i", "k"]),
         ("operand 0 must be followed by a list of index names", "got 'ij'")),
        ((A, [0, 1], [0]), ("operand 0 must be followed by a list of index names",)),
        ((A, ["i", "j"], B, ["j", "k"], "ik"),
         ("the output must be a list of index names", "got 'ik'")),
    ],
)
def test_interleaved_errors(args, fragments):
    with raises(SubscriptError, "interleaved form", *fragments):
        feinsum.einsum(*args)


def test_interleaved_index_names_must_be_identifiers():
    with raises(SpecificationError, "operand 0: an index must be an identifier", "'a-b'"):
        feinsum.einsum(A, ["i", "a-b"], ["i"])


def test_operands_must_be_arrays_or_formulas():
    with raises(SpecificationError, "operand 1", "expected a feinsum.array, a feinsum.formula"):
        feinsum.einsum("ij,jk->ik", A, np.zeros((3, 4)))
    with raises(SpecificationError, "operand 0", "got None"):
        feinsum.einsum("ij->i", None)


# }}}


# {{{ batched einsums and products


def test_batched_einsum_rows_share_and_differ():
    L = feinsum.array("L", (35, 4, 15))
    J = feinsum.array("J", (4, "E"))
    v = [feinsum.array(f"v{k}", (4, "E", 15)) for k in range(3)]
    e = feinsum.batched_einsum("ifj,fe,fej->ei", [[L, J, vk] for vk in v])
    assert e.nrows == 3 and e.noperands == 3
    assert [a.name for a in e.arrays] == ["L", "J", "v0", "v1", "v2"]
    assert e.arguments[2] == ((L,), (J,), (v[2],))
    assert str(e) == "BatchedEinsum('ifj,fe,fej->ei', [L, J, v0]; [L, J, v1]; [L, J, v2])"
    assert list(e.factors())[:3] == [(0, 0, L), (0, 1, J), (0, 2, v[0])]


def test_products_and_repeats():
    D = feinsum.array("D", (35, 35))
    u = feinsum.array("u", ("E", 35))
    sq = feinsum.batched_einsum("ij,ej->ei", [[D, (u, u)]])
    assert sq.arguments == (((D,), (u, u)),)
    assert str(sq) == "BatchedEinsum('ij,ej->ei', [D, u*u])"
    assert sq.arrays == (D, u)
    # a product is not the same spec as the same arrays as separate operands
    assert sq != feinsum.einsum("ij,ej,ej->ei", D, u, u)
    # lists are accepted for products too
    assert feinsum.batched_einsum("ij,ej->ei", [[D, [u, u]]]) == sq


def test_batched_einsum_with_index_lists():
    P = feinsum.array("P", ("E", 35))
    w = feinsum.array("w", (35,))
    e = feinsum.batched_einsum([["elem", "dof"], ["dof"]], [[P, w]], out_indices=["elem"])
    assert e == feinsum.einsum(P, ["elem", "dof"], w, ["dof"], ["elem"])


@pytest.mark.parametrize(
    ("subscripts", "rows", "exc", "fragments"),
    [
        ("ij->i", [], SpecificationError, ("rows must be a non-empty list of rows",)),
        ("ij->i", None, SpecificationError, ("rows must be a non-empty list of rows",)),
        ("ij->i", "AB", SpecificationError, ("rows must be a non-empty list of rows",)),
        ("ij,jk->ik", [[A, B], [A]], SpecificationError,
         ("row 1 has 1 operands but the subscripts have 2",)),
        ("ij->i", [[(A, 3)]], SpecificationError,
         ("row 0, operand 0", "expected a feinsum.array, a feinsum.formula or a tuple")),
        ("ij->i", [[()]], SpecificationError, ("row 0, operand 0", "got ()")),
        ("ij->i", [[A], "A"], SpecificationError, ("row 1 must be a list of operands",)),
        ([["i", "j"]], [[A]], SubscriptError, ("give out_indices",)),
    ],
)
def test_batched_einsum_errors(subscripts, rows, exc, fragments):
    with raises(exc, *fragments):
        feinsum.batched_einsum(subscripts, rows)


# }}}


# {{{ the dataclass itself


def test_specs_are_frozen_hashable_and_structurally_equal():
    e1 = feinsum.einsum("ij,jk->ik", A, B)
    e2 = feinsum.einsum("ij,jk->ik", feinsum.array("A", (2, 3)), feinsum.array("B", (3, 4)))
    assert e1 == e2 and hash(e1) == hash(e2)
    e3 = feinsum.einsum("ij,jk->ik", feinsum.array("A", (2, 3), np.float32), B)
    assert len({e1, e2, e3}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        e1.reduction = "max"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "exc", "fragments"),
    [
        ({"in_indices": [("i",)]}, SubscriptError, ("in_indices must be a tuple of tuples",)),
        ({"arguments": ()}, SpecificationError, ("needs at least one row of arguments",)),
        ({"arguments": ((A,),)}, SpecificationError,
         ("row 0, operand 0: expected a non-empty tuple of factors",)),
        ({"arguments": (((A, "x"),),)}, SpecificationError,
         ("row 0, operand 0", "'x' is neither an array nor a formula")),
        ({"out_indices": ("1",)}, SpecificationError, ("an output index must be an identifier",)),
    ],
)
def test_dataclass_validation(kwargs, exc, fragments):
    fields = {"in_indices": (("i", "j"),), "out_indices": ("i",), "arguments": (((A,),),)}
    fields.update(kwargs)
    with raises(exc, *fragments):
        BatchedEinsum(**fields)


def test_value_dtype_promotes_like_numpy():
    def spec(d1, d2, reduction="sum"):
        return feinsum.einsum("ij,j->i", feinsum.array("M", (2, 3), d1),
                              feinsum.array("v", (3,), d2), reduction=reduction)

    assert spec(np.float32, np.float32).value_dtype() == np.float32
    assert spec(np.float32, np.float64).value_dtype() == np.float64
    assert spec(np.complex64, np.float64).value_dtype() == np.complex128
    assert spec(np.int32, np.int64).value_dtype() == np.int64
    assert spec(np.int32, np.int32, "logsumexp").value_dtype() == np.float64
    assert spec(np.float32, np.float32, "logsumexp").value_dtype() == np.float32


def test_value_dtype_per_row():
    v32 = feinsum.array("v32", (3,), np.float32)
    v64 = feinsum.array("v64", (3,), np.float64)
    M = feinsum.array("M", (2, 3), np.float32)
    e = feinsum.batched_einsum("ij,j->i", [[M, v32], [M, v64]])
    assert (e.value_dtype(0), e.value_dtype(1)) == (np.float32, np.float64)


# }}}


# {{{ lengths


def test_long_threshold():
    assert feinsum.LONG_THRESHOLD == 256
    assert not feinsum.is_long(feinsum.LONG_THRESHOLD - 1)
    assert feinsum.is_long(feinsum.LONG_THRESHOLD)
    assert feinsum.is_long("E")


def test_shared_symbols_and_with_lengths():
    X = feinsum.array("X", ("N", 3))
    Y = feinsum.array("Y", ("N", 3))
    e = feinsum.einsum("id,jd->ij", X, Y)
    assert dict(e.lengths) == {"i": "N", "j": "N", "d": 3}
    assert e.length_symbols == ("N",)
    fixed = e.with_lengths({"N": 1000})
    assert dict(fixed.lengths) == {"i": 1000, "j": 1000, "d": 3}
    assert fixed.length_symbols == ()
    assert e.length_symbols == ("N",)  # unchanged: specs are values


def test_with_lengths_reaches_formula_arrays():
    x = feinsum.array("x", ("M", 3))
    y = feinsum.array("y", ("N", 3))
    K = feinsum.formula("K", "ij", "sum(d, x[i,d]*y[j,d])", [x, y])
    e = feinsum.einsum("ij,j->i", K, feinsum.array("b", ("N",)))
    f = e.with_lengths({"M": 5, "N": 7})
    assert dict(f.lengths) == {"i": 5, "j": 7}
    assert f.formulas[0].arrays[0].shape == (5, 3)


@pytest.mark.parametrize(
    ("lengths", "fragment"), [({"N": 0}, "lengths must be >= 1"), ({"N": "a-b"}, "got 'a-b'")]
)
def test_with_lengths_validates(lengths, fragment):
    e = feinsum.einsum("ij->i", feinsum.array("X", ("N", 3)))
    with raises(ShapeError, "array 'X', axis 0", fragment):
        e.with_lengths(lengths)


def test_length_conflicts_name_both_sides():
    with raises(ShapeError, "index 'i' has length 2 in array 'A' but 3 in array 'B'"):
        feinsum.einsum("ij,ik->jk", A, B)
    with raises(ShapeError, "index 'j' has length 'N' in array 'X' but 3 in array 'B'"):
        feinsum.einsum("ij,jk->ik", feinsum.array("X", (2, "N")), B)


def test_rank_mismatch():
    with raises(ShapeError, "row 0, operand 0: array 'A' has rank 2",
                "its subscripts i,j,k have 3 indices"):
        feinsum.einsum("ijk,jk->ik", A, B)
    with raises(ShapeError, "row 0, operand 0", "rank 2", "(none) have 0"):
        feinsum.einsum(A, [], [])


# }}}


# {{{ names


@pytest.mark.parametrize(
    ("build", "fragments"),
    [
        (lambda: feinsum.einsum("ij,jk->ik", A, feinsum.array("A", (3, 4))),
         ("two different arrays are both named 'A'", "array('A', (2, 3), float64)",
          "array('A', (3, 4), float64)")),
        (lambda: feinsum.einsum("ij,jk->ik", feinsum.array("i", (2, 3)), B),
         ("'i' names both an index and an array/formula/length",)),
        (lambda: feinsum.einsum("ij,jk->ik", feinsum.array("X", ("k", 3)), B),
         ("'k' names both an index and an array/formula/length",)),
        (lambda: feinsum.einsum("ij,jk->ik", feinsum.array("X", ("N", 3)),
                                feinsum.array("N", (3, 4))),
         ("'N' names both a length symbol and an array/formula",)),
        (lambda: feinsum.einsum("ij,ij->i", feinsum.formula("K", "ij", "A[i,j]", [A]),
                                feinsum.formula("K", "ij", "2*A[i,j]", [A])),
         ("two different formulas are both named 'K'",)),
        (lambda: feinsum.einsum("ij,ij->i",
                                feinsum.formula("A", "ij", "Q[i,j]", [feinsum.array("Q", (2, 3))]),
                                A),
         ("'A' names both an array and a formula",)),
        (lambda: feinsum.einsum("ij,ij->i",
                                feinsum.formula("K", "ij", "A[i,j]", [A]),
                                feinsum.array("A", (2, 3), np.float32)),
         ("two different arrays are both named 'A'",)),
    ],
)
def test_name_clashes(build, fragments):
    with raises(SpecificationError, *fragments):
        build()


def test_the_same_array_may_repeat():
    e = feinsum.einsum("ij,ij->i", A, A)
    assert e.arrays == (A,)


# }}}


# {{{ reductions and block-sparse restrictions


@pytest.mark.parametrize("kind", REDUCTION_KINDS)
def test_every_reduction_kind(kind):
    e = feinsum.einsum("ij->i", A, reduction=kind)
    assert e.reduction == kind
    assert e.is_plain_einsum == (kind == "sum")
    assert ("reduction=" in str(e)) == (kind != "sum")


def test_index_reductions_are_argmin_and_argmax():
    assert frozenset({"argmin", "argmax"}) == INDEX_REDUCTIONS


@pytest.mark.parametrize("kind", sorted(INDEX_REDUCTIONS))
@pytest.mark.parametrize(("subscripts", "count"), [("ijk->i", "got 2 (j, k)"),
                                                    ("ij->ij", "got 0 ()")])
def test_index_reductions_need_one_reduction_index(kind, subscripts, count):
    operand = feinsum.array("T", (2, 3, 4)) if subscripts.startswith("ijk") else A
    with raises(SpecificationError, f"{kind} needs exactly one reduction index, {count}"):
        feinsum.einsum(subscripts, operand, reduction=kind)


@pytest.mark.parametrize("kind", ["mean", None, "SUM"])
def test_unknown_reduction(kind):
    with raises(SpecificationError, f"unknown reduction {kind!r}",
                "choose one of sum, min, max, argmin, argmax, logsumexp"):
        feinsum.einsum("ij->i", A, reduction=kind)


def test_block_sparse():
    dense = feinsum.einsum("ij,jk->ik", A, B)
    bs = feinsum.einsum("ij,jk->ik", A, B, block_sparse=BlockSparse("i", "j"))
    assert bs.block_sparse == BlockSparse(out_index="i", reduction_index="j")
    assert bs != dense
    assert not bs.is_plain_einsum
    assert str(bs).endswith("block_sparse)")
    with raises(SpecificationError, "block_sparse.out_index 'z' is not an output index"):
        feinsum.einsum("ij,jk->ik", A, B, block_sparse=BlockSparse("z", "j"))
    with raises(SpecificationError, "block_sparse.reduction_index 'k' is not a reduction index"):
        feinsum.einsum("ij,jk->ik", A, B, block_sparse=BlockSparse("i", "k"))


def test_block_sparse_must_be_a_block_sparse():
    with raises(SpecificationError, "block_sparse"):
        feinsum.einsum("ij,jk->ik", A, B, block_sparse="ij")


# }}}


# {{{ formula operands

x = feinsum.array("x", ("M", 3), np.float32)
y = feinsum.array("y", ("N", 3), np.float32)
s = feinsum.array("s", (), np.float32)
q = feinsum.array("q", (5,), np.int32)


def gaussian():  # type: ignore[no-untyped-def]
    return feinsum.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2) / (2*s**2))", [x, y, s])


def test_formula_operand():
    K = gaussian()
    b = feinsum.array("b", ("N",), np.float32)
    e = feinsum.einsum("ij,j->i", K, b)
    assert dict(e.lengths) == {"i": "M", "j": "N"}
    assert e.arrays == (x, y, s, b)
    assert e.formulas == (K,)
    assert e.value_dtype() == np.float32
    assert not e.is_plain_einsum
    assert str(e) == "BatchedEinsum('ij,j->i', [K(...), b])"
    again = gaussian()
    assert again == K and hash(again) == hash(K)
    assert formulas.feature_indices(K) == {"d": 3}
    assert formulas.formula_argument_lengths(K) == ("M", "N")


@pytest.mark.parametrize("arguments", ["ij", "i,j", "i, j", ["i", "j"], ("i", "j")])
def test_formula_argument_spellings(arguments):
    assert feinsum.formula("K", arguments, "A[i,j]", [A]).arguments == ("i", "j")


def test_formula_from_a_pymbolic_expression():
    expr = prim.Subscript(prim.Variable("q"), (prim.Variable("i"),))
    built = feinsum.formula("H", ["i"], expr, [q])
    parsed = feinsum.formula("H", "i", "q[i]", [q])
    assert str(built) == str(parsed)
    # the parser writes a single index without a tuple, so the two are not == as dataclasses;
    # the database key does not care
    assert feinsum.canonical_key(feinsum.einsum("i->i", built)) == feinsum.canonical_key(
        feinsum.einsum("i->i", parsed))


@pytest.mark.parametrize(
    "text",
    ["A[i,j] if A[i,j] > 0 else 0", "fmax(A[i,j], 0)", "sqrt(abs(A[i,j]))", "2", "A[i,j]**3",
     "-A[i,j] / 2"],
)
def test_formula_expressions_accepted(text):
    feinsum.formula("K", "ij", text, [A])


@pytest.mark.parametrize("op", sorted(formulas.INNER_REDUCTIONS))
def test_inner_reductions(op):
    f = feinsum.formula("K", "i", f"{op}(j, A[i,j])", [A])
    assert formulas.feature_indices(f) == {"j": 3}


def test_an_argument_may_take_its_length_from_another_operand():
    G = feinsum.formula("G", "ij", "q[i]", [q])
    assert formulas.formula_argument_lengths(G) == (5, None)
    e = feinsum.einsum("ij,j->i", G, feinsum.array("w", (3,)))
    assert dict(e.lengths) == {"i": 5, "j": 3}


@pytest.mark.parametrize(
    ("text", "dtype"),
    [("q[i]*q[j]", np.int32), ("exp(q[i])", np.float64), ("q[i]/2", np.float64),
     ("q[i]**2", np.int32)],
)
def test_formula_result_dtype_of_integers(text, dtype):
    assert formulas.formula_result_dtype(feinsum.formula("f", "ij", text, [q])) == dtype


@pytest.mark.parametrize(
    ("text", "dtype"),
    [("x[i,j]*2.0", np.float32), ("x[i,j]*1j", np.complex64), ("exp(x[i,j])", np.float32)],
)
def test_formula_result_dtype_of_floats(text, dtype):
    assert formulas.formula_result_dtype(feinsum.formula("f", "ij", text, [x])) == dtype


def test_map_formula_arrays():
    K = gaussian()
    K7 = formulas.map_formula_arrays(K, lambda a: Array(a.name, tuple(
        7 if isinstance(n, str) else n for n in a.shape), a.dtype, a.order))
    assert [a.shape for a in K7.arrays] == [(7, 3), (7, 3), ()]
    assert K7.expression == K.expression


def test_walk_visits_reductions_and_subscripts():
    kinds = {type(e).__name__ for e in formulas.walk(gaussian().expression)}
    assert {"Call", "Reduction", "Power", "Subscript", "Variable", "Sum"} <= kinds


@pytest.mark.parametrize(
    ("build", "exc", "fragments"),
    [
        (lambda: feinsum.formula("K", "ij", "exp(x[i,", [x]), FormulaError,
         ("formula 'K'", "cannot parse 'exp(x[i,'")),
        (lambda: feinsum.formula("K", "ij", "A[i,j]*r", [A]), FormulaError,
         ("formula 'K'", "unknown name 'r'", "a scalar parameter is a 0-d array")),
        (lambda: feinsum.formula("K", "ij", "foo(A[i,j])", [A]), FormulaError,
         ("formula 'K'", "unknown function foo", "known: abs")),
        (lambda: feinsum.formula("K", "ij", "(A[i,j])(2)", [A]), FormulaError,
         ("unknown function A[i, j]",)),
        (lambda: feinsum.formula("K", "ij", "A[i+1,j]", [A]), FormulaError,
         ("A[i + 1, j]", "array indices must be plain formula arguments or feature indices")),
        (lambda: feinsum.formula("K", "i", "A[i,j]", [A]), FormulaError,
         ("array indices must be plain",)),
        (lambda: feinsum.formula("K", "ij", "A[i]", [A]), ShapeError,
         ("formula 'K'", "A[i] uses 1 indices but 'A' has rank 2")),
        (lambda: feinsum.formula("K", "ij", "A", [A]), FormulaError,
         ("array 'A' of rank 2 is used without subscripts",)),
        (lambda: feinsum.formula("K", "ij", "Q[i,j]", [A]), FormulaError,
         ("Q[i, j] subscripts an unknown array",)),
        (lambda: feinsum.formula("K", "ij", "A[i,j] // 2", [A]), FormulaError,
         ("FloorDiv", "is not supported")),
        (lambda: feinsum.formula("K", "ij", "A[i,j] % 2", [A]), FormulaError,
         ("Remainder", "is not supported")),
        (lambda: feinsum.formula("K", "ij", "A[i,j] > 0 and A[i,j] < 1", [A]), FormulaError,
         ("LogicalAnd", "is not supported")),
        (lambda: feinsum.formula("K", "i", "argmax(j, A[i,j])", [A]), FormulaError,
         ("formula 'K'", "cannot parse",)),
        (lambda: feinsum.formula("K", "i", "sum(i, A[i,i])", [A]), FormulaError,
         ("feature index 'i' shadows another name",)),
        (lambda: feinsum.formula("K", "i", "sum(d, A[i,i])", [A]), ShapeError,
         ("formula 'K'", "index 'i' has lengths 2 and 3")),
        (lambda: feinsum.formula("K", "i", "sum(d, q[i])", [q]), ShapeError,
         ("feature index 'd' indexes no array, so its length is unknown",)),
        (lambda: feinsum.formula("K", "ii", "A[i,i]", [A]), FormulaError,
         ("repeated argument in ('i', 'i')",)),
        (lambda: feinsum.formula("K", ["A"], "1", [A]), FormulaError,
         ("'A' is both an index and an array",)),
        (lambda: feinsum.formula("K", "ij", "A[i,j]", [np.zeros(3)]), FormulaError,
         ("is not a feinsum.array",)),
        (lambda: feinsum.formula("K", "ij", "A[i,j]", [A, feinsum.array("A", (3, 3))]),
         FormulaError, ("two different arrays named 'A'",)),
        (lambda: feinsum.formula("1K", "ij", "A[i,j]", [A]), SpecificationError,
         ("a formula name must be an identifier, got '1K'",)),
        (lambda: feinsum.formula("K", ["i", "2"], "A[i,2]", [A]), SpecificationError,
         ("formula 'K': an argument must be an identifier, got '2'",)),
        (lambda: feinsum.Formula("K", ("i",), "A", (A,)), FormulaError,  # type: ignore[arg-type]
         ("'A' is not an expression",)),
    ],
)
def test_formula_errors(build, exc, fragments):
    with raises(exc, *fragments):
        build()


def test_formula_operand_errors_in_the_einsum():
    K = gaussian()
    with raises(ShapeError, "row 0, operand 0: formula 'K' takes 2 indices",
                "its subscripts i,j,k have 3"):
        feinsum.einsum("ijk->i", K)
    with raises(ShapeError, "index 'j' has length 'N' in formula 'K' but 'P' in array 'b'"):
        feinsum.einsum("ij,j->i", K, feinsum.array("b", ("P",), np.float32))
    with raises(ShapeError, "the length of index 'j' is not determined by any array"):
        feinsum.einsum("ij->i", feinsum.formula("G", "ij", "q[i]", [q]))


def test_formula_arrays_must_be_given():
    with raises(SpecificationError, "formula 'K'"):
        feinsum.formula("K", "ij", "1", None)  # type: ignore[arg-type]


# }}}


# {{{ errors


def test_error_hierarchy():
    for exc in (SubscriptError, ShapeError, DTypeError, FormulaError):
        assert issubclass(exc, SpecificationError)
    assert issubclass(SpecificationError, FeinsumError)
    assert issubclass(SpecificationError, ValueError)
    for name in ("FeinsumError", "SpecificationError", "SubscriptError", "ShapeError",
                 "DTypeError", "FormulaError"):
        assert getattr(feinsum, name).__module__ == "feinsum.errors"


# Every malformed input a user can pass gives a FeinsumError, never an exception from numpy's
# or Python's internals.
@pytest.mark.parametrize(
    "build",
    [
        lambda: feinsum.einsum(None, A),
        lambda: feinsum.einsum(b"ij", A),
        lambda: feinsum.einsum("ij", A, reduction=3),
        lambda: feinsum.array("a", (2,), "f16"),
        lambda: feinsum.batched_einsum("ij->i", [[None]]),
        lambda: feinsum.batched_einsum("ij->i", ([A] for _ in range(2))),
        lambda: feinsum.formula("K", "ij", "exp(", [A]),
    ],
)
def test_malformed_input_gives_a_feinsum_error(build):
    with pytest.raises(FeinsumError):
        build()


# }}}

# vim: foldmethod=marker
