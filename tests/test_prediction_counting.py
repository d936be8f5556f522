"""What the performance model counts of small hand-written kernels: the instructions a
compiler keeps (a native built-in is one special-function instruction, a repeated
subexpression is computed once, a loop invariant once per outer iteration), vector loads,
loop guards, and how the bounds of one instruction stream combine."""

from __future__ import annotations

import warnings
from typing import Any

import loopy as lp
import numpy as np
import pymbolic.primitives as p
import pytest

from feinsum.lowering.reduction_updates import OnNewMinimum, register_math
from feinsum.prediction import hardware_for
from feinsum.prediction.kernel_stats import DeviceKernel, Statement
from feinsum.prediction.kernels import new_minimum_rate, read_kernel
from feinsum.prediction.model import kernel_seconds
from feinsum.prediction.ops import OpCounter

H200 = hardware_for("h200")


def _kernel(domains: Any, code: str, *args: Any, items: int = 32) -> lp.TranslationUnit:
    """*code* over ``i`` split into work-groups of *items* work-items."""
    t = lp.make_kernel(domains, code, [*args, lp.ValueArg("n,m", np.int32)],
                       target=lp.PyOpenCLTarget(), lang_version=(2018, 2))
    return lp.split_iname(t, "i", items, outer_tag="g.0", inner_tag="l.0")


def _read(t: lp.TranslationUnit, **lengths: int) -> DeviceKernel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (k,) = read_kernel(t, lengths, H200).kernels
    return k


def _fp(k: DeviceKernel, prefix: str = "") -> float:
    """fp warp instructions of the statements whose id starts with *prefix*."""
    return sum(s.warp_runs * s.fp for s in k.statements if s.id.startswith(prefix))


def _statement(k: DeviceKernel, sid: str) -> Statement:
    return next(s for s in k.statements if s.id == sid)


_FLOATS = lp.GlobalArg("a,b,c,d,e,f,g,h,s", np.float32, shape=lp.auto)


# {{{ one expression


def _ops(expr: Any, itemsize: int = 4, fast: bool = False) -> tuple[float, float]:
    o = OpCounter(itemsize, fast)(expr)
    return o.sfu, o.fp


@pytest.mark.parametrize(("name", "sfu", "fp"), [
    ("native_exp2", 1, 0), ("native_exp", 1, 1), ("native_log2", 1, 0), ("native_log", 1, 1),
    ("native_rsqrt", 1, 0), ("native_recip", 1, 0), ("half_exp2", 1, 0), ("half_exp", 1, 1),
    ("exp", 1, 8), ("expf", 1, 8), ("log", 1, 8), ("exp2", 1, 2)])
def test_native_builtins_are_one_special_function_instruction(name: str, sfu: int,
                                                              fp: int) -> None:
    """OpenCL's native built-ins are NVIDIA's MUFU instructions (``ex2.approx``,
    ``lg2.approx``...) and a scaling multiplication at most; the accurate functions are
    CUDA's library sequences (expf: one MUFU.EX2 in a range reduction)."""
    a = p.Variable("a")
    assert _ops(p.Call(p.Variable(name), (a,))) == (sfu, fp)


def test_fast_math_and_doubles_keep_their_sequences() -> None:
    exp = p.Call(p.Variable("exp"), (p.Variable("a"),))
    assert _ops(exp, fast=True) == (1, 1)
    assert _ops(exp, itemsize=8) == (0, 24)


def test_a_repeated_subexpression_is_counted_once() -> None:
    a, b, c, x, y = (p.Variable(n) for n in "abcxy")
    d = -1 * a + b  # b - a: a subtraction, its negation an operand modifier
    assert _ops(d) == (0, 1)
    assert _ops(d * d) == (0, 2)  # not 3: the difference is computed once
    assert _ops(d * d + (-1 * c + b) * (-1 * c + b)) == (0, 4)  # 2 subs, a mul, an FMA
    e = p.Call(p.Variable("native_exp2"), (d * d,))
    assert _ops(e * x + e * y) == (1, 4)  # one ex2 for both uses
    assert _ops(-1 * x * y) == (0, 1)  # the factor -1 is no multiplication
    assert _ops(p.Call(p.Variable("fabs"), (x,)) * y) == (0, 1)  # |x| is a modifier
    assert _ops(2 * 3 * x) == (0, 1)  # constants folded
    # a*b*c is (a*b)*c: a*b computed once for both products
    assert _ops(p.Product((a, b, x)) + p.Product((a, b, y))) == (0, 3)
    assert _ops(c + p.Product((a, b, x))) == (0, 2)  # a*b, then an FMA


