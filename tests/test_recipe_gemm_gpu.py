"""The gemm_gpu recipe (feinsum.toolbox.gemm): the GEMM view of contractions (fused index
groups), random valid configurations for GPU models run on the CPU device against
feinsum.evaluate (float32 and float64, lengths that are multiples of no tile), the
structure of the generated code (no guard in the unrolled FMA body, vector local loads,
one barrier per K tile when double-buffered, split-K as two kernels), the defaults and
the constraints."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest

import feinsum as fs
from feinsum.devices.models import get_model
from feinsum.errors import InvalidConfigurationError
from feinsum.spec.canonical import canonical_lengths, canonicalize

TRANSFORMS = Path(__file__).resolve().parents[1] / "transforms"


@functools.cache
def recipe():  # type: ignore[no-untyped-def]
    from feinsum.recipes import load_recipe_file

    return load_recipe_file(TRANSFORMS / "gemm_gpu.py")


def specs(dt: str) -> dict[str, fs.BatchedEinsum]:
    a = fs.array
    return {
        "gemm": fs.einsum("ik,kj->ij", a("A", ("M", "K"), dt), a("B", ("K", "N"), dt)),
        "gemm_f": fs.einsum("ik,kj->ij", a("A", ("M", "K"), dt, order="F"),
                            a("B", ("K", "N"), dt, order="F")),
        "ttm": fs.einsum("ijkl,mi->mjkl", a("T", (9, 5, 3, 7), dt), a("W", ("Q", 9), dt)),
        "ttm_long": fs.einsum("ijkl,mi->mjkl", a("T", (9, 5, 3, "L"), dt),
                              a("W", ("Q", 9), dt)),
        "two_index": fs.einsum("ijk,jkl->il", a("A", ("I", 6, 5), dt),
                               a("B", (6, 5, "L"), dt)),
        "crossed": fs.einsum("ijk,kjl->il", a("A", ("I", 6, 5), dt), a("B", (5, 6, "L"), dt)),
        "batched": fs.einsum("bcij,bcjk->bcik", a("A", (3, 2, "I", "J"), dt),
                             a("B", (3, 2, "J", "K"), dt)),
        "rows": fs.einsum("abk,kc->abc", a("A", ("P", 7, "K"), dt), a("B", ("K", "N"), dt)),
        # scalar factors (pytato's 2 * (A @ B) is one einsum with a 0-d operand)
        "scaled": fs.einsum("ik,,kj,->ij", a("A", ("M", "K"), dt), a("s", (), dt),
                            a("B", ("K", "N"), dt), a("t", (), dt)),
        # a batch of rows: three fields times one operator (a DG operator on a GPU), and
        # two GEMMs with a batch index on g.2 and a second reduction index
        "fields": fs.batched_einsum("ij,ej->ei", [[a("D", (35, 35), dt),
                                                   a(f"u{k}", ("E", 35), dt)]
                                                  for k in range(3)]),
        "two_gemms": fs.batched_einsum("bijk,bkjl->bil", [
            [a(n, (2, "I", 3, "J"), dt), a("W", (2, "J", 3, "L"), dt)] for n in "AC"]),
        # operands that scale A's or B's entries: DG's face mass (u times the face
        # Jacobians, f a reduction loop around the K tiles), diagonal scalings
        "face_mass": fs.einsum("ifj,fe,fej->ei", a("L", (20, 4, 10), dt),
                               a("J", (4, "E"), dt), a("u", (4, "E", 10), dt)),
        "scaled_columns": fs.einsum("ik,k,kj,j->ij", a("A", ("M", "K"), dt),
                                    a("d", ("K",), dt), a("B", ("K", "N"), dt),
                                    a("c", ("N",), dt)),
        # reduction indices of one side only, summed as its entries are copied: DG's
        # divergence (sum_x J[x, r, e] u[x, e, j]; r loops around the K tiles), and a
        # sum over y of B's entries
        "divergence": fs.einsum("xre,rij,xej->ei", a("J", (3, 2, "E"), dt),
                                a("D", (2, 9, 10), dt), a("u", (3, "E", 10), dt)),
        "summed_b": fs.einsum("ej,yij->ei", a("u", ("E", 10), dt),
                              a("D", (2, 9, 10), dt)),
        # an operand that combines the sums as they are stored: DG's gradient (a register
        # tile for each r, out[x, e, i] = sum_r J[x, r, e] T[r] for each x)
        "gradient": fs.einsum("xre,rij,ej->xei", a("J", (3, 2, "E"), dt),
                              a("D", (2, 9, 10), dt), a("u", ("E", 10), dt)),
    }


def _roles(name: str):  # type: ignore[no-untyped-def]
    from feinsum.toolbox import gemm_view as gv

    e = canonicalize(specs("float32")[name])
    r = gv.roles(e)
    assert not isinstance(r, str), r
    # back to the spec's own index names, through the canonical renaming
    iso = fs.isomorphism(e, specs("float32")[name]).indices
    return {k: tuple(iso[i] for i in getattr(r, k)) for k in ("x", "y", "k", "rest", "red")}


def test_roles_fuse_the_contiguous_indices() -> None:
    from feinsum.toolbox import gemm_view as gv

    assert _roles("gemm") == {"x": ("j",), "y": ("i",), "k": ("k",), "rest": (), "red": ()}
    # out[m, jkl] = W[m, i] T[i, jkl]: a (Q x 105 x 9) GEMM
    assert _roles("ttm")["x"] == ("j", "k", "l")
    # a symbolic length can only lead a fused group: l alone, j and k batch the GEMM
    assert _roles("ttm_long") == {"x": ("l",), "y": ("m",), "k": ("i",), "rest": ("j", "k"),
                                  "red": ()}
    assert _roles("two_index")["k"] == ("j", "k")
    crossed = _roles("crossed")  # j, k adjacent in A but in the other order in B
    assert len(crossed["k"]) == 1 and len(crossed["red"]) == 1
    assert _roles("batched")["rest"] == ("b", "c")
    assert _roles("rows")["y"] == ("a", "b")
    # divergence: u is A (it holds the K index j), J its factor, x summed in u's copies
    assert _roles("divergence") == {"x": ("i",), "y": ("e",), "k": ("j",), "rest": (),
                                    "red": ("r",)}
    assert _sums("divergence") == (("x",), ())
    assert _sums("summed_b") == ((), ("y",))
    assert _sums("crossed") == ((), ())  # in both operands: a loop
    # gradient: u is A, D is B, J combines the sums over r into the outputs of each x
    assert _roles("gradient") == {"x": ("i",), "y": ("e",), "k": ("j",), "rest": (),
                                  "red": ()}
    e = canonicalize(specs("float32")["gradient"])
    r = gv.roles(e)
    assert not isinstance(r, str) and r.combine is not None and r.combine not in (r.a, r.b)
    iso = fs.isomorphism(e, specs("float32")["gradient"]).indices
    assert [iso[i] for i in r.carried] == ["r"] and [iso[i] for i in r.spread] == ["x"]


def _sums(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from feinsum.toolbox import gemm_view as gv

    e = canonicalize(specs("float32")[name])
    r = gv.roles(e)
    assert not isinstance(r, str), r
    iso = fs.isomorphism(e, specs("float32")[name]).indices
    return tuple(iso[i] for i in r.a_sums), tuple(iso[i] for i in r.b_sums)


def test_applies_to_two_operand_contractions_on_gpus(cl_device) -> None:  # type: ignore[no-untyped-def]
    r, h100 = recipe(), get_model("h100")
    for e in specs("float32").values():
        assert r.applies(canonicalize(e), h100) is None
    assert "GPU" in r.applies(canonicalize(specs("float32")["gemm"]), cl_device)
    a = fs.array
    shared = fs.einsum("ik,jk->k", a("A", (3, 5)), a("B", (6, 5)))
    assert "both operands" in r.applies(canonicalize(shared), h100)
    # a constant factor (pytato's 2 * (A @ B)) is a scalar operand too
    x = fs.array("x", ())
    doubled = fs.einsum("ik,kj,->ij", a("A", (5, 6)), a("B", (6, 7)),
                        fs.formula("two_x", (), "2 * x", [x]))
    assert r.applies(canonicalize(doubled), h100) is None
    three = fs.einsum("ij,jk,kl->il", a("A", (5, 6)), a("B", (6, 7)), a("C", (7, 8)))
    assert "two operands" in r.applies(canonicalize(three), h100)
    everywhere = fs.einsum("ij,ij,jk->ik", a("A", (5, 6)), a("B", (5, 6)), a("C", (6, 7)))
    assert r.applies(canonicalize(everywhere), h100) is None  # B scales A
    broadcast = fs.einsum("ik,jk,k->ijk", a("A", (5, 6)), a("B", (4, 6)), a("c", (6,)))
    assert "in all" in r.applies(canonicalize(broadcast), h100)
    rows = fs.batched_einsum("ik,kj->ij", [[a("A", (5, 6)), a("B", (6, 7))],
                                           [a("C", (5, 6)), a("D", (6, 7))]])
    assert r.applies(canonicalize(rows), h100) is None
    # rows in sequence, but not inside a loop over a second batch index
    looped = fs.batched_einsum("bcij,bcjk->bcik", [
        [a(n, (3, 2, "I", "J")), a("B", (3, 2, "J", "K"))] for n in "AC"])
    assert "several rows" in r.applies(canonicalize(looped), h100)
    # a third operand with output indices of both A and B
    both = fs.einsum("ik,kj,ij->ij", a("A", (5, 6)), a("B", (6, 7)), a("C", (5, 7)))
    assert "output indices of both" in r.applies(canonicalize(both), h100)
    # a combining operand keeps a register tile for each carried value: 4 at most
    wide = fs.einsum("xre,rij,ej->xei", a("J", (3, 5, 7)), a("D", (5, 5, 6)),
                     a("u", (7, 6)))
    assert "at most 4 register tiles" in r.applies(canonicalize(wide), h100)
    mixed = fs.batched_einsum("ik,kj->ij", [[a("A", (5, 6), "float32"),
                                             a("B", (6, 7), "float32")],
                                            [a("C", (5, 6)), a("D", (6, 7))]])
    assert "different dtypes" in r.applies(canonicalize(mixed), h100)


@pytest.mark.parametrize("dt, model", [("float32", "h100"), ("float64", "mi250x")])
def test_random_configurations_match_evaluate(dt, model, cl_queue):  # type: ignore[no-untyped-def]
    """Random valid configurations of work-groups up to 256 and unrolled bodies up to 256
    FMAs (the whole space: the slow sweep), round-robin over the specs."""
    import numpy as np

    from feinsum.recipes import Constraint
    from feinsum.recipes.testing import check_configuration, sample_lengths

    dev, rng = get_model(model), np.random.default_rng(31 if dt == "float32" else 32)
    small = Constraint("test_size", lambda p: p["lx"] * p["ly"] <= 256
                       and p["px"] * p["py"] * p["kt"] <= 256, "quick on PoCL")
    bad = []
    for name, spec in specs(dt).items():
        e = canonicalize(spec)
        (params,) = recipe().space(e, dev).constrain(small).sample(rng, n=1)
        err = check_configuration(recipe(), e, params, sample_lengths(e, rng), cl_queue,
                                  device=dev)
        if err:
            bad.append(f"{name} {params}: {err}")
    assert not bad, "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("model", ["h100", "mi250x", "max1550", "m2max"])
def test_sweep(dt, model, cl_queue):  # type: ignore[no-untyped-def]
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    dev = get_model(model)
    if not dev.has_fp64 and dt == "float64":
        pytest.skip(f"{model} has no float64")
    cases = check_random_configurations(recipe(), list(specs(dt).values()), cl_queue, n=40,
                                        seed=5, device=dev)
    assert_all_ok(cases)


@pytest.mark.parametrize("params", [
    {"split": 4, "double_buffer": False, "vw": 1, "px": 1, "kt": 4},
    {"split": 2, "double_buffer": True, "vw": 2, "px": 2, "py": 2, "kt": 2},
])
@pytest.mark.parametrize("name", ["gemm", "scaled"])
def test_split_k_with_slices_without_tiles(params, name, cl_queue) -> None:  # type: ignore[no-untyped-def]
    """More slices than K tiles at some lengths: the empty slices still store zeros (and
    scalar factors multiply the sum of the slices)."""
    from feinsum.recipes.testing import check_configuration

    h100, e = get_model("h100"), canonicalize(specs("float32")[name])
    cfg = {**recipe().default(e, h100), "lx": 4, "ly": 4, **params}
    lengths = [{s: n for s in e.length_symbols} for n in (1, 5, 37)]
    assert check_configuration(recipe(), e, cfg, lengths, cl_queue, device=h100) is None


def _code(name: str, model: str = "h100", **params) -> str:  # type: ignore[no-untyped-def]
    import loopy as lp

    from feinsum.lowering.kernel import generate_loopy

    e, dev = canonicalize(specs("float32")[name]), get_model(model)
    cfg = {**recipe().default(e, dev), **params}
    return str(lp.generate_code_v2(recipe().apply(generate_loopy(e), cfg, e, dev))
               .device_code())


def _k_loop(code: str) -> str:
    """The body of the K-tile loop (``for (int q ...) { ... }``)."""
    start = code.index("{", code.index("for (int q"))
    depth = 0
    for n, ch in enumerate(code[start:], start):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return code[start:n]
    raise AssertionError("unbalanced braces")


@pytest.mark.parametrize("name", ["gemm", "two_index"])
def test_full_tiles_have_no_guard(name: str) -> None:
    """Symbolic lengths, yet the K loop has no branch: copies read zeros outside the
    operands, so every FMA of the register tile runs unguarded; px*py FMAs per K step on
    (px + py) / vw vector local loads."""
    code = _code(name, lx=8, ly=8, px=4, py=4, vw=4, kt=8)
    body = _k_loop(code)
    assert "if (" not in body
    fmas = re.findall(r"acc\[\d+\] = acc\[\d+\] \+", body)
    frags = re.findall(r"\bf[ab]\[\d+\] = tile_[ab]\[", body)
    assert len(fmas) == 8 * 16 and len(frags) == 8 * 2
    assert "float4 fa[1]" in code
    # kt = 4: half the work-items copy a tile (a guard around the copy), none in the FMAs
    body = _k_loop(_code(name, lx=8, ly=8, px=4, py=4, vw=4, kt=4))
    assert "if (" in body
    depth = {len(line) - len(line.lstrip()) for line in body.splitlines()
             if re.search(r"acc\[\d+\] = acc", line)}
    assert depth == {4}, depth


def test_double_buffering_has_one_barrier_per_tile() -> None:
    one = _k_loop(_code("gemm", px=2, py=2, vw=2, kt=4, double_buffer=True))
    two = _k_loop(_code("gemm", px=2, py=2, vw=2, kt=4, double_buffer=False))
    assert one.count("barrier(") == 1 and two.count("barrier(") == 2


def test_rows_run_in_sequence_in_one_kernel(cl_queue) -> None:  # type: ignore[no-untyped-def]
    """A batch of three fields times one operator: one kernel, each row's K loop after the
    previous row's stores, the local tiles and accumulators reused (the rows take no more
    registers or local memory than one); every configuration matches evaluate."""
    from feinsum.recipes.testing import check_configuration

    code = _code("fields", double_buffer=False)
    assert code.count("__kernel") == 1
    loops = [code.index(f"for (int {q} = ") for q in ("q", "q_r1", "q_r2")]
    stores = [code.index(f"out{k}[") for k in range(3)]
    assert loops[0] < stores[0] < loops[1] < stores[1] < loops[2] < stores[2]
    # a barrier between a row's last reads of the tiles and the next row's first store
    for k in (1, 2):
        first = loops[k] + re.search(r"tile_[ab]\[[^;=]*\] = ", code[loops[k]:]).start()
        assert "barrier(" in code[stores[k - 1]:first]
    assert "acc_r1" not in code and code.count("__local") == 2
    h100, e = get_model("h100"), canonicalize(specs("float64")["fields"])
    for params in ({}, {"double_buffer": False, "vw": 1, "px": 2, "kt": 4},
                   {"lx": 4, "ly": 8, "px": 1, "py": 2, "vw": 1, "kt": 2}):
        cfg = {**recipe().default(e, h100), **params}
        assert check_configuration(recipe(), e, cfg, [{"n0": 1}, {"n0": 70}], cl_queue,
                                   device=h100) is None, params


def test_factors_scale_the_copies_of_their_operand() -> None:
    """The face mass's ``J[f, e]`` multiplies each entry of ``u`` as it is copied (inside
    the loop over ``f`` around the K tiles), never an FMA of the register tile."""
    from feinsum.toolbox import gemm_view as gv

    e = canonicalize(specs("float64")["face_mass"])
    r = gv.roles(e)
    assert not isinstance(r, str) and len(r.a_factors) == 1 and not r.b_factors
    code = _code("face_mass", double_buffer=False)
    copies = [line for line in code.splitlines() if re.search(r"\bra\[0\]\.s\d = a", line)]
    assert len(copies) == 4 and all(re.search(r"\] \* a\d\[", c) for c in copies), copies
    fmas = re.findall(r"acc\[\d+\] = acc\[\d+\] \+ [^;]*;", code)
    assert fmas and not any(re.search(r"\ba\d\[", f) for f in fmas)


def test_one_sides_reduction_is_summed_in_its_copies() -> None:
    """The divergence's ``x`` (in ``J`` and ``u`` only) is summed as ``u``'s entries are
    copied, three products a copied entry, unrolled; ``r`` (in ``D`` too) is a loop around
    the K tiles; the register tile's FMAs read the local tiles only."""
    code = _code("divergence", double_buffer=False, vw=1)
    copies = [line for line in code.splitlines() if re.search(r"\bra\[\d+\] = a", line)]
    assert copies and all(len(re.findall(r"\ba\d\[", line)) == 6 for line in copies), copies
    assert re.search(r"for \(int i\w* = 0; i\w* <= 1; \+\+i\w*\)", code), code
    fmas = re.findall(r"acc\[\d+\] = acc\[\d+\] \+ [^;]*;", code)
    assert fmas and not any(re.search(r"\ba\d\[", f) for f in fmas)


