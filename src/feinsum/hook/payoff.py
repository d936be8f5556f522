"""Whether a transformation pays: the work of an einsum, the size of the code it makes.

The hook never makes a program many times its size (``docs/compiler-guide.rst``, "What
the hook will not do"):

* an einsum with less than :data:`MIN_EINSUM_FLOPS` of work (a 3x3 metric term on a few
  hundred elements) is not worth a device kernel and global barriers of its own: it is left
  to the default schedule with the statements around it (:func:`too_little_work`) -- on a
  CPU; on other devices only if each output entry also sums at most
  :data:`MAX_SERIAL_TERMS` terms, since the default schedule gives an output entry's terms
  to one work-item, in sequence (the minimum of 50,000 values is 50,000 flops, and
  milliseconds on one work-item of a GPU);
* a transformed einsum whose code, counted in statements after loopy unrolls
  (:func:`unrolled_statements`), exceeds :data:`PART_CODE_LIMIT` is refused, and the next
  candidate tried (the generic default unrolls every short reduction loop: a chain of five
  16x16 matrices is 65,536 statements);
* the transformed program may have at most :data:`CODE_FACTOR` times the untransformed
  program's statements plus :data:`CODE_PER_EINSUM` per transformed einsum, plus
  :data:`ONE_LARGE_EINSUM` once (:func:`code_budget`: one einsum as large as a part may
  be always fits); beyond, the einsums with the least work are given back to the default
  schedule until it fits;
* units of a program share a device launch (:mod:`feinsum.matching.merge`) while their
  statements, once unrolled, number at most :data:`LAUNCH_CODE_LIMIT` together: a device
  compiler's time grows faster than the size of the function it compiles (PoCL took
  minutes for 20 einsums of a right-hand side in one launch);
* the transformation may take at most :data:`SECONDS_BASE` plus :data:`SECONDS_PER_STATEMENT`
  a statement of the untransformed program (:func:`time_budget`); once spent, the remaining
  einsums are left to the default schedule;
* a compiled program runs untransformed while it is transformed in the background only if
  one call of it untransformed is predicted within :data:`BACKGROUND_RUN_LIMIT`
  (:func:`untransformed_seconds`): a right-hand side whose untransformed call takes a
  minute is better transformed at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loopy.symbolic import CombineMapper

from feinsum.matching.size import unrolled_statements

if TYPE_CHECKING:
    from feinsum.matching import Match

#: Flops below which an einsum is left to the default schedule (about 10 us of one core,
#: what a device kernel launch and a global barrier cost).
MIN_EINSUM_FLOPS = 100_000
#: Terms of one output entry a work-item of a GPU sums in sequence in the time of a kernel
#: launch and a global barrier (about 10 us at :data:`UNTRANSFORMED_RATE`'s 1e7 a
#: second): an einsum with more per entry gets a kernel of its own however few its flops.
MAX_SERIAL_TERMS = 100
#: Statements (after unrolling) one transformed einsum may generate.
PART_CODE_LIMIT = 4096
#: The transformed program: at most this many times the untransformed program's
#: statements (after unrolling) ...
CODE_FACTOR = 4
#: ... plus this many per transformed einsum ...
CODE_PER_EINSUM = 1024
#: ... plus this many once, so that one einsum of the largest size a part may have
#: (:data:`PART_CODE_LIMIT`; a GEMM's 8 x 8 register tiles over 16 ``K`` entries are 1,024
#: FMAs and 1,355 statements in all) is never given back by a program of its own.
ONE_LARGE_EINSUM = PART_CODE_LIMIT - CODE_PER_EINSUM
#: Statements (after unrolling) the units sharing one device launch may have together.
LAUNCH_CODE_LIMIT = 512
#: Seconds the transformation of a program may take: this much ...
SECONDS_BASE = 30.0
#: ... plus this much per statement of the untransformed program.
SECONDS_PER_STATEMENT = 0.25
#: Loop iterations a second of an untransformed program (one work-item): on a CPU (0.4 and
#: 2.3e9 measured on this project's machine: a DG step and a 20-einsum right-hand side,
#: E = 500), on other devices (a GPU's one work-item waits out every memory access).
UNTRANSFORMED_RATE = {"CPU": 1e9, "other": 1e7}
#: A compiled program predicted to take at most this many seconds a call untransformed
#: runs so while it is transformed in the background (:mod:`feinsum.hook.background`);
#: a slower one is transformed at its first call.
BACKGROUND_RUN_LIMIT = 1.0


def einsum_flops(m: Match, lengths: Iterable[tuple[str, int]] = ()) -> int | None:
    """The flops of group *m* (cheapest contraction order) at the kernel's lengths and
    *lengths*; None when a length is known only at run time."""
    from feinsum.spec.costs import contraction_flops

    e = m.einsum
    fixed = {k: v for k, v in lengths if k in e.length_symbols}
    if set(e.length_symbols) - set(fixed):
        return None
    try:
        return int(contraction_flops(e.with_lengths(fixed) if fixed else e))
    except Exception:  # an einsum the cost model does not price: count it as worth it
        return None


def serial_terms(m: Match, lengths: Iterable[tuple[str, int]] = ()) -> int | None:
    """The terms of one output entry of group *m* (the product of its reduction lengths)
    at the kernel's lengths and *lengths*; None when a length is known only at run time."""
    e = m.einsum
    known = dict(lengths)
    terms = 1
    for i in e.reduction_indices:
        n = e.lengths[i]
        value = n if isinstance(n, int) else known.get(str(n))
        if value is None:
            return None
        terms *= int(value)
    return terms