def test_selects_and_logic() -> None:
    x, y = p.Variable("x"), p.Variable("y")
    lt = p.Comparison(x, "<", y)
    nan = p.Comparison(x, "!=", x)
    # a comparison each, one select; the negation free, the && one predicate operation
    assert OpCounter(4, False)(p.If(lt, x, y)).instructions == 2
    both = p.If(p.LogicalAnd((p.LogicalNot(lt), nan)), x, y)
    assert OpCounter(4, False)(both).instructions == 4


# }}}


# {{{ statements of a kernel


def test_a_native_exp2_statement_is_one_sfu_instruction() -> None:
    t = register_math(_kernel("{[i]: 0 <= i < n}", "e[i] = native_exp2(a[i]) {id=ex}",
                              _FLOATS), "native_exp2")
    s = _statement(_read(t, n=64, m=1), "ex")
    assert (s.sfu, s.fp) == (1, 0) and s.warp_runs == 2


def test_subexpressions_shared_by_statements_are_computed_once() -> None:
    t = _kernel("{[i]: 0 <= i < n}", """
        g[i] = (a[i] - c[i]) * (a[i] - c[i]) {id=sq}
        h[i] = 2 * (a[i] - c[i]) {id=twice}
        """, _FLOATS)
    k = _read(t, n=64, m=1)
    assert _fp(k) == 2 * 3  # one subtraction and two multiplications, by 2 warps
    # an operand written in between: the subexpression is computed again
    t = _kernel("{[i]: 0 <= i < n}", """
        <> x = a[i] {id=first}
        g[i] = (x - c[i]) * (x - c[i]) {id=sq, dep=first}
        x = b[i] {id=write, dep=sq}
        h[i] = 2 * (x - c[i]) {id=twice, dep=write}
        """, _FLOATS)
    assert _fp(_read(t, n=64, m=1)) == 2 * 4


def test_loop_invariants_are_hoisted() -> None:
    """``c[i] * d[i]`` does not vary with ``j``: once per work-item, not once per ``j``;
    the product with ``b[j]`` (an FMA into the accumulator) once per ``j``."""
    t = _kernel("{[i, j]: 0 <= i < n and 0 <= j < m}",
                "s[i] = sum(j, b[j] * (c[i] * d[i])) {id=red}", _FLOATS)
    k = _read(t, n=64, m=10)
    assert _fp(k) == 2 * (10 * 1 + 1)
    hoisted = [s for s in k.statements if "@" in s.id]
    assert len(hoisted) == 1 and hoisted[0].loop == frozenset() and hoisted[0].fp == 1
    # varying with j: nothing is hoisted
    t = _kernel("{[i, j]: 0 <= i < n and 0 <= j < m}",
                "s[i] = sum(j, (b[j] * c[i]) * d[i]) {id=red}", _FLOATS)
    assert _fp(_read(t, n=64, m=10)) == 2 * 10 * 2


def _packed() -> lp.TranslationUnit:
    """A local float4 per j-point, its 4 components read in a rolled j loop."""
    t = _kernel(["{[i]: 0 <= i < n}", "{[j, k]: 0 <= j < 32 and 0 <= k < 4}"], """
        p[i_inner, k] = a[i, k] {id=stage, dup=k}
        ... lbarrier {id=b, dep=stage}
        s[i] = sum(j, p[j, 0] * p[j, 1] + p[j, 2] * p[j, 3]) {id=red, dep=b}
        """, lp.GlobalArg("a", np.float32, shape=("n", 4)),
                lp.GlobalArg("s", np.float32, shape=("n",)),
                lp.TemporaryVariable("p", np.float32, shape=(32, 4),
                                     address_space=lp.AddressSpace.LOCAL, dim_tags="c,vec"))
    return lp.tag_inames(t, {"k_0": "unr"})


