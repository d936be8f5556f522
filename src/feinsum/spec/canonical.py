"""Canonical form, keys and isomorphisms of batched einsums.

A spec is encoded as a vertex-coloured graph and canonically labelled with nauty
(``pynauty``); the canonical names, the order of rows, columns and factors and the
canonical text all come from that labelling, so specs equal up to renaming and
reordering get identical text. The graph has a vertex for every

* index (coloured by output position, or "reduction"; block-sparse ones marked), formula
  feature index (bound by its inner reduction) and length (a symbol, or a fixed value),
* array (dtype, memory order, rank) with one vertex per axis (linked to its length),
* formula (arity) with one vertex per argument, and its expression tree: sums and products
  flattened, their children unordered; other operations (``/``, ``**``, calls, comparisons,
  ``if``) reach their children through numbered slot vertices; constants coloured by value,
  calls by function name, subscripts linked to the array and, through slots, to the indices,
* column (its index positions link to the index vertices), row, operand entry (linked to
  its row and column) and factor occurrence (linked to its entry and its array/formula).

Lengths: an index, the array axes it reads and the formula arguments/feature indices tied
to them form one *length component*. In the key, short fixed lengths stay numbers, each
component with a long fixed length gets a symbol of its own, and user symbols stay shared
(``"E"`` on two axes is one symbol). :func:`structure_key` gives every component its own
symbol. :func:`isomorphism` compares lengths exactly.

Memory order only counts for arrays of rank >= 2 (rank 0 and 1 arrays read as C order).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property, lru_cache, reduce
from typing import Any, Literal

import numpy as np
import pymbolic.primitives as prim
import pynauty

from feinsum.errors import NotIsomorphicError, SpecificationError
from feinsum.spec.model import Array, BatchedEinsum, BlockSparse, Formula, Length, is_long
from feinsum.spec.serialize import constant_text, expression_text

#: Prefix of every key; bump it when the canonical text changes (old records then miss).
KEY_PREFIX = "fek1-"

_Mode = Literal["exact", "key", "structure"]

# Colour-class ranks. Classes are ordered by their label (rank first), and nauty's
# canonical labelling respects that order: output indices get i0, i1, ... by position.
(_OUT, _RED, _FEATURE, _LENGTH, _ARRAY, _AXIS, _FORMULA, _ARG, _ROW, _COLUMN, _POSITION,
 _ENTRY, _FACTOR, _NODE, _SLOT) = range(15)
_SYMBOL = -1  # the payload of a symbolic length's label (fixed ones carry their value)


def _order(a: Array) -> str:
    return a.order if a.ndim > 1 else "C"


# {{{ the graph


class _Graph:
    def __init__(self) -> None:
        self.labels: list[tuple[Any, ...]] = []
        self.adj: list[list[int]] = []
        self.parent: list[int] = []  # union-find of length components
        #: expression vertex -> (kind, payload, data)
        self.nodes: dict[int, tuple[str, str, Any]] = {}

    def add(self, label: tuple[Any, ...], *neighbours: int) -> int:
        v = len(self.labels)
        self.labels.append(label)
        self.adj.append(list(neighbours))
        self.parent.append(v)
        return v

    def find(self, v: int) -> int:
        parent = self.parent
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    def union(self, u: int, v: int) -> None:
        ru, rv = self.find(u), self.find(v)
        if ru != rv:
            self.parent[max(ru, rv)] = min(ru, rv)

    def canonical_positions(self) -> tuple[list[int], list[int]]:
        """nauty's canonical labelling: ``lab[p]`` is the vertex at canonical position p."""
        classes: dict[tuple[Any, ...], set[int]] = {}
        for v, label in enumerate(self.labels):
            classes.setdefault(label, set()).add(v)
        graph = pynauty.Graph(
            len(self.labels),
            adjacency_dict={v: nb for v, nb in enumerate(self.adj) if nb},
            vertex_coloring=[classes[k] for k in sorted(classes)],
        )
        lab = list(pynauty.canon_label(graph))
        pos = [0] * len(lab)
        for p, v in enumerate(lab):
            pos[v] = p
        return lab, pos


