"""The arithmetic of one statement, as a GPU's pipes see it (per work-item execution).

``lp.get_op_map`` counts operations by kind, but it fails on the kernels feinsum
generates: on a ``min()`` clamp in an index (``TypeError: unexpected value type``), on the
argmin/argmax and other custom reductions; and it counts index arithmetic as arithmetic,
and every repetition of a subexpression again. This counter reads the statement's value
expression only (indices are the compiler's address arithmetic) and counts what a compiler
keeps of it:

* each distinct subexpression once (:meth:`OpCounter.nodes`: the compiler computes ``(x -
  y) * (x - y)`` as one subtraction and one multiplication, and ``a*b*c`` as ``(a*b)*c``,
  its ``a*b`` shared with ``a*b*d``); what is shared *between* statements, and what is
  invariant in a loop, :mod:`feinsum.prediction.reuse` finds;
* ``a + b*c`` (and ``a + b**2``) fused into one FMA; a factor of ``1`` or ``-1`` free (a
  negation is an operand modifier of NVIDIA's and AMD's fp instructions, so is ``fabs``);
  a constant expression folded; a logical ``!`` free (a negated predicate), an ``&&`` or
  ``||`` one instruction (a predicate operation, or a second select);
* a function call as what its library expands it into: special-function-unit instructions
  and fp instructions, accurate or (with ``-cl-fast-relaxed-math``) fast; an OpenCL
  ``native_``/``half_`` built-in is one special-function instruction and the few fp
  instructions that scale its argument (PTX: ``native_exp2`` is one ``ex2.approx``,
  ``native_exp`` a multiplication and one ``ex2.approx``, ``native_log`` one ``lg2.approx``
  and a multiplication); the combine functions of feinsum's own reductions (``logsumexp``,
  ``feinsum_argmin``...) as their source reads. A function it does not know counts as two
  fp instructions and is named in the prediction's notes;
* a subexpression of integers only (loop indices, integer arguments and temporaries,
  integer constants: the element bound check ``e0 + n*rows + l1 < E`` of a guarded load)
  as integer instructions, whatever the statement's type: NVIDIA's ``ISETP``/``IMAD`` run
  on the integer pipe, not the fp32 or fp64 one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pymbolic.primitives as prim

#: (special-function instructions, fp instructions) per call, fp32 accurate / fast, and
#: fp64 (CUDA libdevice's instruction counts: expf = ex2.approx after a range reduction
#: of ~8 FMAs; fp64 functions are polynomial evaluations on the fp64 pipe).
_FUNCTIONS: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    "exp": ((1, 8), (1, 1), (0, 24)), "exp2": ((1, 2), (1, 0), (0, 22)),
    "expm1": ((1, 12), (1, 2), (0, 26)), "log": ((1, 8), (1, 1), (0, 28)),
    "log2": ((1, 6), (1, 0), (0, 26)), "log1p": ((1, 12), (1, 2), (0, 30)),
    "sqrt": ((1, 3), (1, 0), (1, 10)), "rsqrt": ((1, 1), (1, 0), (1, 8)),
    "sin": ((1, 10), (1, 1), (0, 30)), "cos": ((1, 10), (1, 1), (0, 30)),
    "tanh": ((1, 8), (1, 2), (0, 30)), "pow": ((2, 16), (2, 2), (0, 60)),
    "erf": ((0, 14), (0, 14), (0, 30)), "fabs": ((0, 0), (0, 0), (0, 0)),
    "fmin": ((0, 1), (0, 1), (0, 1)), "fmax": ((0, 1), (0, 1), (0, 1)),
    "abs": ((0, 1), (0, 1), (0, 1)), "min": ((0, 1), (0, 1), (0, 1)),
    "max": ((0, 1), (0, 1), (0, 1)), "isnan": ((0, 1), (0, 1), (0, 1)),
    "copysign": ((0, 1), (0, 1), (0, 1)), "fma": ((0, 1), (0, 1), (0, 1)),
    "floor": ((0, 1), (0, 1), (0, 1)), "ceil": ((0, 1), (0, 1), (0, 1)),
}
#: OpenCL's ``native_*`` and ``half_*`` built-ins (float32 only): (special-function, fp)
#: instructions, as NVIDIA's compiler emits them (PTX ``ex2.approx``, ``lg2.approx``,
#: ``rcp.approx``, ``rsqrt.approx``, ``sqrt.approx``, ``sin.approx``, ``cos.approx``, each
#: one MUFU instruction, and a multiplication where the argument or the result is scaled).
_NATIVE: dict[str, tuple[int, int]] = {
    "exp2": (1, 0), "exp": (1, 1), "exp10": (1, 1), "log2": (1, 0), "log": (1, 1),
    "log10": (1, 1), "recip": (1, 0), "rsqrt": (1, 0), "sqrt": (1, 0), "divide": (1, 1),
    "sin": (1, 1), "cos": (1, 1), "tan": (3, 2), "powr": (2, 1),
}
#: The combine functions of feinsum's own reductions (:mod:`feinsum.lowering.loopy_ops`,
#: counted from their source): (special-function, fp, integer/logic) instructions, fp32
#: accurate / fast, fp64. ``logsumexp``: an ``exp``, a ``log1p``, a subtraction and an
#: addition, and its NaN and infinity tests, comparison and selects; ``feinsum_argmin``:
#: the NaN tests, the comparisons of values and indices, their logic, two selects;
#: ``feinsum_min``: a comparison, a NaN test, their ``||``, a select.
_COMBINES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "logsumexp": ((2, 22, 11), (2, 5, 11), (0, 56, 11)),
    **dict.fromkeys(("feinsum_argmin", "feinsum_argmax"), ((0, 0, 13),) * 3),
    **dict.fromkeys(("feinsum_min", "feinsum_max"), ((0, 0, 4),) * 3),
    "make_tuple": ((0, 0, 0),) * 3,
}
#: A division: fp32 a reciprocal and a Newton step, fp64 the same on the fp64 pipe.
_DIVISION = ((1, 4), (1, 1), (1, 10))


@dataclass
class Ops:
    """Per work-item execution: fp instructions (an FMA is one), the flops they do,
    special-function instructions, integer/logic instructions; functions not known."""

    fp: float = 0.0
    flops: float = 0.0
    sfu: float = 0.0
    other: float = 0.0
    unknown: set[str] = field(default_factory=set)

    def add(self, o: Ops) -> None:
        self.fp += o.fp
        self.flops += o.flops
        self.sfu += o.sfu
        self.other += o.other
        self.unknown |= o.unknown

    @property
    def instructions(self) -> float:
        return self.fp + self.sfu + self.other


@dataclass(frozen=True)
class Node:
    """One distinct subexpression: the instructions it costs itself (its operands'
    instructions not included) and every name it depends on (variables read and loop
    indices, through its operands and their indices)."""

    expr: Any
    ops: Ops
    depends: frozenset[str]


def _function_name(expr: prim.Call) -> str:
    f = expr.function
    name = getattr(f, "name", str(f))
    return str(getattr(name, "name", name))


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, complex)) and not isinstance(x, bool)


def _factors(expr: prim.Product) -> tuple[list[Any], int]:
    """The factors of *expr* that are not constants, and its multiplications: constants
    fold into one factor, and a constant of ``1`` or ``-1`` is no multiplication."""
    const: complex = 1
    rest = []
    for c in expr.children:
        if isinstance(c, (int, float, complex)) and not isinstance(c, bool):
            const *= c
        else:
            rest.append(c)
    if not rest:
        return [], 0
    return rest, len(rest) - 1 + (0 if const in (1, -1) else 1)


def _float_constant(expr: Any) -> bool:
    """Whether *expr* has a floating-point constant among its leaves (outside indices)."""
    if isinstance(expr, (float, complex)) or (
            hasattr(expr, "dtype") and getattr(expr.dtype, "kind", "") in "fc"):
        return True
    if isinstance(expr, (prim.Subscript, prim.Variable, int, str)) or expr is None:
        return False
    if isinstance(expr, tuple):
        return any(_float_constant(c) for c in expr)
    return any(_float_constant(c) for c in getattr(expr, "__getinitargs__", tuple)())


def _index_names(index: Any) -> frozenset[str]:
    from loopy.symbolic import get_dependencies

    return frozenset(get_dependencies(index))


def leaf_depends(expr: Any, found: dict[Any, Node]) -> frozenset[str] | None:
    """The names a constant, a variable or a subexpression already in *found* depends on
    (None: any other expression, to be walked)."""
    if expr is None or isinstance(expr, (int, float, complex, str)):
        return frozenset()
    if expr in found:
        return found[expr].depends
    if isinstance(expr, prim.Variable):
        return frozenset([expr.name])
    return None


class OpCounter:
    """Counts :class:`Ops` in a value expression of a given float width."""

    def __init__(self, itemsize: int, fast_math: bool,
                 integers: frozenset[str] = frozenset()) -> None:
        self.column = 2 if itemsize == 8 else (1 if fast_math else 0)
        #: the names that hold integers (loop indices, integer arguments and temporaries)
        self.integers = integers

    def __call__(self, expr: Any) -> Ops:
        """The instructions of *expr*, each distinct subexpression once."""
        out = Ops()
        for n in self.nodes(expr):
            out.add(n.ops)
        return out

    def nodes(self, expr: Any) -> list[Node]:
        """The distinct subexpressions of *expr* that cost instructions, operands first."""
        found: dict[Any, Node] = {}
        self._rec(expr, found)
        return list(found.values())

    def _node(self, expr: Any, found: dict[Any, Node], depends: frozenset[str],
              fp: float = 0.0, flops: float | None = None, sfu: float = 0.0,
              other: float = 0.0, unknown: frozenset[str] = frozenset()) -> frozenset[str]:
        if fp and depends and depends <= self.integers and not _float_constant(expr):
            fp, flops, other = 0.0, 0.0, other + fp  # integer arithmetic: not an fp pipe's
        if fp or sfu or other or unknown:
            ops = Ops(fp, fp if flops is None else flops, sfu, other, set(unknown))
            found[expr] = Node(expr, ops, depends)
        return depends

    def _all(self, children: Any, found: dict[Any, Node]) -> frozenset[str]:
        deps: frozenset[str] = frozenset()
        for c in children:
            deps |= self._rec(c, found)
        return deps

    def _rec(self, expr: Any, found: dict[Any, Node]) -> frozenset[str]:
        """Registers the nodes of *expr* in *found*; returns the names it depends on."""
        known = leaf_depends(expr, found)
        if known is not None:
            return known
        if isinstance(expr, prim.Subscript):  # a read; its index is address arithmetic
            return frozenset([getattr(expr.aggregate, "name", str(expr.aggregate))]) | (
                _index_names(expr.index))
        if isinstance(expr, prim.Sum):
            return self._sum(expr, found)
        if isinstance(expr, prim.Product):
            rest, mults = _factors(expr)
            if mults < 2:
                return self._node(expr, found, self._all(rest, found), mults)
            # C multiplies left to right: ``a*b*c`` is ``(a*b)*c``, its ``a*b`` shared
            # with every product that starts with it
            return self._node(expr, found, self._prefix(expr, found), 1)
        if isinstance(expr, prim.Quotient):
            sfu, fp = _DIVISION[self.column]
            deps = self._all((expr.numerator, expr.denominator), found)
            return self._node(expr, found, deps, fp, 1, sfu)
        if isinstance(expr, prim.Power):
            deps = self._rec(expr.base, found)
            if expr.exponent == 2:
                return self._node(expr, found, deps, 1)
            sfu, fp = _FUNCTIONS["pow"][self.column]
            return self._node(expr, found, deps | self._rec(expr.exponent, found), fp, 1, sfu)
        if isinstance(expr, prim.Call):
            return self._call(expr, found)
        if isinstance(expr, (prim.Min, prim.Max)):
            return self._node(expr, found, self._all(expr.children, found),
                              len(expr.children) - 1)
        if isinstance(expr, prim.Comparison):
            return self._node(expr, found, self._all((expr.left, expr.right), found), 1, 0)
        if isinstance(expr, prim.If):
            deps = self._all((expr.condition, expr.then, expr.else_), found)
            return self._node(expr, found, deps, other=1)
        if isinstance(expr, prim.LogicalNot):  # a negated predicate: free
            return self._rec(expr.child, found)
        if isinstance(expr, (prim.LogicalAnd, prim.LogicalOr)):
            return self._node(expr, found, self._all(expr.children, found),
                              other=len(expr.children) - 1)
        children: list[Any] = []
        for c in getattr(expr, "__getinitargs__", tuple)():
            children.extend(c if isinstance(c, tuple) else (c,))
        return self._all(children, found)

    def _sum(self, expr: prim.Sum, found: dict[Any, Node]) -> frozenset[str]:
        """Additions, each fusing one product of the terms into an FMA."""
        terms = [c for c in expr.children if not _is_number(c)]
        constants = any(_is_number(c) and c != 0 for c in expr.children)
        adds = len(terms) - 1 + (1 if constants and terms else 0)
        fp = flops = 0.0
        deps: frozenset[str] = frozenset()
        fusable = adds
        for t in terms:
            rest: list[Any] = []
            mults = 0
            if isinstance(t, prim.Product):
                rest, mults = _factors(t)
            elif isinstance(t, prim.Power) and t.exponent == 2:
                rest, mults = [t.base], 1
            if mults and fusable > 0:
                fusable -= 1
                fp += 1  # the last multiplication fused with an addition
                flops += 2
                deps |= (self._prefix(t, found) if isinstance(t, prim.Product) and mults > 1
                         else self._all(rest, found))
            else:
                deps |= self._rec(t, found)
        fp += fusable
        flops += fusable
        return self._node(expr, found, deps, fp, flops)

    def _prefix(self, expr: prim.Product, found: dict[Any, Node]) -> frozenset[str]:
        """Registers the product of all factors of *expr* but the last (a node of its own)
        and the last; returns what both depend on."""
        *first, last = expr.children
        return self._rec(prim.Product(tuple(first)), found) | self._rec(last, found)

    def _call(self, expr: prim.Call, found: dict[Any, Node]) -> frozenset[str]:
        name = _function_name(expr)
        deps = self._all(expr.parameters, found)
        base = name.removeprefix("native_").removeprefix("half_")
        if base != name and base in _NATIVE:
            sfu, fp = _NATIVE[base]
            return self._node(expr, found, deps, fp, 1, sfu)
        if base in _COMBINES:
            sfu, fp, other = _COMBINES[base][self.column]
            return self._node(expr, found, deps, fp, 1 if fp or sfu else 0, sfu, other)
        known = _FUNCTIONS.get(base.rstrip("f"), _FUNCTIONS.get(base))
        if known is None:
            return self._node(expr, found, deps, 2, unknown=frozenset([base]))
        sfu, fp = known[self.column]
        return self._node(expr, found, deps, fp, 1 if fp or sfu else 0, sfu)