def too_little_work(flops: int | None, terms: int | None = None, cpu: bool = True
                    ) -> str | None:
    """Why a group of *flops* (:func:`einsum_flops`) whose output entries sum *terms*
    each (:func:`serial_terms`) is not worth a kernel of its own on a CPU (*cpu*) or
    another device (None: it is)."""
    if flops is None or flops >= MIN_EINSUM_FLOPS:
        return None
    if not cpu and (terms is None or terms > MAX_SERIAL_TERMS):
        return None
    return (f"too little work for a kernel of its own ({flops:,} flops < "
            f"{MIN_EINSUM_FLOPS:,}): left to the default schedule")


def part_too_large(knl: Any) -> str | None:
    """Why the transformed einsum *knl* is refused for its size (None: it is not)."""
    n = unrolled_statements(knl)
    if n <= PART_CODE_LIMIT:
        return None
    return (f"its code is too large: {n:,} statements once loopy unrolls its loops "
            f"(at most {PART_CODE_LIMIT:,})")


@dataclass(frozen=True)
class Size:
    """A program's size as the hook counts it."""

    statements: int
    unrolled: int
    barriers: int

    def as_dict(self) -> dict[str, int]:
        return {"statements": self.statements, "unrolled": self.unrolled,
                "barriers": self.barriers}


def program_size(t_unit: Any, names: Iterable[str]) -> Size:
    """The size of the kernels *names* of *t_unit*: statements, statements once unrolled,
    global barriers (each one more device kernel)."""
    from loopy.kernel.instruction import BarrierInstruction

    statements = unrolled = barriers = 0
    for name in names:
        knl = t_unit[name]
        statements += len(knl.instructions)
        unrolled += unrolled_statements(knl)
        barriers += sum(isinstance(i, BarrierInstruction) and i.synchronization_kind
                        == "global" for i in knl.instructions)
    return Size(statements, unrolled, barriers)


def code_budget(before: Size, einsums: int) -> int:
    """The statements (after unrolling) a transformed program of *einsums* transformed
    einsums may have."""
    return (CODE_FACTOR * before.unrolled + CODE_PER_EINSUM * einsums
            + (ONE_LARGE_EINSUM if einsums else 0))


def time_budget(before: Size) -> float:
    """The seconds the hook may spend transforming a program of size *before*."""
    return SECONDS_BASE + SECONDS_PER_STATEMENT * before.statements


def untransformed_seconds(t_unit: Any, cpu: bool) -> float | None:
    """A rough time of one call of *t_unit* untransformed (:func:`loop_iterations` at
    :data:`UNTRANSFORMED_RATE`); None when its loop lengths are not known constants."""
    iterations = loop_iterations(t_unit)
    if iterations is None:
        return None
    return iterations / UNTRANSFORMED_RATE["CPU" if cpu else "other"]


def loop_iterations(t_unit: Any) -> int | None:
    """How many times the statements of *t_unit*'s kernels run, with each reduction's
    terms (nested ones multiplied out): what running it untransformed costs on one
    work-item. None when a loop's length is not a known constant."""
    from loopy.kernel.function_interface import CallableKernel
    from loopy.kernel.instruction import MultiAssignmentBase

    total = 0
    for clbl in t_unit.callables_table.values():
        if not isinstance(clbl, CallableKernel):
            continue
        knl = clbl.subkernel
        terms = _ReductionTerms(knl)
        try:
            for insn in knl.instructions:
                inner = terms(insn.expression) if isinstance(insn, MultiAssignmentBase) else 0
                total += terms.length(insn.within_inames) * (1 + inner)
        except _UnknownLength:
            return None
    return total


class _UnknownLength(Exception):
    pass


class _ReductionTerms(CombineMapper[int, []]):
    """The terms the reductions of an expression evaluate."""

    def __init__(self, knl: Any) -> None:
        super().__init__()
        self.knl = knl
        self.lengths: dict[str, int] = {}

    def combine(self, values: Iterable[int]) -> int:
        return sum(values)

    def map_constant(self, expr: Any) -> int:
        return 0

    map_variable = map_function_symbol = map_nan = map_constant

    def map_reduction(self, expr: Any) -> int:
        return self.length(expr.inames) * (1 + self.rec(expr.expr))

    def length(self, inames: Iterable[str]) -> int:
        n = 1
        for iname in inames:
            if iname not in self.lengths:
                self.lengths[iname] = _constant_length(self.knl, iname)
            n *= self.lengths[iname]
        return n


def _constant_length(knl: Any, iname: str) -> int:
    import islpy as isl
    from loopy.isl_helpers import static_max_of_pw_aff

    try:
        size = static_max_of_pw_aff(knl.get_iname_bounds(iname, constants_only=True).size,
                                    constants_only=True)
        if isinstance(size, isl.PwAff):
            size = size.as_aff()
        return max(0, int(size.get_constant_val().to_python()))
    except Exception as exc:  # a length known only at run time
        raise _UnknownLength(iname) from exc