def test_the_components_of_a_vector_are_one_load() -> None:
    k = _read(_packed(), n=64, m=1)
    reads = [a for a in k.accesses if a.variable == "p" and not a.write]
    assert len(reads) == 1  # one ld.shared.v4, not four scalar loads
    (r,) = reads
    assert r.lane_bytes == 16 and r.wavefronts == 1 and r.runs == 2 * 32


def test_a_vector_read_by_an_unrolled_component_loop_is_one_load() -> None:
    """Both components of a local ``float2`` fetched by a loop over them (unrolled) into
    registers, as dg_nodes' ``pairs`` fetch: one vector load per pair, not one per
    component; rolled, the component loop is a load per component."""
    def pairs(tag: str) -> lp.TranslationUnit:
        t = _kernel(["{[i]: 0 <= i < n}", "{[j, v, w]: 0 <= j < 16 and 0 <= v, w < 2}"], """
            p[i_inner // 2, i_inner % 2] = a[i] {id=stage}
            ... lbarrier {id=b, dep=stage}
            for j
                for v
                    x[v] = p[j, v] {id=fetch, dep=b}
                end
                for w
                    s[i] = s[i] + x[w] {id=acc, dep=fetch}
                end
            end
            """, lp.GlobalArg("a,s", np.float32, shape=("n",)),
                    lp.TemporaryVariable("p", np.float32, shape=(16, 2),
                                         address_space=lp.AddressSpace.LOCAL,
                                         dim_tags="c,vec"),
                    lp.TemporaryVariable("x", np.float32, shape=(2,)))
        return lp.tag_inames(t, {"v": tag, "w": "unr"})

    for tag, loads in (("unr", 1), ("for", 2)):
        k = _read(pairs(tag), n=64, m=1)
        reads = [a for a in k.accesses if a.variable == "p" and not a.write]
        assert sum(a.runs for a in reads) == loads * 16 * 2, (tag, reads)
        assert all(a.lane_bytes == (8 if loads == 1 else 4) for a in reads), (tag, reads)


# }}}


# {{{ loop control


def test_unrolled_copies_that_check_their_domain_pay_for_the_check() -> None:
    t = _kernel("{[i, j]: 0 <= i < n and 0 <= j < m}", "s[i] = sum(j, b[j]) {id=red}",
                _FLOATS)
    t = lp.split_iname(t, "j", 8, inner_tag="unr")  # copies up to min(7, m - 1 - 8 j_outer)
    t = lp.prioritize_loops(t, "j_outer,j_inner")
    k = _read(t, n=64, m=100)
    assert k.check_instructions == 2 * 13 * 8 * 2  # warps x j_outer x copies x (cmp, bra)
    assert k.loop_iterations == 2 * 13  # the rolled j_outer only
    assert k.pointer_increments == 0  # b is global: its addresses count per access
    exact = _read(lp.assume(t, "m mod 8 = 0 and m >= 8"), n=64, m=96)
    assert exact.check_instructions == 0
    # a rolled loop's bounds are exact (a minimum becomes a ?: in the bound): no check
    rolled = _read(lp.split_iname(_kernel("{[i, j]: 0 <= i < n and 0 <= j < m}",
                                          "s[i] = sum(j, b[j]) {id=red}", _FLOATS), "j", 8),
                   n=64, m=100)
    assert rolled.check_instructions == 0


def test_a_predicate_is_checked_once_per_loop_body() -> None:
    t = _kernel("{[i]: 0 <= i < n}", """
        g[i] = a[i] {id=one, if=i < m}
        h[i] = b[i] {id=two, if=i < m}
        """, _FLOATS)
    # i = i_inner + 32 i_outer: per warp the index, the comparison, the branch
    assert _read(t, n=64, m=40).check_instructions == 2 * 3