def test_a_combining_operand_keeps_a_tile_for_each_carried_value() -> None:
    """The gradient's ``J[x, r, e]`` combines the sums as they are stored: a register
    tile and a local ``B`` tile for each ``r`` (one FMA body over all three), and a store
    for each ``x`` summing ``J[x, r, e] acc[r]`` over ``r``; no split-K."""
    code = _code("gradient", double_buffer=False, vw=1, px=2, py=2)
    assert re.search(r"double acc\[2 \* 2 \* 2\]|float acc\[2 \* 2 \* 2\]", code), code
    stores = [line for line in code.splitlines() if re.search(r"\bout\w*\[.*\] = ", line)]
    assert len(stores) == 3 * 2 * 2, stores  # x, then the 2 x 2 register tile
    assert all(len(re.findall(r"\bacc\[", line)) == 2 for line in stores), stores
    r, h100 = recipe(), get_model("h100")
    e = canonicalize(specs("float32")["gradient"])
    with pytest.raises(InvalidConfigurationError, match="split_uncombined"):
        r.check({**r.default(e, h100), "split": 2}, e, h100)
    assert r.default(e, h100)["double_buffer"] is False


def test_rows_take_no_split() -> None:
    """split-K with several rows is refused (the default never asks for it)."""
    r, h100 = recipe(), get_model("h100")
    e = canonicalize(fs.batched_einsum("ik,kj->ij", [
        [fs.array(n, (64, 65536)), fs.array(m, (65536, 64))] for n, m in ("AB", "CD")]))
    assert r.default(e, h100)["split"] == 1
    with pytest.raises(InvalidConfigurationError, match="split_one_row"):
        r.check({**r.default(e, h100), "split": 2}, e, h100)


