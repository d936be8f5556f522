"""Device models: sane fields, the limits recipes derive from them, the recipes' spaces
and defaults for each model, errors that name the limit, identities kept."""

from __future__ import annotations

import dataclasses
import functools

import pytest

import feinsum
from feinsum.devices.info import CPU_GROUP_PRIVATE_BYTES, CPU_PRIVATE_BYTES, DeviceInfo
from feinsum.devices.models import MODELS, get_model, model_for, with_model
from feinsum.devices.opencl import scalar_view
from feinsum.errors import DeviceError, InvalidConfigurationError
from feinsum.spec.canonical import canonicalize
from feinsum.tuning.workloads import workloads

CPU = DeviceInfo(
    platform_name="Portable Computing Language", platform_version="OpenCL 3.0 PoCL 3.1",
    vendor="AuthenticAMD", name="pthread-skylake-avx512-AMD EPYC", driver_version="3.1",
    opencl_version="OpenCL 3.0 PoCL", device_type="CPU", compute_units=2,
    max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096),
    local_mem_size=1 << 20, global_mem_size=6 << 30, max_constant_buffer_size=1 << 20,
    preferred_vector_width_float=16, preferred_vector_width_double=8,
    native_vector_width_float=16, native_vector_width_double=8, has_fp64=True)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_fields_are_sane(name: str) -> None:
    m = MODELS[name]
    i = m.info
    assert i.device_type == "GPU" and i.model and m.sources
    assert i.subgroup_width in (16, 32, 64)
    assert 32 <= i.registers_per_work_item <= 512
    assert i.registers_per_compute_unit >= 16 * i.registers_per_work_item
    assert 16 << 10 <= i.local_mem_size <= 128 << 10
    assert 256 <= i.max_work_group_size <= 1024 and i.max_work_item_sizes[0] >= 256
    assert 1e11 <= i.peak_bandwidth <= 1e13 and 1e12 <= i.peak_flops_fp32 <= 2e14
    # a balanced machine: between 1 and 100 flops per byte
    assert 1 <= i.peak_flops_fp32 / i.peak_bandwidth <= 100
    assert (i.fp64_rate > 0) == i.has_fp64 and i.peak_flops_fp64 <= i.peak_flops_fp32
    assert model_for(i.name) is m and get_model(name) is i
    assert DeviceInfo.from_dict(i.as_dict()) == i


def test_derived_limits() -> None:
    h100, mi250x, max1550 = (MODELS[n].info for n in ("h100", "mi250x", "max1550"))
    assert h100.default_work_items == 64 and mi250x.default_work_items == 128
    assert max1550.default_work_items == 64
    assert h100.private_bytes_per_work_item == 8 << 10  # (256 KiB registers + 256 KiB L1) / 64
    assert h100.vector_registers(4) == 255 and h100.vector_registers(8) == 127
    assert mi250x.vector_registers(8) == 256 and h100.register_bytes == 1020
    assert h100.group_private_bytes == float("inf") and h100.group_accumulators == 16384
    assert MODELS["m2max"].info.peak_flops_fp64 == 0


def test_cpu_limits_are_the_recipes_former_constants() -> None:
    """The values the recipes had as constants: generated CPU code stays byte-identical."""
    for d in (CPU, scalar_view(CPU)):
        assert d.private_bytes_per_work_item == CPU_PRIVATE_BYTES == 64 << 10
        assert d.group_private_bytes == CPU_GROUP_PRIVATE_BYTES == 4 << 20
        assert d.vector_registers(4) == d.vector_registers(8) == 32
        assert d.register_bytes == 2048 and d.default_work_items == 64
        assert d.group_accumulators == 1024
    assert CPU.native_lanes(8) == 8 and scalar_view(CPU).native_lanes(8) == 1


def test_real_device_gets_its_model_keeps_its_identity() -> None:
    real = dataclasses.replace(MODELS["h100"].info, subgroup_width=0,
                               registers_per_work_item=0, registers_per_compute_unit=0,
                               l1_cache_size=0, fp64_rate=0.0, peak_bandwidth=0.0,
                               peak_flops_fp32=0.0, model="", driver_version="999.1")
    got = with_model(real)
    assert got.key == real.key and got.registers_per_work_item == 255
    assert with_model(CPU) is CPU
    # a GPU no model matches and whose driver reports no compute capability: unchanged
    unknown = dataclasses.replace(real, name="Some Future GPU", compute_capability="")
    assert with_model(unknown) is unknown and unknown.default_work_items == 64
    # serialised without model fields, a device reads back as before they existed
    assert "subgroup_width" not in CPU.as_dict()
    assert DeviceInfo.from_dict(CPU.as_dict()) == CPU
    with pytest.raises(DeviceError, match="no device model"):
        get_model("no such gpu")