def _search(tagged: bool, predicate: str = "hit") -> lp.TranslationUnit:
    """A lazy argmin's shape: per j a flag, then an unrolled loop all under it."""
    t = _kernel("{[i, j, u]: 0 <= i < n and 0 <= j < m and 0 <= u < 4}", f"""
        for j
            <> hit = a[j] < b[i] {{id=hit}}
            for u
                g[i] = g[i] + c[4*j + u] {{id=one, if={predicate}, dep=hit}}
            end
        end
        """, _FLOATS)
    t = lp.tag_inames(t, "u:unr")
    return lp.tag_instructions(t, OnNewMinimum(), "id:one") if tagged else t


def test_a_predicate_all_of_a_loop_shares_is_checked_around_it() -> None:
    # loopy writes if (hit) { 4 copies }: per warp and j one branch, not one per copy
    assert _read(_search(False), n=64, m=10).check_instructions == 2 * 10 * 1
    # one that reads the unrolled index is checked in every copy (the comparison, the branch)
    assert _read(_search(False, "u < 3"), n=64, m=10).check_instructions == 2 * 10 * 4 * 2


def test_a_search_for_a_new_minimum_counts_at_its_rate() -> None:
    plain, rare = (_statement(_read(_search(t), n=64, m=1000), "one") for t in (False, True))
    rate = new_minimum_rate(1000, H200.subgroup)
    assert rare.warp_runs == pytest.approx(plain.warp_runs * rate)
    assert rare.loop_serial == pytest.approx(plain.loop_serial * rate)
    assert new_minimum_rate(1, 32) == 1.0 and new_minimum_rate(6250, 32) < 0.035
    assert new_minimum_rate(1000, 1) == pytest.approx(sum(1 / t for t in range(1, 1001)) / 1000)
    assert new_minimum_rate(100, 32) > new_minimum_rate(1000, 32) > new_minimum_rate(1000, 8)


def test_the_rate_is_how_often_warps_of_random_points_find_a_new_minimum() -> None:
    """Squared distances of 4096 random rows to 2048 random points in chunks of 16: the
    share of (warp, chunk) pairs where one of the warp's 32 rows finds a new minimum."""
    rng = np.random.default_rng(1)
    x, y = rng.random((4096, 3), dtype=np.float32), rng.random((2048, 3), dtype=np.float32)
    chunk_min = (((x[:, None, :] - y[None]) ** 2).sum(-1)).reshape(4096, 128, 16).min(2)
    before = np.minimum.accumulate(chunk_min, axis=1)[:, :-1]
    new = np.concatenate([np.ones((4096, 1), bool), chunk_min[:, 1:] < before], axis=1)
    taken = new.reshape(128, 32, 128).any(axis=1).mean()
    assert taken == pytest.approx(new_minimum_rate(128, 32), rel=0.05)
    assert new.mean() == pytest.approx(new_minimum_rate(128, 1), rel=0.05)


def test_local_arrays_advanced_by_a_loop_cost_a_pointer_increment() -> None:
    k = _read(_packed(), n=64, m=1)
    assert k.pointer_increments == 2 * 32  # one pointer (p) per j iteration and warp


# }}}


def test_the_bounds_of_one_instruction_stream_do_not_add() -> None:
    """fp and special-function instructions are issued instructions: a kernel bound by
    the schedulers is not slowed by its fp pipe nor by a warp path shorter than its
    stream; the L1 service lies on the warps' path; DRAM adds what the compute side does
    not hide."""
    comp = {"issue": 1.0, "fp": 0.9, "sfu": 0.8, "lsu": 0.2, "latency": 0.1, "dram": 0.0}
    t, limit = kernel_seconds(comp, H200)
    assert limit == "issue" and t == pytest.approx(1.0)
    t, limit = kernel_seconds({**comp, "lsu": 1.5}, H200)
    assert limit == "lsu" and t == pytest.approx(1.6)
    t, limit = kernel_seconds({**comp, "latency": 0.9}, H200)
    assert limit == "latency" and t == pytest.approx(1.1)
    t, limit = kernel_seconds({**comp, "dram": 0.5}, H200)
    assert limit == "issue" and t == pytest.approx(1.0 + (1 - H200.dram_overlap) * 0.5)
    t, limit = kernel_seconds({**comp, "dram": 3.0}, H200)
    assert limit == "dram" and t == pytest.approx(3.0 + (1 - H200.dram_overlap) * 1.0)