def _encode_expression(g: _Graph, expr: Any, scope: dict[str, int], array_v: dict[str, int],
                       axis_v: dict[str, list[int]], features: list[int]) -> int:
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import reduction_name

    def node(kind: str, payload: str, data: Any, *neighbours: int) -> int:
        v = g.add((_NODE, kind, payload), *neighbours)
        g.nodes[v] = (kind, payload, data)
        return v

    def ordered(kind: str, payload: str, children: Iterable[Any], scope: dict[str, int]) -> int:
        cs = [visit(c, scope) for c in children]
        v = node(kind, payload, cs)
        for k, c in enumerate(cs):
            g.add((_SLOT, k), v, c)
        return v

    def flatten(e: Any, cls: Any) -> list[Any]:
        return [t for c in e.children for t in flatten(c, cls)] if isinstance(e, cls) else [e]

    def visit(e: Any, scope: dict[str, int]) -> int:
        if not isinstance(e, prim.ExpressionNode):
            return node("const", constant_text(e), e)
        if isinstance(e, prim.Variable):
            return node("ref", "", scope[e.name], scope[e.name])
        if isinstance(e, prim.Subscript):
            name = str(e.aggregate)  # check_formula: plain variables
            targets = [scope[str(i)] for i in e.index_tuple]
            v = node("sub", "", (name, targets), array_v[name])
            for k, (t, axis) in enumerate(zip(targets, axis_v[name], strict=True)):
                g.add((_SLOT, k), v, t)
                g.union(axis, t)
            return v
        if isinstance(e, (prim.Sum, prim.Product)):
            cls = type(e)
            cs = [visit(c, scope) for c in flatten(e, cls)]
            return node("sum" if cls is prim.Sum else "product", "", cs, *cs)
        if isinstance(e, prim.Quotient):
            return ordered("quotient", "", (e.numerator, e.denominator), scope)
        if isinstance(e, prim.Power):
            return ordered("power", "", (e.base, e.exponent), scope)
        if isinstance(e, prim.Call):
            return ordered("call", str(e.function), e.parameters, scope)
        if isinstance(e, prim.Comparison):
            return ordered("compare", e.operator, (e.left, e.right), scope)
        if isinstance(e, prim.If):
            return ordered("if", "", (e.condition, e.then, e.else_), scope)
        if isinstance(e, Reduction):
            feats = [g.add((_FEATURE,)) for _ in e.inames]
            features.extend(feats)
            inner = dict(scope)
            inner.update(zip((str(i) for i in e.inames), feats, strict=True))
            child = visit(e.expr, inner)
            payload = reduction_name(e) + (" simultaneous" if e.allow_simultaneous else "")
            return node("reduce", payload, (child, feats, e.operation, e.allow_simultaneous),
                        child, *feats)
        raise SpecificationError(f"{type(e).__name__} ({e}) cannot be canonicalised")

    return visit(expr, scope)


@dataclass
class _Encoding:
    graph: _Graph
    index_v: dict[str, int]
    array_v: dict[str, int]
    axis_v: dict[str, list[int]]
    formula_v: dict[str, int]
    arg_v: dict[str, list[int]]
    roots: dict[str, int]
    features: list[int]
    col_v: list[int]
    row_v: list[int]
    occurrences: list[list[list[int]]]
    length_of: dict[int, int]  # index/axis/argument/feature vertex -> its length vertex
    length_value: dict[int, Length]  # length vertex -> the length it stands for