def test_split_k_sums_the_slices_in_a_second_kernel() -> None:
    code = _code("two_index", split=2, kt=2, px=2, py=2, vw=2)
    assert code.count("__kernel") == 2 and "slices" in code


@pytest.mark.parametrize("split", [1, 4])
def test_double_buffer_never_reads_past_a_fixed_k(split: int) -> None:
    """The double buffer's copy of the next K tile runs in the last round too, past K: its
    K index is clamped into the operand also where K is a multiple of the tiles (on the
    H200 of 2026-11-27 two_index's default, 4096 = 4 x 64 x 16, failed its launch with
    NVIDIA's -9999 from that read). loopy's own bounds check proves it for ttm; the fused
    two_index reduction (j, k = jk // 64, jk % 64) is beyond that check, so its copies
    are read for the clamp."""
    import loopy as lp

    from feinsum.lowering.kernel import generate_loopy
    from feinsum.tuning.workloads import workloads

    h200 = get_model("h200")
    for name, k in (("ttm", 64), ("two_index", 64 * 64)):
        e = canonicalize(workloads()[name].spec)
        cfg = {**recipe().default(e, h200), "double_buffer": True, "split": split}
        t_unit = recipe().apply(generate_loopy(e), cfg, e, h200)
        checked = lp.set_options(t_unit, enforce_array_accesses_within_bounds=True)
        code = str(lp.generate_code_v2(checked).device_code())
        ahead = [line for line in code.splitlines()
                 if re.search(r"= a[01]\[", line) and re.search(r"\bq\b", line)]
        assert ahead and all(re.search(rf"min\([^;]*, {k - 1}\)", line) for line in ahead), (
            name, [line for line in ahead if f", {k - 1})" not in line][:2])