@functools.cache
def _claims() -> list[tuple[str, str, str]]:
    specs = {n: canonicalize(w.spec) for n, w in workloads(small=True).items()}
    out = []
    for r in feinsum.recipes():
        for n, e in specs.items():
            for m in MODELS:
                if r.applies(e, MODELS[m].info) is None:
                    out.append((r.name, n, m))
    return out


def test_every_recipe_claims_workloads_on_gpu_models() -> None:
    """Each GPU recipe claims reference workloads on every model (CPU schemes none; the DG,
    elementwise and split-reduction recipes none on the Apple model: their workloads are
    float64, it has no fp64)."""
    claims = _claims()
    for recipe in ("generic", "contraction", "dg_operator", "dg_transposed", "dg_nodes",
                   "tiled_1d", "tiled_2d", "tiled_2d_gpu", "elementwise", "split_reduction"):
        for m in MODELS:
            if recipe in ("dg_operator", "dg_transposed", "dg_nodes", "elementwise",
                          "split_reduction") and not MODELS[m].info.has_fp64:
                continue
            assert any(r == recipe and mm == m for r, _, mm in claims), (recipe, m)
    assert not [c for c in claims if c[0] in ("kernel_vec_cpu", "block_sparse")]


def test_few_rows_workload_has_the_gpu_rows_of_workloads_md() -> None:
    """workloads.md: the few-rows workload has 16 rows on CPUs and 64 on GPUs (what
    bench_gpu.py tunes on a GPU and predict_defaults.py predicts); the others are the same."""
    cpu, gpu = workloads(), workloads(gpu=True)
    assert cpu["fewrows"].spec.lengths["i"] == 16
    assert gpu["fewrows"].spec.lengths["i"] == 64  # M: the rows index i
    assert gpu["fewrows"].lengths == cpu["fewrows"].lengths == {"N": 1_000_000}
    assert {n: w.spec for n, w in cpu.items() if n != "fewrows"} == {
        n: w.spec for n, w in gpu.items() if n != "fewrows"}
    # 64 rows: several row blocks on every GPU model (the 2D scheme's GPU case)
    e = canonicalize(gpu["fewrows"].spec)
    r = next(x for x in feinsum.recipes() if x.name == "tiled_2d_gpu")
    for m in MODELS:
        if not MODELS[m].info.is_cpu:
            p = r.default(e, MODELS[m].info)
            assert p["R"] < 64, (m, p)


@pytest.mark.parametrize("recipe", sorted({r.name for r in feinsum.recipes()}))
def test_spaces_nonempty_defaults_inside(recipe: str) -> None:
    """One test a recipe (each a few seconds to a minute: xdist spreads them)."""
    import numpy as np

    specs = {n: canonicalize(w.spec) for n, w in workloads(small=True).items()}
    recipes = {r.name: r for r in feinsum.recipes()}
    for r, n, m in _claims():
        if r != recipe:
            continue
        e, dev = specs[n], MODELS[m].info
        space = recipes[r].space(e, dev)
        space.validate(recipes[r].default(e, dev))
        assert space.sample(np.random.default_rng(0), n=1), (r, n, m)


def test_errors_name_the_limit() -> None:
    e = canonicalize(workloads(small=True)["divergence_x4"].spec)
    r = feinsum.get_recipe("dg_operator")
    dev = MODELS["h100"].info
    cfg = {**r.default(e, dev), "acc1": 16, "acc2": 16, "rows_per_pass": 4}
    with pytest.raises(InvalidConfigurationError, match="half the device's vector registers"):
        r.space(e, dev).validate(cfg)
    cfg = {**r.default(e, dev), "vec": 2}
    with pytest.raises(InvalidConfigurationError, match="private_bytes_per_work_item"):
        r.space(e, dev).validate(cfg)
    J, D = feinsum.array("J", (3, 3, "E")), feinsum.array("D", (3, 120, 120))
    us = [feinsum.array(f"u{k}", (3, "E", 120)) for k in range(4)]  # degree 7: 11.6 KiB
    big = canonicalize(feinsum.batched_einsum("xre,rij,xej->ei", [[J, D, u] for u in us]))
    why = r.applies(big, MODELS["mi250x"].info)
    assert why is not None and "private_bytes_per_work_item" in why
    g = feinsum.get_recipe("contraction")
    e2 = canonicalize(workloads(small=True)["gemm"].spec)
    with pytest.raises(InvalidConfigurationError, match="max_work_group_size"):
        g.space(e2, MODELS["mi250x"].info).validate(
            {**g.default(e2, MODELS["mi250x"].info), "lx": 32, "ly": 16})