def _encode(e: BatchedEinsum, mode: _Mode) -> _Encoding:
    g = _Graph()
    bs = e.block_sparse
    out_pos = {i: k for k, i in enumerate(e.out_indices)}
    index_v: dict[str, int] = {}
    for i in e.indices:
        if i in out_pos:
            index_v[i] = g.add((_OUT, out_pos[i], int(bs is not None and bs.out_index == i)))
        else:
            index_v[i] = g.add((_RED, int(bs is not None and bs.reduction_index == i)))
    array_v: dict[str, int] = {}
    axis_v: dict[str, list[int]] = {}
    for a in e.arrays:
        v = array_v[a.name] = g.add((_ARRAY, a.dtype.name, _order(a), a.ndim))
        axis_v[a.name] = [g.add((_AXIS, k), v) for k in range(a.ndim)]
    formula_v: dict[str, int] = {}
    arg_v: dict[str, list[int]] = {}
    roots: dict[str, int] = {}
    features: list[int] = []
    for f in e.formulas:
        v = formula_v[f.name] = g.add((_FORMULA, len(f.arguments)),
                                      *(array_v[a.name] for a in f.arrays))
        arg_v[f.name] = [g.add((_ARG, k), v) for k in range(len(f.arguments))]
        scope = {a.name: array_v[a.name] for a in f.arrays}
        scope.update(zip(f.arguments, arg_v[f.name], strict=True))
        roots[f.name] = _encode_expression(g, f.expression, scope, array_v, axis_v, features)
        g.adj[v].append(roots[f.name])
    col_v = []
    for idx in e.in_indices:
        cv = g.add((_COLUMN,))
        col_v.append(cv)
        for k, i in enumerate(idx):
            g.add((_POSITION, k), cv, index_v[i])
    row_v = []
    occurrences = []
    linked: set[tuple[str, int]] = set()
    for row in e.arguments:
        rv = g.add((_ROW,))
        row_v.append(rv)
        occ_row = []
        for c, entry in enumerate(row):
            ev = g.add((_ENTRY,), rv, col_v[c])
            occ_entry = []
            for x in entry:
                arr = isinstance(x, Array)
                occ_entry.append(g.add((_FACTOR,), ev, (array_v if arr else formula_v)[x.name]))
                if (x.name, c) not in linked:
                    linked.add((x.name, c))
                    ms = (axis_v if arr else arg_v)[x.name]
                    for m, i in zip(ms, e.in_indices[c], strict=True):
                        g.union(m, index_v[i])
            occ_row.append(occ_entry)
        occurrences.append(occ_row)

    # length components, and their length vertices
    members = [*index_v.values(), *(x for xs in axis_v.values() for x in xs),
               *(x for xs in arg_v.values() for x in xs), *features]
    value: dict[int, Length] = {}
    for a in e.arrays:
        for axis, n in zip(axis_v[a.name], a.shape, strict=True):
            root = g.find(axis)
            if value.setdefault(root, n) != n:
                raise SpecificationError(f"inconsistent lengths {value[root]!r} and {n!r} "
                                         f"for axes tied to array {a.name!r}")
    length_of: dict[int, int] = {}
    length_value: dict[int, Length] = {}
    by_key: dict[tuple[Any, ...], int] = {}
    for m in members:
        root = g.find(m)
        if root not in value:
            raise SpecificationError("an index or formula argument has no length")
        n = value[root]
        own = mode == "structure" or (mode == "key" and isinstance(n, int) and is_long(n))
        key = ("component", root) if own else ("length", n)
        lv = by_key.get(key)
        if lv is None:
            symbolic = own or isinstance(n, str)
            lv = by_key[key] = g.add((_LENGTH, _SYMBOL if symbolic else n))
            length_value[lv] = n
        g.adj[m].append(lv)
        length_of[m] = lv
    return _Encoding(g, index_v, array_v, axis_v, formula_v, arg_v, roots, features, col_v,
                     row_v, occurrences, length_of, length_value)


# }}}


# {{{ the canonical form


def _python_constant(c: Any) -> Any:
    """numpy's float64/complex128 (what the parser makes of ``2j``) as Python numbers."""
    for t in (int, float, complex):
        if isinstance(c, t) and not isinstance(c, bool):
            return t(c)  # type: ignore[arg-type]
    return c