def test_defaults_from_the_device() -> None:
    from feinsum.toolbox import gemm as tg
    from feinsum.toolbox import gemm_view as gv
    from feinsum.tuning.workloads import workloads

    r, h100 = recipe(), get_model("h100")
    ref = {n: canonicalize(w.spec) for n, w in workloads().items()}
    gemm = r.default(ref["gemm"], h100)
    assert (gemm["px"], gemm["py"], gemm["vw"], gemm["split"]) == (4, 4, 4, 1)
    assert gemm["lx"] * gemm["ly"] == 256 and gemm["double_buffer"]
    # 512 x 512 outputs (the guess for symbolic lengths) are 64 blocks: split the fixed
    # 4096-long reduction in 4 for 2 x 132 work-groups
    assert r.default(ref["two_index"], h100)["split"] == 4
    assert r.default(ref["ttm"], h100)["split"] == 1  # 4096 blocks already

    def tile(p: dict[str, Any]) -> tuple[int, ...]:
        return (p["lx"], p["ly"], p["px"], p["py"], p["vw"])

    # 8 x 8 tiles in 64 x 128 blocks where their groups take no more waves than 4 x 4's
    # (half the local loads per FMA): ttm's 2048 blocks, two_index's 32 blocks split in 4
    # (128 groups, one wave of the H100's 132 SMs) -- not on the MI300X's 304 CUs, where
    # 4 x 4 blocks split in 4 are one wave too; and not for a 512^2 output of its own
    big, small = (16, 8, 8, 8, 4), (16, 16, 4, 4, 4)
    assert tile(r.default(ref["ttm"], h100)) == big
    assert tile(r.default(ref["two_index"], h100)) == big
    assert tile(r.default(ref["gemm"], h100)) == small
    # given the lengths it will run at, a 1024^3 GEMM is 256 blocks of 64 x 64 (two waves
    # of 132 SMs): 8 x 8 tiles take 128 groups, one wave
    at = canonical_lengths(workloads()["gemm"].spec.with_lengths({"I": 1024, "J": 1024,
                                                                 "K": 1024}))
    assert tile(r.default(ref["gemm"], h100, at)) == big
    assert tile(r.default(ref["gemm"], h100, {})) == small
    # a 300 x 300 output is 25 blocks either way: the 4 x 4 tiles' shorter work-groups
    assert tile(r.default(ref["gemm"], h100, dict.fromkeys(at, 300))) == small
    mi300x = get_model("mi300x")
    assert tile(r.default(ref["ttm"], mi300x)) == big
    assert tile(r.default(ref["two_index"], mi300x)) == small
    # a device with 128 registers per work-item: 4 x 4 float64 tiles still fit
    f64 = canonicalize(specs("float64")["gemm"])
    low = get_model("max1550")
    t = r.default(f64, low)
    assert tg.value_registers(f64, gv.Tiling(**{k: t[k] for k in (
        "lx", "ly", "px", "py", "kt", "vw", "split", "double_buffer")})) <= (
        tg.register_budget(low))


