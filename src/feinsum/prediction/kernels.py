"""A transformed kernel read for the performance model, at given lengths.

For each device kernel loopy generates (one ``CallKernel`` of the linearization): its launch
(work-groups, work-group shape), local memory, an estimate of its registers and stack, its
barriers and rolled loops, and for each statement: how often warps execute it (loopy's
``count_insn_runs`` over the statement's loop domain, the warps of a work-group that hold an
active work-item), what each execution costs in memory (:mod:`feinsum.prediction.accesses`)
and in arithmetic (:mod:`feinsum.prediction.ops`). Nothing runs; loopy's code generator
and ISL's counting are all it needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from feinsum.errors import PredictionError
from feinsum.lowering.reduction_updates import OnNewMinimum
from feinsum.prediction.accesses import (
    Access,
    SubscriptCollector,
    lane_spans,
    warp_access,
    whole_vector,
)
from feinsum.prediction.guards import guarded
from feinsum.prediction.hardware import Hardware
from feinsum.prediction.kernel_stats import DeviceKernel, KernelStats, Statement
from feinsum.prediction.ops import OpCounter, Ops
from feinsum.prediction.reuse import placed_arithmetic
from feinsum.prediction.traffic import dram_bytes
from feinsum.toolbox.cvec import ACCESS

#: warp instructions of a copy of an unrolled loop that checks its domain (compare, branch)
CHECK_INSTRUCTIONS = 2.0
_FAST_MATH = ("-cl-fast-relaxed-math", "-cl-unsafe-math-optimizations")


def scheduled(t_unit: Any) -> Any:
    """*t_unit* preprocessed, typed and linearized (what loopy generates code from)."""
    from feinsum.timing.fingerprint import scheduled as linearized

    return linearized(t_unit)


def prim_variable(name: str) -> Any:
    import pymbolic.primitives as prim

    return prim.Variable(name)


def _present(index: Any) -> Any:
    """*index* without the ``None`` of a whole vector's component (a C statement's
    offset is one expression)."""
    return tuple(i for i in index if i is not None) if isinstance(index, tuple) else index


def new_minimum_rate(chunks: float, lanes: int) -> float:
    """The fraction of its *chunks* in which a warp takes a lazy argmin's branch (one of
    its *lanes* rows finds a new minimum), for terms in random order: a row's chunk ``t``
    holds its new minimum with probability ``1/t`` (counted from the row's first chunk:
    an overestimate for a loop that starts later, as a peeled last tile)."""
    t = np.arange(1, max(1, round(chunks)) + 1, dtype=float)
    return float(np.mean(1.0 - (1.0 - 1.0 / t) ** lanes))


def _tags(knl: Any, iname: str) -> tuple[Any, ...]:
    return tuple(knl.inames[iname].tags) if iname in knl.inames else ()


class _Reader:
    def __init__(self, t_unit: Any, lengths: Mapping[str, int], hw: Hardware) -> None:
        from loopy.kernel.data import (
            GroupInameTag,
            IlpBaseTag,
            LocalInameTag,
            UnrollTag,
            VectorizeTag,
        )

        self.t = scheduled(t_unit)
        self.knl = self.t.default_entrypoint
        self.hw = hw
        missing = sorted(set(self.knl.all_params()) - set(lengths))
        if missing:
            raise PredictionError(f"the lengths of {', '.join(missing)} are needed to predict "
                                  "this kernel; pass lengths={...}")
        self.lengths = {k: int(v) for k, v in lengths.items()}
        self._counts: dict[frozenset[str], float] = {}
        self.local: dict[str, int] = {}
        self.group: dict[str, int] = {}
        self.unrolled: set[str] = set()
        self.vec: set[str] = set()
        for name in self.knl.inames:
            for tag in _tags(self.knl, name):
                if isinstance(tag, LocalInameTag):
                    self.local[name] = tag.axis
                elif isinstance(tag, GroupInameTag):
                    self.group[name] = tag.axis
                elif isinstance(tag, (UnrollTag, IlpBaseTag)):
                    self.unrolled.add(name)
                elif isinstance(tag, VectorizeTag):
                    self.vec.add(name)
        opts = self.knl.options.build_options or []
        self.fast_math = any(o in " ".join(map(str, opts)) for o in _FAST_MATH)
        self.notes: list[str] = []
        self.integers = frozenset(self.knl.all_inames()) | frozenset(
            name for name, v in [*self.knl.arg_dict.items(),
                                 *self.knl.temporary_variables.items()]
            if v.dtype is not None and np.dtype(v.dtype.numpy_dtype).kind in "iub")
        self.stack = self._stack_arrays()
        #: the device kernel being read: its private arrays whose registers exceed the
        #: work-item's, and the share of their accesses that go to the stack
        self.spilled: frozenset[str] = frozenset()
        self.spill_share = 0.0
        self.stores: dict[frozenset[str], set[str]] = {}
        for insn in self.knl.instructions:
            loop = frozenset(set(insn.within_inames) - set(self.local) - set(self.group)
                             - self.unrolled - self.vec)
            self.stores.setdefault(loop, set()).update(insn.assignee_var_names())

    def count(self, inames: frozenset[str]) -> float:
        """Points of the loop domain of *inames* at the lengths."""
        from loopy.statistics import count_inames_domain

        if inames not in self._counts:
            poly = count_inames_domain(self.knl, inames)
            self._counts[inames] = float(poly.eval_with_dict(self.lengths))
        return self._counts[inames]

    def evaluate(self, expr: Any) -> int:
        from pymbolic import evaluate

        return int(evaluate(expr, self.lengths))

    # {{{ private arrays: registers or stack

    def _stack_arrays(self) -> set[str]:
        """Private arrays some statement indexes with a loop the compiler does not unroll."""
        from loopy.kernel.data import AddressSpace
        from loopy.symbolic import get_dependencies

        private = {n for n, v in self.knl.temporary_variables.items()
                   if v.address_space == AddressSpace.PRIVATE and v.shape}
        rolled = set(self.knl.inames) - self.unrolled - self.vec - set(self.local) - set(
            self.group)
        out = set()
        for insn in self.knl.instructions:
            for name, idx in self._accessed(insn):
                if name in private and idx is not None and get_dependencies(idx) & rolled:
                    out.add(name)
        return out

    def _accessed(self, insn: Any) -> list[tuple[str, Any]]:
        """``(name, index)`` of everything *insn* reads or writes (index None: scalar)."""
        import loopy as lp

        col = SubscriptCollector()
        if isinstance(insn, lp.CInstruction):
            for _, e in insn.iname_exprs:
                col(e)
            return col.found + [(n, None) for n in insn.read_variables]
        if isinstance(insn, (lp.Assignment, lp.CallInstruction)):
            col(insn.expression)
            for a in insn.assignees:
                col(a)
        return col.found

    # }}}

    def kernels(self) -> KernelStats:
        from loopy.schedule import CallKernel, get_insn_ids_for_block_at

        lin = self.knl.linearization or []
        self.placed = placed_arithmetic(self.knl, self._counter)
        for unknown in sorted({n for ps in self.placed.values() for p in ps
                               for n in p.ops.unknown}):
            self.notes.append(f"function {unknown} counted as 2 fp instructions (not known "
                              "to the model)")
        out = []
        for i, item in enumerate(lin):
            if isinstance(item, CallKernel):
                ids = get_insn_ids_for_block_at(lin, i)
                gsize, lsize = self.knl.get_grid_sizes_for_insn_ids_as_exprs(
                    ids, self.t.callables_table)
                out.append(self._kernel(item.kernel_name, lin, i, ids,
                                        [self.evaluate(g) for g in gsize],
                                        [self.evaluate(s) for s in lsize]))
        return KernelStats(tuple(out), self._dram_bytes(), tuple(dict.fromkeys(self.notes)))

    def _kernel(self, name: str, lin: list[Any], start: int, ids: Any, gsize: list[int],
                lsize: list[int]) -> DeviceKernel:
        from loopy.codegen.control import get_required_predicates
        from loopy.schedule import (
            Barrier,
            EnterLoop,
            LeaveLoop,
            ReturnFromKernel,
            RunInstruction,
        )
        from loopy.symbolic import get_dependencies

        groups = max(1, math.prod(gsize))
        group_size = max(1, math.prod(lsize))
        warps = math.ceil(group_size / self.hw.subgroup)
        loops: list[str] = []
        barriers = iterations = checks = 0.0
        # the local arrays each rolled loop's body indexes by its index: one pointer each
        streams: dict[tuple[str, ...], set[str]] = {}
        entered, open_ids, checked = 0, [0], set[tuple[int, str]]()
        hoisted: list[frozenset[str]] = []  # the predicates loopy checks around each loop
        for at, item in enumerate(lin[start + 1:], start + 1):
            if isinstance(item, ReturnFromKernel):
                break
            if isinstance(item, EnterLoop):
                loops.append(item.iname)
                hoisted.append(frozenset(map(str, get_required_predicates(self.knl, at))))
                entered += 1
                open_ids.append(entered)
                runs = self.count(frozenset(loops)) * groups * warps
                if item.iname not in self.unrolled | self.vec:
                    iterations += runs
                    streams[tuple(loops)] = set()
                elif item.iname in self.unrolled and guarded(
                        self.knl, loops, set(self.local) | set(self.group)):
                    checks += runs * CHECK_INSTRUCTIONS
            elif isinstance(item, LeaveLoop):
                loops.pop()
                hoisted.pop()
                open_ids.pop()
            elif isinstance(item, Barrier) and item.synchronization_kind == "local":
                barriers += self.count(frozenset(loops)) if loops else 1.0
            elif isinstance(item, RunInstruction):
                insn = self.knl.id_to_insn[item.insn_id]
                self._streams(insn, loops, streams)
                for p in insn.predicates:  # one check per predicate and loop body, or
                    # outside the outermost loop all of whose statements share it (where
                    # the loops it reads are open)
                    reads = get_dependencies(p) & self.knl.all_inames()
                    level = next((k for k, h in enumerate(hoisted) if str(p) in h and reads
                                  <= {*loops[:k], *self.local, *self.group}), len(loops))
                    key = (open_ids[level + 1] if level < len(loops) else open_ids[-1], str(p))
                    if key not in checked:
                        checked.add(key)
                        checks += (self.count(frozenset(loops[:level])) if level else 1.0) * (
                            groups * warps) * (OpCounter(4, False)(p).instructions + 1)
        increments = sum(len(names) * self.count(frozenset(key)) * groups * warps
                         for key, names in streams.items())
        stmts: list[Statement] = []
        accesses: dict[Any, Access] = {}
        registers, stack, self.spilled, self.spill_share = self._registers(ids)
        for i in sorted(ids):
            found = self._statement(self.knl.id_to_insn[i], gsize, lsize)
            if found is not None:
                stmts.extend(found[0])
                for key, acc in found[1]:
                    accesses.setdefault(key, acc)
        return DeviceKernel(name, groups, group_size, self._local_bytes(ids), registers,
                            stack, tuple(stmts), tuple(accesses.values()), barriers,
                            iterations, checks, increments, self._dram_bytes(ids))

    def _streams(self, insn: Any, loops: list[str],
                 streams: dict[tuple[str, ...], set[str]]) -> None:
        """Adds the local and stack arrays *insn* indexes by its innermost rolled loop to
        that loop's pointers (the compiler advances one pointer per array; a global access
        counts its own address computation)."""
        from loopy.symbolic import get_dependencies

        rolled = [k for k in range(len(loops)) if loops[k] not in self.unrolled | self.vec]
        if not rolled:
            return
        key = tuple(loops[:rolled[-1] + 1])
        for name, idx in self._accessed(insn):
            if idx is not None and self._space(name)[0] in ("local", "stack") and (
                    loops[rolled[-1]] in get_dependencies(_present(idx))):
                streams[key].add(name)

    def _lanes(self, insn_local: dict[int, str], lsize: list[int]
               ) -> tuple[int, int, list[dict[str, int]]]:
        """(warps of a group with an active item, active items, the first such warp's active
        lanes as iname values)."""
        extent = {a: self.count(frozenset([n])) for a, n in insn_local.items()}
        sizes = lsize or [1]
        total = math.prod(sizes)
        active_warps: set[int] = set()
        first: list[dict[str, int]] = []
        items = 0
        for t in range(total):
            coords, rest = [], t
            for s in sizes:
                coords.append(rest % s)
                rest //= s
            if all(coords[a] < extent[a] for a in insn_local):
                items += 1
                w = t // self.hw.subgroup
                active_warps.add(w)
                if w == min(active_warps):
                    first.append({n: coords[a] for a, n in insn_local.items()})
        return len(active_warps), items, first

    def _statement(self, insn: Any, gsize: list[int], lsize: list[int]
                   ) -> tuple[list[Statement], list[tuple[Any, Access]]] | None:
        """The statement (and its arithmetic hoisted out of loops, as statements of their
        own), and its accesses keyed so that a load of the same address in the same loop
        body is one (writes are never merged)."""
        import loopy as lp
        from loopy.symbolic import get_dependencies

        if not isinstance(insn, (lp.Assignment, lp.CallInstruction, lp.CInstruction)):
            return None
        within = set(insn.within_inames)
        insn_local = {self.local[n]: n for n in within if n in self.local}
        insn_group = {n for n in within if n in self.group}
        unrolled = frozenset(within & self.unrolled)
        rolled = frozenset(within - set(insn_local.values()) - insn_group - unrolled
                           - self.vec)
        redundant = math.prod(g for a, g in enumerate(gsize)
                              if a not in {self.group[n] for n in insn_group})
        groups = max(1, math.prod(gsize))
        warps, items, lanes = self._lanes(insn_local, lsize)

        def runs(inames: frozenset[str]) -> float:
            return (self.count(inames) if inames else 1.0) * redundant

        group_runs = runs(rolled | insn_group | unrolled)
        loop_runs = runs(rolled | insn_group)
        rate = 1.0  # the share of a rarely taken branch's runs that run
        if any(isinstance(t, OnNewMinimum) for t in insn.tags):
            rate = new_minimum_rate(loop_runs / groups, self.hw.subgroup)
            group_runs, loop_runs = group_runs * rate, loop_runs * rate
        base = {**dict.fromkeys(self.knl.all_inames(), 0), **self.lengths}
        contexts = [{**base, **lane} for lane in lanes] or [base]
        written = set(insn.assignee_var_names())
        keyed: list[tuple[Any, Access]] = []
        for space, var, write, index, spans, cond in self._accesses(
                insn, contexts, frozenset(within & self.vec)):
            deps = frozenset(get_dependencies(_present(index)) & unrolled) if (
                index is not None) else unrolled
            n = runs(rolled | insn_group | deps) * rate
            if space == "spilled":  # a share of the accesses of arrays kept in registers
                space, n = "stack", n * self.spill_share
            acc = warp_access(space, var.name, write, spans, self.hw.line_bytes,
                              self.hw.banks, self.hw.bank_bytes)
            acc = replace(acc, runs=n * warps, serial=n / groups, loop=rolled,
                          conditional=cond)
            merge = not write and var.name not in written and var.name not in self.stores.get(
                rolled, set())
            key = (var.name, str(index), rolled, deps) if merge else (insn.id, len(keyed))
            keyed.append((key, acc))
        chain = bool(written & set(insn.read_dependency_names()))
        itemsize = self._itemsize(insn)
        loops = frozenset(within - set(insn_local.values()) - insn_group)
        placed = {p.loops: p.ops for p in self.placed.get(insn.id, [])}
        main = placed.pop(loops, Ops())
        out = [Statement(insn.id, group_runs * warps, group_runs * items, group_runs / groups,
                         rolled, loop_runs / groups, main.fp, main.flops, main.sfu,
                         main.other, itemsize, chain, self._copies(insn, unrolled))]
        for where, ops in placed.items():  # hoisted out of some of its loops
            seq = rolled & where
            n = runs(seq | insn_group | (unrolled & where))
            out.append(Statement(f"{insn.id}@{','.join(sorted(where))}", n * warps,
                                 n * items, n / groups, seq, runs(seq | insn_group) / groups,
                                 ops.fp, ops.flops, ops.sfu, ops.other, itemsize, False))
        return out, keyed

    def _copies(self, insn: Any, unrolled: frozenset[str]) -> float:
        """Independent copies of *insn* in one loop body: the points of its unrolled loops
        that index what it writes (copies that write the same place form a chain)."""
        from loopy.symbolic import get_dependencies

        written: set[str] = set()
        for a in insn.assignees:
            written |= get_dependencies(a) & unrolled
        return self.count(frozenset(written)) if written else 1.0

    def _space(self, name: str) -> tuple[str | None, Any]:
        import loopy as lp
        from loopy.kernel.data import AddressSpace

        if name in self.knl.arg_dict:
            arg = self.knl.arg_dict[name]
            return ("global", arg) if isinstance(arg, lp.ArrayArg) else (None, None)
        tv = self.knl.temporary_variables.get(name)
        if tv is None:
            return None, None
        if tv.address_space == AddressSpace.LOCAL:
            return "local", tv
        if tv.address_space == AddressSpace.GLOBAL:
            return "global", tv
        if name in self.spilled:
            return "spilled", tv
        return ("stack", tv) if name in self.stack else (None, None)

    def _accesses(self, insn: Any, contexts: list[dict[str, int]], vec: frozenset[str]
                  ) -> list[tuple[str, Any, bool, Any, list[tuple[int, int]], bool]]:
        """``(space, variable, write, index, each lane's bytes, conditional)`` of every
        memory access (a read of a vector's component: of the whole vector,
        :func:`~feinsum.prediction.accesses.whole_vector`)."""
        import loopy as lp

        found = []
        if isinstance(insn, lp.CInstruction):
            exprs = dict(insn.iname_exprs)
            for kind, width, arr, off in ACCESS.findall(insn.code):
                space, var = self._space(arr)
                if space is not None:
                    offset = exprs.get(off, prim_variable(off))
                    found.append((space, var, kind == "vstore", offset, lane_spans(
                        var, (offset,), contexts, flat=True, width=int(width)), False))
            return found
        reads = SubscriptCollector(self._implied(insn))
        reads(insn.expression)
        writes = [(a.aggregate.name, a.index if isinstance(a.index, tuple) else (a.index,))
                  if hasattr(a, "aggregate") else (a.name, None) for a in insn.assignees]
        for i, ((name, idx), write) in enumerate([*((r, False) for r in reads.found),
                                                   *((w, True) for w in writes)]):
            space, var = self._space(name)
            if space is not None:
                whole = None if write else whole_vector(var, idx, self.unrolled)
                idx = idx if whole is None else whole
                found.append((space, var, write, idx, self._spans(var, idx, contexts, vec),
                              i in reads.conditional))
        return found

    def _implied(self, insn: Any) -> Callable[[Any], bool]:
        """Whether a condition holds everywhere in *insn*'s domain (an affine one only)."""
        import islpy as isl
        from loopy.symbolic import condition_to_set

        dom, assumptions = isl.align_two(self.knl.get_inames_domain(insn.within_inames),
                                         self.knl.assumptions)
        dom = dom & assumptions

        def implied(cond: Any) -> bool:
            try:
                holds = condition_to_set(dom.space, cond)
            except Exception:  # not an affine condition loopy can read
                return False
            return holds is not None and dom.is_subset(holds)

        return implied

    def _spans(self, var: Any, idx: Any, contexts: list[dict[str, int]],
               vec: frozenset[str]) -> list[tuple[int, int]]:
        """The lanes' bytes of ``var[idx]``; an index the model cannot evaluate counts as one
        line per lane (the worst case), named in the notes."""
        try:
            return lane_spans(var, idx, contexts, vec)
        except PredictionError as exc:
            self.notes.append(f"{exc}: counted as one cache line per lane")
            return [(i * self.hw.line_bytes, i * self.hw.line_bytes + 4)
                    for i in range(len(contexts))]

    def _float_dtypes(self, insn: Any) -> list[np.dtype[Any]]:
        dtypes = []
        for a in insn.assignees:
            name = a.aggregate.name if hasattr(a, "aggregate") else a.name
            var = self.knl.arg_dict.get(name) or self.knl.temporary_variables.get(name)
            if var is not None and var.dtype is not None:
                dtypes.append(np.dtype(var.dtype.numpy_dtype))
        return [d for d in dtypes if d.kind in "fc"]

    def _itemsize(self, insn: Any) -> int:
        import loopy as lp

        if isinstance(insn, lp.CInstruction):
            return 4
        floats = self._float_dtypes(insn)
        return floats[0].itemsize if floats else 4

    def _counter(self, insn: Any) -> tuple[OpCounter | None, bool]:
        """The arithmetic counter of *insn* (None: a C statement, no arithmetic counted)
        and whether its result is a float."""
        import loopy as lp

        if not isinstance(insn, (lp.Assignment, lp.CallInstruction)):
            return None, False
        floats = self._float_dtypes(insn)
        return OpCounter(self._itemsize(insn), self.fast_math, self.integers), bool(floats)

    def _registers(self, ids: Any) -> tuple[int, int, frozenset[str], float]:
        """Of the device kernel of *ids*: registers per work-item (an estimate: the base
        and the private arrays kept in registers, at most the work-item's), stack bytes
        (private arrays indexed by rolled loops, and the excess of the registers), and,
        where the registers exceed the work-item's, the private arrays kept in registers
        and the share of their accesses the excess sends to the stack (every array alike:
        each read a load, each write a store)."""
        from loopy.kernel.data import AddressSpace

        used = set()
        for i in ids:
            used |= {n for n, _ in self._accessed(self.knl.id_to_insn[i])}
        regs, stack, arrays = self.hw.base_registers, 0, {}
        for name in used:
            tv = self.knl.temporary_variables.get(name)
            if tv is None or tv.address_space != AddressSpace.PRIVATE:
                continue
            nbytes = np.dtype(tv.dtype.numpy_dtype).itemsize * math.prod(
                self.evaluate(s) for s in (tv.shape or ()))
            if name in self.stack:
                stack += nbytes
            else:
                regs += math.ceil(nbytes / 4)
                if tv.shape:
                    arrays[name] = math.ceil(nbytes / 4)
        excess = regs - self.hw.max_registers_per_item
        if excess <= 0:
            return regs, stack, frozenset(), 0.0
        self.notes.append(f"about {regs} registers per work-item estimated: the excess "
                          "spills to the stack")
        share = min(1.0, excess / sum(arrays.values())) if arrays else 0.0
        return (self.hw.max_registers_per_item, stack + 4 * excess,
                frozenset(arrays), share)

    def _local_bytes(self, ids: Any) -> int:
        from loopy.kernel.data import AddressSpace

        used = set()
        for i in ids:
            used |= {n for n, _ in self._accessed(self.knl.id_to_insn[i])}
        total = 0
        for name in used:
            tv = self.knl.temporary_variables.get(name)
            if tv is not None and tv.address_space == AddressSpace.LOCAL:
                total += np.dtype(tv.dtype.numpy_dtype).itemsize * math.prod(
                    self.evaluate(s) for s in (tv.shape or ()))
        return total

    def _dram_bytes(self, ids: Any = None) -> float:
        """Every global array the statements *ids* (default: all) read, and every one they
        write, once: with *ids*, only the slices they touch
        (:func:`~feinsum.prediction.traffic.dram_bytes`)."""
        return dram_bytes(self.knl.instructions, self._accessed, self._global_array, ids)

    def _global_array(self, name: str) -> tuple[list[int], int] | None:
        """The shape and itemsize of global array *name* (None: not one)."""
        space, var = self._space(name)
        if space != "global" or var.shape is None:
            return None
        return ([self.evaluate(n) for n in var.shape],
                np.dtype(var.dtype.numpy_dtype).itemsize)


def read_kernel(t_unit: Any, lengths: Mapping[str, int], hw: Hardware) -> KernelStats:
    """What the performance model needs of *t_unit* at *lengths* on *hw* (loopy's
    warnings about its counting, e.g. "Barvinok wrappers are not installed": counts of
    guarded domains are upper bounds, are silenced)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _Reader(t_unit, lengths, hw).kernels()