class _Canon:
    """The canonical labelling of one spec in one mode, and what it names."""

    def __init__(self, e: BatchedEinsum, mode: _Mode) -> None:
        enc = _encode(e, mode)
        g = enc.graph
        self.lab, pos = g.canonical_positions()
        self.pos = pos

        def ranked(vs: Iterable[int]) -> list[int]:
            return sorted(vs, key=pos.__getitem__)

        name: dict[int, str] = {}  # vertex -> canonical name
        self.original: dict[int, tuple[str, Any]] = {}  # vertex -> (kind, original name)
        for kind, prefix, where in (("index", "i", enc.index_v), ("array", "a", enc.array_v),
                                    ("formula", "f", enc.formula_v)):
            inverse = {v: k for k, v in where.items()}
            for k, v in enumerate(ranked(where.values())):
                name[v] = f"{prefix}{k}"
                self.original[v] = (kind, inverse[v])
        for k, v in enumerate(ranked(enc.features)):
            name[v] = f"d{k}"
        for vs in enc.arg_v.values():
            name.update((v, f"p{k}") for k, v in enumerate(vs))
        length: dict[int, Length] = {}  # length vertex -> canonical length
        self.lengths: dict[str, int] = {}
        symbols = [v for v, n in enc.length_value.items() if g.labels[v][1] == _SYMBOL]
        for k, v in enumerate(ranked(symbols)):
            length[v] = f"n{k}"
            n = enc.length_value[v]
            if isinstance(n, int):
                self.lengths[f"n{k}"] = n
            else:
                self.original[v] = ("length", n)
        for v, n in enc.length_value.items():
            length.setdefault(v, n)
        for r, v in enumerate(enc.row_v):
            self.original[v] = ("row", r)
        for c, v in enumerate(enc.col_v):
            self.original[v] = ("column", c)

        # the canonical pieces
        arrays = {a.name: a for a in e.arrays}
        self.arrays: dict[str, tuple[np.dtype[Any], str, tuple[Length, ...]]] = {}
        for v in ranked(enc.array_v.values()):
            a = arrays[self.original[v][1]]
            shape = tuple(length[enc.length_of[x]] for x in enc.axis_v[a.name])
            self.arrays[name[v]] = (a.dtype, _order(a), shape)
        self.index_lengths = {
            name[v]: length[enc.length_of[v]]
            for v in ranked([*enc.index_v.values(), *enc.features])
        }

        def rebuild(v: int) -> Any:
            from loopy.symbolic import Reduction

            kind, payload, data = g.nodes[v]
            if kind == "const":
                return _python_constant(data)
            if kind == "ref":
                return prim.Variable(name[data])
            if kind == "sub":
                agg, targets = data
                idx = tuple(prim.Variable(name[t]) for t in targets)
                return prim.Subscript(prim.Variable(name[enc.array_v[agg]]),
                                      idx[0] if len(idx) == 1 else idx)
            if kind in ("sum", "product"):
                cls = prim.Sum if kind == "sum" else prim.Product
                cs = [rebuild(c) for c in ranked(data)]
                # the parser's nesting, so that JSON text reads back equal
                return reduce(lambda x, y: cls((x, y)), cs) if len(cs) > 1 else cls(tuple(cs))
            if kind == "reduce":
                child, feats, operation, simultaneous = data
                return Reduction(operation, tuple(name[f] for f in ranked(feats)),
                                 rebuild(child), simultaneous)
            cs = [rebuild(c) for c in data]
            if kind == "call":
                return prim.Call(prim.Variable(payload), tuple(cs))
            if kind == "compare":
                return prim.Comparison(cs[0], payload, cs[1])
            return {"quotient": prim.Quotient, "power": prim.Power, "if": prim.If}[kind](*cs)

        formulas = {f.name: f for f in e.formulas}
        self.formulas: dict[str, tuple[int, Any, tuple[str, ...]]] = {}
        for v in ranked(enc.formula_v.values()):
            f = formulas[self.original[v][1]]
            members = tuple(name[x] for x in ranked(enc.array_v[a.name] for a in f.arrays))
            self.formulas[name[v]] = (len(f.arguments), rebuild(enc.roots[f.name]), members)

        index_name = {i: name[v] for i, v in enc.index_v.items()}
        col_order = sorted(range(e.noperands), key=lambda c: pos[enc.col_v[c]])
        self.in_indices = tuple(tuple(index_name[i] for i in e.in_indices[c]) for c in col_order)
        self.out_indices = tuple(index_name[i] for i in e.out_indices)
        self.rows: list[list[list[str]]] = []
        for r in sorted(range(e.nrows), key=lambda r: pos[enc.row_v[r]]):
            row = []
            for c in col_order:
                occ = enc.occurrences[r][c]
                entry = e.arguments[r][c]
                factor_vertex = [(enc.array_v if isinstance(f, Array) else enc.formula_v)[f.name]
                                 for f in entry]
                order = sorted(range(len(entry)), key=lambda k: pos[occ[k]])
                row.append([name[factor_vertex[k]] for k in order])
            self.rows.append(row)
        self.reduction = e.reduction
        bs = e.block_sparse
        self.block_sparse = None if bs is None else BlockSparse(
            index_name[bs.out_index], index_name[bs.reduction_index])
        self.text = self._text()

    def _text(self) -> str:
        bs = self.block_sparse
        header: str = self.reduction
        if bs is not None:
            header += f" block_sparse({bs.out_index},{bs.reduction_index})"
        sections = [header + " -> [" + ",".join(self.out_indices) + "]"]
        sections.append(" ".join(f"{i}:{n}" for i, n in self.index_lengths.items()))
        sections.append(" ".join(
            f"{a}:{dt.name}[{','.join(str(n) for n in shape)}]" + (":F" if order == "F" else "")
            for a, (dt, order, shape) in self.arrays.items()))
        for f, (nargs, expr, _) in self.formulas.items():
            args = ",".join(f"p{k}" for k in range(nargs))
            sections.append(f"{f}({args}) = {expression_text(expr, flat=True)}")
        for r, row in enumerate(self.rows):
            entries = (
                "*".join(
                    f"{x}[{','.join(idx)}]" if x in self.arrays else f"{x}({','.join(idx)})"
                    for x in entry)
                for entry, idx in zip(row, self.in_indices, strict=True))
            sections.append(f"row{r}: " + ", ".join(entries))
        return " | ".join(sections)

    @cached_property
    def key(self) -> str:
        return KEY_PREFIX + hashlib.sha256(self.text.encode()).hexdigest()[:32]

    @cached_property
    def spec(self) -> BatchedEinsum:
        arrays = {a: Array(a, shape, dt, order)  # type: ignore[arg-type]
                  for a, (dt, order, shape) in self.arrays.items()}
        factors: dict[str, Array | Formula] = dict(arrays)
        for f, (nargs, expr, members) in self.formulas.items():
            factors[f] = Formula(f, tuple(f"p{k}" for k in range(nargs)), expr,
                                 tuple(arrays[a] for a in members))
        rows = tuple(tuple(tuple(factors[x] for x in entry) for entry in row)
                     for row in self.rows)
        return BatchedEinsum(self.in_indices, self.out_indices, rows,
                             self.reduction, self.block_sparse)  # type: ignore[arg-type]


