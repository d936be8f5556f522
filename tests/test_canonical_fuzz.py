"""Fuzz tests of canonical keys: invariance under renaming and reordering, and
sensitivity to every single feature a key must distinguish.

Random specs are described as plain data (:class:`Desc`) so that a transformation or a
one-feature mutation is a small edit of the description; :func:`build` turns a
description into a :class:`feinsum.BatchedEinsum`.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import feinsum as fe
from feinsum.errors import SpecificationError
from feinsum.spec.canonical import canonical_key, canonical_text, isomorphism, structure_key
from feinsum.spec.serialize import expression_text

SEED = 20261122
N_INVARIANCE = 520
N_MUTATION = 520

DTYPES = ("float32", "float64", "complex64", "complex128", "int32", "int64")
SHORT = (1, 2, 3, 4, 5, 7, 15, 35)
LONG = (256, 300, 1000, 50000)
FUNCS = ("exp", "log", "sqrt", "abs", "sin", "tanh")


@dataclass
class FormulaDesc:
    args: list[str]
    text: str  # over args, "d" (a feature index) and the formula's arrays
    arrays: list[str]


@dataclass
class Desc:
    lengths: dict[str, Any]  # index -> int or symbol
    in_indices: list[list[str]]
    out: list[str]
    arrays: dict[str, tuple[str, str, tuple[Any, ...]]]  # name -> (dtype, order, shape)
    formulas: dict[str, FormulaDesc] = field(default_factory=dict)
    rows: list[list[list[str]]] = field(default_factory=list)
    reduction: str = "sum"
    block_sparse: tuple[str, str] | None = None


def build(d: Desc) -> fe.BatchedEinsum:
    arrays = {n: fe.array(n, shape, dt, order) for n, (dt, order, shape) in d.arrays.items()}
    factors: dict[str, Any] = dict(arrays)
    for n, f in d.formulas.items():
        factors[n] = fe.formula(n, f.args, f.text, [arrays[a] for a in f.arrays])
    rows = [[tuple(factors[x] for x in entry) for entry in row] for row in d.rows]
    bs = None if d.block_sparse is None else fe.BlockSparse(*d.block_sparse)
    return fe.batched_einsum([tuple(i) for i in d.in_indices], rows, out_indices=d.out,
                             reduction=d.reduction, block_sparse=bs)  # type: ignore[arg-type]


# {{{ random descriptions


class Names:
    def __init__(self, prefix: str) -> None:
        self.prefix, self.n = prefix, 0

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n}"


def random_length(rng: np.random.Generator) -> Any:
    kind = rng.random()
    if kind < 0.55:
        return int(rng.choice(SHORT))
    if kind < 0.75:
        return int(rng.choice(LONG))
    return str(rng.choice(["N", "M", "E"]))


def random_formula(rng: np.random.Generator, d: Desc, idx: list[str], names: Names) -> str:
    """Add a formula operand over *idx* to *d*; return its name."""
    args = [f"q{k}" for k in range(len(idx))]
    arrays: list[str] = []

    def new_array(shape: tuple[Any, ...]) -> str:
        name = names()
        d.arrays[name] = (str(rng.choice(["float32", "float64"])), "C", shape)
        arrays.append(name)
        return name

    base = new_array(tuple(d.lengths[i] for i in idx))
    terms = [f"{base}[{', '.join(args)}]" if args else base]
    if args and rng.random() < 0.5:  # a feature index reduced inside the formula
        nd = int(rng.choice([2, 3]))
        x = new_array((d.lengths[idx[0]], nd))
        y = new_array((d.lengths[idx[-1]], nd))
        op = str(rng.choice(["sum", "max"]))
        terms.append(f"{op}(dd, ({x}[{args[0]}, dd] - {y}[{args[-1]}, dd])**2)")
    if rng.random() < 0.4:
        terms.append(new_array(()))
    if rng.random() < 0.5:
        terms.append(str(rng.choice(["2", "0.5", "3.0", "1e-3"])))
    expr = terms[0]
    for t in terms[1:]:
        expr = f"({expr}) {rng.choice(['+', '*', '-', '/'])} {t}"
    if rng.random() < 0.6:
        expr = f"{rng.choice(FUNCS)}({expr})"
    name = names()
    d.formulas[name] = FormulaDesc(args, expr, arrays)
    return name


def random_desc(rng: np.random.Generator) -> Desc:
    nidx = int(rng.integers(1, 6))
    indices = [f"x{k}" for k in range(nidx)]
    lengths = {i: random_length(rng) for i in indices}
    ncols = int(rng.integers(1, 4))
    cols: list[list[str]] = []
    for _ in range(ncols):
        k = int(rng.integers(0, min(3, nidx) + 1))
        cols.append([str(i) for i in rng.permutation(indices)[:k]])
    for i in indices:
        if not any(i in c for c in cols):
            cols[int(rng.integers(ncols))].append(i)
    nout = int(rng.integers(0, nidx + 1))
    out = [str(i) for i in rng.permutation(indices)[:nout]]
    red = [i for i in indices if i not in out]
    reduction = str(rng.choice(["sum"] * 5 + ["min", "max", "logsumexp"]
                               + (["argmin", "argmax"] * 2 if len(red) == 1 else [])))
    d = Desc(lengths, cols, out, {}, reduction=reduction)
    names = Names("t")
    for _ in range(int(rng.integers(1, 4))):
        row = []
        for idx in cols:
            shape = tuple(lengths[i] for i in idx)
            entry = []
            for _ in range(1 if rng.random() < 0.75 else 2):
                same = [n for n, (_, _, s) in d.arrays.items() if s == shape]
                r = rng.random()
                if same and r < 0.3:  # a repeated array (same or another pattern)
                    entry.append(str(rng.choice(same)))
                elif r < 0.4 and not entry:
                    entry.append(random_formula(rng, d, idx, names))
                else:
                    name = names()
                    d.arrays[name] = (str(rng.choice(DTYPES)),
                                      str(rng.choice(["C", "F"])) if len(shape) > 1 else "C",
                                      shape)
                    entry.append(name)
            row.append(entry)
        d.rows.append(row)
    if out and red and rng.random() < 0.15:
        d.block_sparse = (str(rng.choice(out)), str(rng.choice(red)))
    return d


def random_valid(rng: np.random.Generator) -> tuple[Desc, fe.BatchedEinsum]:
    while True:
        d = random_desc(rng)
        try:
            return d, build(d)
        except SpecificationError:
            continue


# }}}


# {{{ invariance transformations


def transformed(d: Desc, rng: np.random.Generator, long_lengths: bool = False) -> Desc:
    """*d* renamed and reordered at random (and, with *long_lengths*, with other long
    fixed lengths, which keys abstract)."""
    d = copy.deepcopy(d)
    index_names = {i: f"ix{k}_{rng.integers(1000)}"
                   for k, i in enumerate(rng.permutation(list(d.lengths)))}
    factor_names = {n: f"F{k}x{rng.integers(1000)}"
                    for k, n in enumerate(rng.permutation([*d.arrays, *d.formulas]))}
    symbols = sorted({n for n in d.lengths.values() if isinstance(n, str)})
    symbol_names = {s: f"S{k}_{rng.integers(100)}" for k, s in enumerate(rng.permutation(symbols))}
    longs = {n: int(rng.choice(LONG)) for n in set(d.lengths.values())
             if isinstance(n, int) and n >= fe.LONG_THRESHOLD}

    def length(n: Any) -> Any:
        if isinstance(n, str):
            return symbol_names[n]
        return longs.get(n, n) if long_lengths else n

    def rename(text: str, mapping: dict[str, str]) -> str:
        return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: mapping.get(m.group(0), m.group(0)), text)

    new = Desc(
        {index_names[i]: length(n) for i, n in d.lengths.items()},
        [], [index_names[i] for i in d.out],
        {factor_names[n]: (dt, o, tuple(length(x) for x in s))
         for n, (dt, o, s) in d.arrays.items()},
        reduction=d.reduction,
        block_sparse=None if d.block_sparse is None else (
            index_names[d.block_sparse[0]], index_names[d.block_sparse[1]]),
    )
    for n, f in d.formulas.items():
        local = {a: f"arg{k}_{rng.integers(100)}" for k, a in enumerate(f.args)}
        local["dd"] = f"feat{rng.integers(100)}"
        expr = fe.formula("tmp", f.args, f.text, [build_array(d, a) for a in f.arrays]).expression
        text = expression_text(shuffled(expr, rng))
        new.formulas[factor_names[n]] = FormulaDesc(
            [local[a] for a in f.args], rename(text, {**local, **factor_names}),
            [factor_names[a] for a in rng.permutation(f.arrays)])
    cols = list(rng.permutation(len(d.in_indices)))
    new.in_indices = [[index_names[i] for i in d.in_indices[c]] for c in cols]
    for r in rng.permutation(len(d.rows)):
        new.rows.append([[factor_names[x] for x in rng.permutation(d.rows[r][c])] for c in cols])
    return new


def build_array(d: Desc, name: str) -> fe.Array:
    dt, order, shape = d.arrays[name]
    return fe.array(name, shape, dt, order)  # type: ignore[arg-type]


def shuffled(expr: Any, rng: np.random.Generator) -> Any:
    """*expr* with the terms of every sum and product in random order."""
    import pymbolic.primitives as prim
    from loopy.symbolic import Reduction

    def visit(e: Any) -> Any:
        if isinstance(e, (prim.Sum, prim.Product)):
            children = [visit(c) for c in e.children]
            return type(e)(tuple(children[k] for k in rng.permutation(len(children))))
        if isinstance(e, Reduction):
            return Reduction(e.operation, e.inames, visit(e.expr), e.allow_simultaneous)
        if isinstance(e, prim.Quotient):
            return prim.Quotient(visit(e.numerator), visit(e.denominator))
        if isinstance(e, prim.Power):
            return prim.Power(visit(e.base), visit(e.exponent))
        if isinstance(e, prim.Call):
            return prim.Call(e.function, tuple(visit(p) for p in e.parameters))
        return e

    return visit(expr)


# }}}


# {{{ one-feature mutations


def _array_uses(d: Desc) -> dict[str, int]:
    uses: dict[str, int] = {}
    for row in d.rows:
        for entry in row:
            for x in entry:
                uses[x] = uses.get(x, 0) + 1
    return uses


MUTATIONS = ("dtype", "length", "symbol", "order", "repeat", "reduction", "formula",
             "block_sparse", "long_short")


def mutate(d: Desc, rng: np.random.Generator, kind: str) -> Desc | None:
    """A copy of *d* that differs in one feature (*kind*) a key must see (None if that
    feature cannot change here)."""
    d = copy.deepcopy(d)
    direct = [n for row in d.rows for entry in row for n in entry if n in d.arrays]
    if kind == "dtype":
        n = str(rng.choice(list(d.arrays)))
        dt, o, s = d.arrays[n]
        d.arrays[n] = (str(rng.choice([x for x in DTYPES if x != dt])), o, s)
    elif kind == "order":
        cands = [n for n, (_, _, s) in d.arrays.items() if len(s) > 1]
        if not cands:
            return None
        n = str(rng.choice(cands))
        dt, o, s = d.arrays[n]
        d.arrays[n] = (dt, "F" if o == "C" else "C", s)
    elif kind in ("length", "symbol", "long_short"):
        if kind == "length":
            cands = [i for i, n in d.lengths.items() if isinstance(n, int) and n < 256]
            new = lambda n: int(rng.choice([x for x in SHORT if x != n]))  # noqa: E731
        elif kind == "long_short":
            cands = [i for i, n in d.lengths.items() if fe.is_long(n)]
            new = lambda n: int(rng.choice(SHORT))  # noqa: E731
        else:
            cands = [i for i, n in d.lengths.items() if isinstance(n, str)]
            symbols = {n for n in d.lengths.values() if isinstance(n, str)}
            used = lambda n: sum(x == n for x in d.lengths.values())  # noqa: E731
            # split a shared symbol, or merge an unshared one into another symbol
            new = lambda n: "Fresh" if used(n) > 1 else (  # noqa: E731
                str(rng.choice(sorted(symbols - {n}))) if len(symbols) > 1 else None)
        if not cands:
            return None
        i = str(rng.choice(cands))
        old, value = d.lengths[i], new(d.lengths[i])
        if value is None or any(old in d.arrays[a][2] for f in d.formulas.values()
                                for a in f.arrays):
            return None  # (formula arrays would need to follow)
        d.lengths[i] = value
        # arrays read by i change with it; a repeated array tying i to another index makes
        # the spec invalid, and build() then rejects it
        for c, idx in enumerate(d.in_indices):
            if i in idx:
                for row in d.rows:
                    for x in row[c]:
                        if x in d.arrays:
                            dt, o, s = d.arrays[x]
                            d.arrays[x] = (dt, o, tuple(d.lengths[j] for j in idx))
    elif kind == "repeat":
        uses = _array_uses(d)
        r, c = int(rng.integers(len(d.rows))), int(rng.integers(len(d.in_indices)))
        entry = d.rows[r][c]
        k = int(rng.integers(len(entry)))
        x = entry[k]
        if x not in d.arrays:
            return None
        if uses[x] > 1 or x in {a for f in d.formulas.values() for a in f.arrays}:
            entry[k] = "Copy"  # an array used twice becomes two arrays
            d.arrays["Copy"] = d.arrays[x]
        else:  # an array used once becomes a repeat of a like one
            like = [n for n in dict.fromkeys(direct) if n != x and d.arrays[n] == d.arrays[x]]
            if not like:
                return None
            entry[k] = str(rng.choice(like))
            del d.arrays[x]
    elif kind == "reduction":
        red = [i for i in d.lengths if i not in d.out]
        kinds = ["sum", "min", "max", "logsumexp"] + (["argmin", "argmax"] if len(red) == 1 else [])
        d.reduction = str(rng.choice([k for k in kinds if k != d.reduction]))
    elif kind == "formula":
        if not d.formulas:
            return None
        f = d.formulas[str(rng.choice(list(d.formulas)))]
        f.text = str(rng.choice([f"cos({f.text})", f"({f.text}) * 7.25", f"({f.text})**3"]))
    elif kind == "block_sparse":
        red = [i for i in d.lengths if i not in d.out]
        if d.block_sparse is not None:
            d.block_sparse = None
        elif d.out and red:
            d.block_sparse = (str(rng.choice(d.out)), str(rng.choice(red)))
        else:
            return None
    return d


# }}}


def check_isomorphism(a: fe.BatchedEinsum, b: fe.BatchedEinsum) -> None:
    """isomorphism(a, b) exists and really turns a into b."""
    iso = isomorphism(a, b)
    assert sorted(iso.rows) == list(range(b.nrows))
    assert sorted(iso.columns) == list(range(b.noperands))
    assert tuple(iso.indices[i] for i in a.out_indices) == b.out_indices
    names = {**iso.arrays, **iso.formulas}
    barrays = {x.name: x for x in b.arrays}
    for x in a.arrays:
        y = barrays[names[x.name]]
        assert x.dtype == y.dtype
        assert tuple(iso.lengths.get(n, n) for n in x.shape) == y.shape
        assert x.ndim < 2 or x.order == y.order
    for ra, rb in enumerate(iso.rows):
        for ca, cb in enumerate(iso.columns):
            assert tuple(iso.indices[i] for i in a.in_indices[ca]) == b.in_indices[cb]
            got = sorted(names[f.name] for f in a.arguments[ra][ca])
            assert got == sorted(f.name for f in b.arguments[rb][cb])


def test_invariance_fuzz() -> None:
    rng = np.random.default_rng(SEED)
    n_formulas = n_repeats = n_long = 0
    for _ in range(N_INVARIANCE):
        d, e = random_valid(rng)
        n_formulas += bool(d.formulas)
        n_repeats += any(u > 1 for u in _array_uses(d).values())
        t = transformed(d, rng)
        e2 = build(t)
        assert canonical_text(e) == canonical_text(e2), (e, e2)
        assert canonical_key(e) == canonical_key(e2)
        assert structure_key(e) == structure_key(e2)
        check_isomorphism(e, e2)
        if any(isinstance(n, int) and n >= 256 for n in d.lengths.values()):
            n_long += 1
            e3 = build(transformed(d, rng, long_lengths=True))
            assert canonical_key(e3) == canonical_key(e)
    # the generator covers what it should
    assert n_formulas > 50 and n_repeats > 50 and n_long > 50


def test_mutation_fuzz() -> None:
    rng = np.random.default_rng(SEED + 1)
    done: dict[str, int] = {}
    while sum(done.values()) < N_MUTATION:
        d, e = random_valid(rng)
        # the least exercised mutation that applies to this spec
        for kind in sorted(MUTATIONS, key=lambda k: (done.get(k, 0), rng.random())):
            d2 = mutate(d, rng, kind)
            try:
                e2 = build(d2) if d2 is not None else None
            except SpecificationError:
                continue
            if e2 is not None:
                break
        else:
            continue
        done[kind] = done.get(kind, 0) + 1
        assert canonical_key(e) != canonical_key(e2), (kind, canonical_text(e))
        with pytest.raises(fe.NotIsomorphicError):
            isomorphism(e, e2)
        if kind not in ("length", "symbol", "long_short"):
            assert structure_key(e) != structure_key(e2), kind
    assert len(done) == len(MUTATIONS) and min(done.values()) >= 30, done


# vim: foldmethod=marker