def _accumulators(values: int) -> lp.TranslationUnit:
    """*values* float accumulators per work-item, in a private array every loop over which
    is unrolled (kept in registers while they hold it)."""
    from loopy.kernel.data import AddressSpace

    t = lp.make_kernel(
        ["{[i]: 0 <= i < n}", f"{{[k, k2]: 0 <= k, k2 < {values}}}", "{[j]: 0 <= j < m}"],
        """
        acc[k] = 0 {id=init}
        acc[k2] = acc[k2] + a[j] {id=upd, dep=init}
        out[i, k] = acc[k] {id=store, dep=upd, dup=k}
        """,
        [lp.GlobalArg("a", np.float32, shape=("m",)),
         lp.GlobalArg("out", np.float32, shape=("n", values)),
         lp.TemporaryVariable("acc", np.float32, shape=(values,),
                              address_space=AddressSpace.PRIVATE),
         lp.ValueArg("n,m", np.int32)],
        target=lp.PyOpenCLTarget(), lang_version=(2018, 2))
    t = lp.split_iname(t, "i", 32, outer_tag="g.0", inner_tag="l.0")
    return lp.tag_inames(t, {n: "unr" for n in t.default_entrypoint.all_inames()
                             if n.startswith("k")})


def test_registers_beyond_the_work_items_spill_a_share_of_the_accesses() -> None:
    """512 accumulators and the base need 536 registers of a work-item's 255: the excess,
    281 of the array's 512, sends that share of its reads and writes to the stack (a load
    or a store each); 64 accumulators stay in registers and cost no access."""
    fits = _read(_accumulators(64), n=64, m=10)
    assert fits.registers == H200.base_registers + 64 and fits.stack_bytes == 0
    assert all(a.variable != "acc" for a in fits.accesses)
    spills = _read(_accumulators(512), n=64, m=10)
    assert spills.registers == H200.max_registers_per_item
    share = (H200.base_registers + 512 - H200.max_registers_per_item) / 512
    acc = [a for a in spills.accesses if a.variable == "acc"]
    assert {a.space for a in acc} == {"stack"}
    # per warp (2 of 64 rows): the first write and the store's read once, the update's
    # read and write per j
    update = 2 * 10 * 512 * share
    assert sorted(a.runs for a in acc) == pytest.approx(
        sorted([2 * 512 * share, 2 * 512 * share, update, update]))


def test_independent_unrolled_copies_issue_back_to_back() -> None:
    """An unrolled statement whose copies write other places (a register tile's
    accumulators) has that many independent copies: a warp alone issues them one per
    cycle of their pipe, not one per dependent-issue interval; an unrolled sum into one
    place is a chain of one."""
    from feinsum.prediction.model import warp_instructions

    k = _read(_accumulators(64), n=64, m=10)
    update = _statement(k, "upd")
    assert update.ilp == 64 and update.chain
    t = lp.make_kernel(
        ["{[i]: 0 <= i < n}", "{[j]: 0 <= j < 16}"],
        """
        s = 0 {id=init}
        s = s + a[i, j] {id=upd, dep=init}
        out[i] = s {dep=upd}
        """,
        [lp.GlobalArg("a", np.float32, shape=("n", 16)),
         lp.GlobalArg("out", np.float32, shape=("n",)),
         lp.TemporaryVariable("s", np.float32), lp.ValueArg("n", np.int32)],
        target=lp.PyOpenCLTarget(), lang_version=(2018, 2))
    t = lp.tag_inames(lp.split_iname(t, "i", 32, outer_tag="g.0", inner_tag="l.0"),
                      {"j": "unr"})
    assert _statement(_read(t, n=64), "upd").ilp == 1
    # the 64 updates count as 16 dependent issues (4 cycles each, one per cycle)
    fp = update.serial_runs * update.fp
    assert (warp_instructions(k, H200) - warp_instructions(k, H200, ilp=H200.issue_cycles)
            == pytest.approx(fp * (1 - 1 / H200.issue_cycles)))