def _constant_signature(e: BatchedEinsum) -> tuple[tuple[str, ...], ...]:
    """Formula constants as text: ``2`` and ``2.0`` compare equal, so the cache key needs it."""
    from feinsum.spec.formulas import walk

    return tuple(
        tuple(constant_text(x) for x in walk(f.expression)
              if not isinstance(x, prim.ExpressionNode))
        for f in e.formulas
    )


@lru_cache(maxsize=1024)
def _canon_cached(e: BatchedEinsum, mode: _Mode, _signature: object) -> _Canon:
    return _Canon(e, mode)


def _canon(e: BatchedEinsum, mode: _Mode) -> _Canon:
    if not isinstance(e, BatchedEinsum):
        raise SpecificationError(f"expected a feinsum.BatchedEinsum, got {type(e).__name__}")
    has_formulas = any(isinstance(f, Formula) for _, _, f in e.factors())
    return _canon_cached(e, mode, _constant_signature(e) if has_formulas else ())


# }}}


# {{{ public API


def canonicalize(e: BatchedEinsum) -> BatchedEinsum:
    """The canonical representative of *e*: indices ``i0, i1, ...`` (outputs first, in
    order), feature indices ``d0, ...``, arrays ``a0, ...``, formulas ``f0, ...`` (arguments
    ``p0, ...``), length symbols ``n0, ...``; rows, columns and factors in canonical order;
    every long fixed length replaced by a symbol of its own (see :func:`canonical_lengths`)."""
    return _canon(e, "key").spec


def canonical_lengths(e: BatchedEinsum) -> dict[str, int]:
    """The values *e* fixes for the symbols of :func:`canonicalize` (symbols *e* itself left
    symbolic are absent): ``canonicalize(e).with_lengths(canonical_lengths(e))`` equals *e*
    up to renaming and reordering."""
    return dict(_canon(e, "key").lengths)


def canonical_text(e: BatchedEinsum) -> str:
    """A readable, deterministic text of the canonical form; equal texts mean equal keys."""
    return _canon(e, "key").text


def canonical_key(e: BatchedEinsum) -> str:
    """``"fek1-"`` + 32 hex digits of the SHA-256 of :func:`canonical_text`."""
    return _canon(e, "key").key


def structure_key(e: BatchedEinsum) -> str:
    """The key of *e* with every length (short ones too) replaced by a symbol of its own:
    specs that differ only in their lengths share it."""
    return _canon(e, "structure").key


@dataclass(frozen=True)
class Isomorphism:
    """How *b* renames *a*: ``indices``, ``arrays``, ``formulas`` and ``lengths`` (length
    symbols) map a-names to b-names; ``rows[ra] == rb`` and ``columns[ca] == cb``."""

    indices: dict[str, str]
    arrays: dict[str, str]
    formulas: dict[str, str]
    lengths: dict[str, str]
    rows: tuple[int, ...]
    columns: tuple[int, ...]