def test_constraint_violations_are_rejected() -> None:
    r, h100 = recipe(), get_model("h100")
    e = canonicalize(specs("float32")["gemm"])
    base = r.default(e, h100)
    for bad, name in (({"vw": 4, "px": 2}, "vector_runs"),
                      ({"px": 8, "py": 8, "kt": 32}, "code_size"),
                      ({"lx": 64, "ly": 32}, "work_group_size")):
        with pytest.raises(InvalidConfigurationError, match=name):
            r.check({**base, **bad}, e, h100)
    f64 = canonicalize(specs("float64")["gemm"])
    with pytest.raises(InvalidConfigurationError, match="registers"):
        r.check({**r.default(f64, h100), "lx": 8, "ly": 8, "px": 8, "py": 8, "kt": 16},
                f64, h100)
    with pytest.raises(InvalidConfigurationError, match="local_memory"):
        r.check({**base, "lx": 32, "ly": 32, "px": 8, "py": 4, "kt": 32}, e, h100)
    batched = canonicalize(specs("float32")["batched"])
    with pytest.raises(InvalidConfigurationError, match="split_needs_g2"):
        r.check({**r.default(batched, h100), "split": 2}, batched, h100)
    two = canonicalize(specs("float32")["two_index"])
    with pytest.raises(InvalidConfigurationError, match="split_at_most_tiles"):
        r.check({**r.default(two, h100), "split": 16, "kt": 4}, two, h100)
