"""What a compiler computes once: common subexpressions and loop invariants.

:class:`~feinsum.prediction.ops.OpCounter` counts each distinct subexpression of one
statement once. Here the statements are read in the order of the linearization, and each
subexpression (a :class:`~feinsum.prediction.ops.Node`) costs its instructions where an
optimizing compiler (NVIDIA's, LLVM's) leaves it:

* **out of the loops it does not vary in** (loop-invariant code motion): innermost first,
  out of every enclosing loop whose index it does not depend on and inside which nothing it
  reads is written. An unrolled loop is a loop here too: its copies share what does not
  depend on its index;
* **once per loop body** (common-subexpression elimination across statements): computed
  before at the same place (the same loops, the same predicates), with nothing it reads
  written since, it is reused.

A statement's subexpressions are those of its value and those of its array indices that
cost instructions of their own (:mod:`feinsum.prediction.indexing`).

:func:`placed_arithmetic` gives each statement's instructions per place: the loops they
still run in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from feinsum.prediction.accesses import SubscriptCollector
from feinsum.prediction.indexing import index_nodes
from feinsum.prediction.ops import Node, OpCounter, Ops


@dataclass(frozen=True)
class Placed:
    """A statement's instructions that run in the sequential loops *loops* (those of the
    statement, or fewer when hoisted), per execution there."""

    loops: frozenset[str]
    ops: Ops


#: what the counting needs of a statement: its counter (None: no arithmetic) and whether
#: its result is a float (an integer statement's instructions are integer instructions)
CounterFor = Callable[[Any], tuple[OpCounter | None, bool]]


def _loop_writes(knl: Any) -> dict[int, set[str]]:
    """The variables written inside each loop (keyed by its ``EnterLoop``'s position)."""
    from loopy.schedule import EnterLoop, LeaveLoop, RunInstruction

    stack: list[int] = []
    writes: dict[int, set[str]] = {}
    for i, item in enumerate(knl.linearization or []):
        if isinstance(item, EnterLoop):
            stack.append(i)
            writes[i] = set()
        elif isinstance(item, LeaveLoop):
            stack.pop()
        elif isinstance(item, RunInstruction):
            names = knl.id_to_insn[item.insn_id].assignee_var_names()
            for s in stack:
                writes[s].update(names)
    return writes


def placed_arithmetic(knl: Any, counter_for: CounterFor) -> dict[str, list[Placed]]:
    """Each statement's instructions (of a linearized kernel *knl*), by the loops they run
    in, each subexpression counted where the compiler computes it and only once."""
    from loopy.kernel.data import AddressSpace
    from loopy.schedule import CallKernel, EnterLoop, LeaveLoop, RunInstruction

    writes = _loop_writes(knl)
    unrolled = _unrolled(knl)
    private = frozenset(n for n, v in knl.temporary_variables.items()
                        if v.address_space == AddressSpace.PRIVATE)
    stack: list[tuple[str, int]] = []
    cache: dict[Any, frozenset[str]] = {}
    out: dict[str, list[Placed]] = {}
    for i, item in enumerate(knl.linearization or []):
        if isinstance(item, EnterLoop):
            stack.append((item.iname, i))
        elif isinstance(item, LeaveLoop):
            stack.pop()
        elif isinstance(item, CallKernel):
            cache.clear()
        elif isinstance(item, RunInstruction):
            insn = knl.id_to_insn[item.insn_id]
            counter, is_float = counter_for(insn)
            if counter is None:
                continue
            predicates = frozenset(map(str, insn.predicates))
            levels: dict[tuple[tuple[str, int], ...], Ops] = {}
            nodes = [*((n, False) for n in counter.nodes(insn.expression)),
                     *((n, True) for n in _index_nodes(insn, private, unrolled))]
            for node, index in nodes:
                k, copies = len(stack), tuple[tuple[str, int], ...]()
                while k > 0 and not (stack[k - 1][0] in node.depends
                                     or writes[stack[k - 1][1]] & node.depends):
                    k -= 1
                if index:  # each copy of the unrolled loops it reads: out of rolled loops
                    copies = tuple(x for x in stack[:k]
                                   if x[0] in unrolled and x[0] in node.depends)
                    while k > 0 and (stack[k - 1][0] in unrolled or not (
                            stack[k - 1][0] in node.depends
                            or writes[stack[k - 1][1]] & node.depends)):
                        k -= 1
                    copies = tuple(x for x in copies if x not in stack[:k])
                key = (node.expr, tuple(stack[:k]) + copies, predicates)
                if key in cache:
                    continue
                cache[key] = node.depends
                levels.setdefault(key[1], Ops()).add(node.ops)
            out[insn.id] = [Placed(frozenset(n for n, _ in lv), _typed(ops, is_float))
                            for lv, ops in levels.items()]
            written = set(insn.assignee_var_names())
            for key in [k for k, deps in cache.items() if deps & written]:
                del cache[key]
    return out


def _index_nodes(insn: Any, private: frozenset[str], unrolled: frozenset[str]
                 ) -> list[Node]:
    """The subexpressions of the indices of the global and local arrays *insn* reads and
    writes that cost instructions of their own (a *private* array's index is a register's
    name: a constant; what depends on *unrolled* loop indices alone is folded)."""
    col = SubscriptCollector()
    col(insn.expression)
    for a in insn.assignees:
        col(a)
    return index_nodes((idx for name, idx in col.found
                        if idx is not None and name not in private), unrolled)


def _unrolled(knl: Any) -> frozenset[str]:
    """The loop indices whose loops the compiler unrolls (each copy's value a constant)."""
    from loopy.kernel.data import IlpBaseTag, UnrollTag, VectorizeTag

    return frozenset(n for n, v in knl.inames.items() if any(
        isinstance(t, (UnrollTag, IlpBaseTag, VectorizeTag)) for t in v.tags))


def _typed(ops: Ops, is_float: bool) -> Ops:
    if not is_float:
        ops.other += ops.fp
        ops.fp = ops.flops = 0.0
    return ops