def isomorphism(a: BatchedEinsum, b: BatchedEinsum) -> Isomorphism:
    """The renaming (and reordering of rows, columns and factors) that turns *a* into *b*.

    Lengths must agree exactly (symbols may be renamed). To relate a spec to its canonical
    form use ``isomorphism(canonicalize(e).with_lengths(canonical_lengths(e)), e)``.
    Raises :class:`~feinsum.NotIsomorphicError` saying what differs.
    """
    ca, cb = _canon(a, "exact"), _canon(b, "exact")
    if ca.text != cb.text:
        raise NotIsomorphicError(_difference(a, b))
    maps: dict[str, dict[Any, Any]] = {k: {} for k in
                                       ("index", "array", "formula", "length", "row", "column")}
    for v, (kind, x) in ca.original.items():
        kind_b, y = cb.original[cb.lab[ca.pos[v]]]
        if kind_b != kind:  # pragma: no cover - equal canonical graphs rule this out
            raise NotIsomorphicError(f"internal error: {kind} maps to {kind_b}")
        maps[kind][x] = y
    def in_order(kind: str, names: Iterable[str]) -> dict[str, str]:
        return {x: maps[kind][x] for x in names}

    return Isomorphism(
        in_order("index", a.indices), in_order("array", (x.name for x in a.arrays)),
        in_order("formula", (f.name for f in a.formulas)),
        in_order("length", a.length_symbols),
        tuple(maps["row"][r] for r in range(a.nrows)),
        tuple(maps["column"][c] for c in range(a.noperands)),
    )


def _counts(items: Iterable[Any]) -> str:
    counter = Counter(str(x) for x in items)
    return ", ".join(f"{k} x{n}" for k, n in sorted(counter.items())) or "none"


def _length_text(n: Length) -> str:
    return "symbolic" if isinstance(n, str) else str(n)


def _formula_operations(e: BatchedEinsum) -> str:
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import reduction_name, walk

    def op(x: Any) -> str:
        if isinstance(x, prim.Call):
            return f"call {x.function}"
        if isinstance(x, Reduction):
            return f"inner {reduction_name(x)}"
        if not isinstance(x, prim.ExpressionNode):
            return f"constant {constant_text(x)}"
        return type(x).__name__
    return _counts(op(x) for f in e.formulas for x in walk(f.expression))


_INVARIANTS: tuple[tuple[str, Callable[[BatchedEinsum], object]], ...] = (
    ("numbers of rows", lambda e: e.nrows),
    ("numbers of operands", lambda e: e.noperands),
    ("numbers of output indices", lambda e: len(e.out_indices)),
    ("numbers of reduction indices", lambda e: len(e.reduction_indices)),
    ("reductions", lambda e: e.reduction),
    ("block-sparse restrictions", lambda e: "none" if e.block_sparse is None else "present"),
    ("numbers of arrays", lambda e: len(e.arrays)),
    ("numbers of formulas", lambda e: len(e.formulas)),
    ("array dtypes", lambda e: _counts(a.dtype.name for a in e.arrays)),
    ("array ranks", lambda e: _counts(a.ndim for a in e.arrays)),
    ("memory orders", lambda e: _counts(a.order for a in e.arrays if a.ndim > 1)),
    ("output index lengths",
     lambda e: ", ".join(_length_text(e.lengths[i]) for i in e.out_indices)),
    ("reduction index lengths",
     lambda e: _counts(_length_text(e.lengths[i]) for i in e.reduction_indices)),
    ("array shapes", lambda e: _counts(
        "(" + ",".join(_length_text(n) for n in a.shape) + ")" for a in e.arrays)),
    ("numbers of length symbols", lambda e: len(e.length_symbols)),
    ("formula operations", _formula_operations),
)


def _difference(a: BatchedEinsum, b: BatchedEinsum) -> str:
    """Why *a* and *b* are not isomorphic: cheap invariants first."""
    for what, invariant in _INVARIANTS:
        va, vb = invariant(a), invariant(b)
        if va != vb:
            return f"{what} differ: {va} (a) vs {vb} (b)"
    if _canon(a, "structure").text != _canon(b, "structure").text:
        return ("structure differs: the index patterns, repeated arrays, operand arrangement "
                "or formula expressions do not match up")
    return ("lengths differ: the structure matches, but not which axes have which length "
            "(or which share a symbol)")


# }}}

# vim: foldmethod=marker
