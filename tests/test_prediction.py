"""The performance model's parts: NVIDIA families from the driver, the hardware of each
device model, warp accesses (lines, sectors, bank conflicts), arithmetic counts, and whole
predictions of small kernels whose costs are known by hand."""

from __future__ import annotations

import dataclasses
import types

import loopy as lp
import numpy as np
import pytest

import feinsum
from feinsum.devices.info import GENERIC_GPU, DeviceInfo
from feinsum.devices.models import MODELS, get_model, model_for, with_model
from feinsum.devices.nvidia import FAMILIES, family, with_family
from feinsum.errors import PredictionError
from feinsum.prediction import HARDWARE, hardware_for, predict, predict_configuration
from feinsum.prediction.accesses import warp_access
from feinsum.prediction.ops import OpCounter

# {{{ device models and NVIDIA families


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA GH200 144G HBM3e", "gh200"),
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200"), ("NVIDIA H800", "h800"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100")])
def test_names_match_their_model_longest_pattern_first(name: str, key: str) -> None:
    """"GH200" contains "H200": the longest matching pattern wins, whatever the order."""
    assert model_for(name) is MODELS[key]


def test_hopper_models() -> None:
    h200, h100, h800 = (MODELS[k].info for k in ("h200", "h100", "h800"))
    assert h200.compute_units == h100.compute_units == 132
    assert h200.registers_per_compute_unit == h100.registers_per_compute_unit
    assert h200.peak_bandwidth == 4.8e12 and h200.global_mem_size > 140e9
    assert h800.peak_flops_fp64 < 0.02 * h800.peak_flops_fp32  # fp64 cut to 1 TFLOPS
    assert get_model("NVIDIA GH200 480GB").model.startswith("NVIDIA GH200")


def _real(name: str, cc: str = "", clock: int = 0) -> DeviceInfo:
    """A GPU as OpenCL reads it: no model fields."""
    return dataclasses.replace(
        MODELS["h100"].info, name=name, subgroup_width=0, registers_per_work_item=0,
        registers_per_compute_unit=0, l1_cache_size=0, fp64_rate=0.0, peak_bandwidth=0.0,
        peak_flops_fp32=0.0, model="", compute_capability=cc, clock_mhz=clock,
        compute_units=84)


def test_unmatched_nvidia_gpu_takes_its_family_from_the_compute_capability() -> None:
    got = with_model(_real("NVIDIA GeForce RTX 3090", "8.6", 1695))
    assert got.registers_per_compute_unit == 65536 > GENERIC_GPU["registers_per_compute_unit"]
    assert got.registers_per_work_item == 255 and got.l1_cache_size == 128 << 10
    assert got.fp64_rate == 1 / 64 and got.subgroup_width == 32
    assert got.peak_flops_fp32 == pytest.approx(2 * 84 * 128 * 1695e6)  # 36.4 TFLOPS
    assert "sm_86" in got.model and got.key == _real("NVIDIA GeForce RTX 3090").key
    assert got.peak_bandwidth == 0  # not reported by the driver: unknown
    # a newer minor revision takes its major's row; a capability older than Volta none
    assert family("8.7") is FAMILIES[(8, 6)] and family("9.0") is FAMILIES[(9, 0)]
    assert family("6.1") is None and family("") is None and family("x") is None
    old = _real("Tesla P100", "6.0")
    assert with_family(old) is old


@pytest.mark.parametrize(("cc", "fp64"), [("7.0", 1 / 2), ("7.5", 1 / 32), ("8.0", 1 / 2),
                                          ("8.9", 1 / 64), ("10.0", 1 / 2), ("12.0", 1 / 64)])
def test_families(cc: str, fp64: float) -> None:
    got = with_model(_real("Some NVIDIA GPU", cc, 1500))
    assert got.fp64_rate == fp64 and got.registers_per_work_item == 255
    assert got.private_bytes_per_work_item > _real("x").private_bytes_per_work_item


def _fake_cl_device(**over: object) -> object:
    """A stand-in for a ``pyopencl.Device`` of NVIDIA's driver (attributes only)."""
    import pyopencl as cl

    d = dict(platform=types.SimpleNamespace(name="NVIDIA CUDA", version="OpenCL 3.0 CUDA 13.0"),
             vendor="NVIDIA Corporation", name="NVIDIA RTX 6000 Ada Generation",
             driver_version="580.1", version="OpenCL 3.0 CUDA", type=cl.device_type.GPU,
             max_compute_units=142, max_work_group_size=1024,
             max_work_item_sizes=[1024, 1024, 64], local_mem_size=49152,
             global_mem_size=48 << 30, max_constant_buffer_size=65536,
             preferred_vector_width_float=1, preferred_vector_width_double=1,
             native_vector_width_float=1, native_vector_width_double=1,
             extensions="cl_khr_fp64 cl_nv_device_attribute_query", max_clock_frequency=2505,
             compute_capability_major_nv=8, compute_capability_minor_nv=9)
    d.update(over)
    return types.SimpleNamespace(**d)


def test_device_info_reads_the_compute_capability_from_the_driver() -> None:
    from feinsum.devices.opencl import device_info

    info = device_info(_fake_cl_device())  # type: ignore[arg-type]
    assert info.compute_capability == "8.9" and info.clock_mhz == 2505
    assert info.model.startswith("NVIDIA sm_89") and info.registers_per_work_item == 255
    assert DeviceInfo.from_dict(info.as_dict()) == info
    plain = device_info(_fake_cl_device(extensions="cl_khr_fp64"))  # type: ignore[arg-type]
    assert plain.compute_capability == "" and plain.model == ""  # GENERIC_GPU then


# }}}

# {{{ hardware


def test_hardware_of_every_model() -> None:
    for key, m in MODELS.items():
        hw = hardware_for(key)
        assert hw.compute_units == m.info.compute_units and hw.subgroup == m.info.subgroup_width
        peak = hw.peak_flops(4)
        assert 0.5 * m.info.peak_flops_fp32 <= peak <= 1.5 * m.info.peak_flops_fp32, key
    assert HARDWARE["h200"].calibrated and not HARDWARE["h100"].calibrated
    assert hardware_for(MODELS["h200"].info) is HARDWARE["h200"]
    assert hardware_for("NVIDIA GH200 480GB").name == "gh200"
    assert hardware_for(with_model(_real("x", "8.6", 1695))).compute_units == 84


def test_hardware_refuses_what_it_cannot_describe() -> None:
    cpu = dataclasses.replace(MODELS["h100"].info, device_type="CPU", name="pthread-x")
    with pytest.raises(PredictionError, match="CPU"):
        hardware_for(cpu)
    with pytest.raises(PredictionError, match="no compute capability"):
        hardware_for(_real("Mystery GPU"))
    with pytest.raises(PredictionError, match="no performance model"):
        hardware_for("no such model")


# }}}

# {{{ warp accesses and arithmetic


def _spans(stride: int, width: int, lanes: int = 32) -> list[tuple[int, int]]:
    return [(i * stride, i * stride + width) for i in range(lanes)]


def test_global_lines_and_sectors() -> None:
    coalesced = warp_access("global", "a", False, _spans(4, 4), 128, 32, 4)
    assert coalesced.wavefronts == 1 and coalesced.sectors == 4
    doubles = warp_access("global", "a", False, _spans(8, 8), 128, 32, 4)
    assert doubles.wavefronts == 2 and doubles.sectors == 8
    strided = warp_access("global", "a", False, _spans(35 * 8, 8), 128, 32, 4)
    assert strided.wavefronts == 32 and strided.sectors == 32
    broadcast = warp_access("global", "a", False, _spans(0, 4), 128, 32, 4)
    assert broadcast.wavefronts == 1 and broadcast.sectors == 1


def test_local_bank_conflicts() -> None:
    assert warp_access("local", "s", False, _spans(0, 8), 128, 32, 4).wavefronts == 1
    assert warp_access("local", "s", False, _spans(4, 4), 128, 32, 4).wavefronts == 1
    assert warp_access("local", "s", False, _spans(8, 8), 128, 32, 4).wavefronts == 2
    assert warp_access("local", "s", False, _spans(128, 4), 128, 32, 4).wavefronts == 32
    assert warp_access("local", "s", False, _spans(35 * 8, 8), 128, 32, 4).wavefronts == 2
    assert warp_access("stack", "p", False, _spans(0, 8), 128, 32, 4).wavefronts == 2


def test_op_counts() -> None:
    import pymbolic.primitives as p

    a, b, c, d = (p.Variable(n) for n in "abcd")
    fma = OpCounter(4, False)(a + b * c)
    assert (fma.fp, fma.flops, fma.sfu) == (1, 2, 0)
    three = OpCounter(4, False)(a + b * c * d)
    assert (three.fp, three.flops) == (2, 3)
    exp = p.Call(p.Variable("exp"), (a,))
    assert (OpCounter(4, False)(exp).sfu, OpCounter(4, False)(exp).fp) == (1, 8)
    assert (OpCounter(4, True)(exp).sfu, OpCounter(4, True)(exp).fp) == (1, 1)
    assert (OpCounter(8, False)(exp).sfu, OpCounter(8, False)(exp).fp) == (0, 24)
    odd = OpCounter(4, False)(p.Call(p.Variable("mystery"), (a,)))
    assert odd.unknown == {"mystery"} and odd.fp == 2
    # feinsum's reduction combines are known: an exp and a log1p per logsumexp term
    lse = OpCounter(4, False)(p.Call(p.Variable("logsumexp"), (a, b)))
    assert not lse.unknown and (lse.sfu, lse.fp, lse.other) == (2, 22, 11)
    assert OpCounter(8, False)(p.Call(p.Variable("logsumexp"), (a, b))).fp == 56
    arg = OpCounter(4, False)(p.Call(p.Variable("feinsum_argmin"), (a, b, c, d)))
    assert not arg.unknown and (arg.fp, arg.other) == (0, 13)


# }}}

# {{{ whole predictions


def _copy(stride_lanes: bool) -> lp.TranslationUnit:
    """out[i] = 2 a[i] over n, 256 work-items a group; *stride_lanes*: each work-item
    handles a contiguous run of 32 (lane stride 32 entries) instead of one entry."""
    t = lp.make_kernel("{[i]: 0 <= i < n}", "out[i] = 2 * a[i]",
                       [lp.GlobalArg("a", np.float32, shape=("n",)),
                        lp.GlobalArg("out", np.float32, shape=("n",)), lp.ValueArg("n", np.int32)],
                       target=lp.PyOpenCLTarget(), lang_version=(2018, 2))
    t = lp.assume(t, "n mod 8192 = 0 and n >= 8192")
    if stride_lanes:
        t = lp.split_iname(t, "i", 32, inner_tag="unr")
        return lp.split_iname(t, "i_outer", 256, outer_tag="g.0", inner_tag="l.0")
    return lp.split_iname(t, "i", 256, outer_tag="g.0", inner_tag="l.0")


def test_a_coalesced_copy_is_dram_bound() -> None:
    n = 1 << 26
    p = predict(_copy(False), "h200", {"n": n})
    hw = hardware_for("h200")
    assert p.limit == "dram"
    assert p.components["dram"] == pytest.approx(2 * 4 * n / hw.dram_bandwidth)
    assert 0.5 <= p.fraction <= 1.0
    assert p.kernels[0]["groups"] == n // 256 and p.kernels[0]["group_size"] == 256
    strided = predict(_copy(True), "h200", {"n": n})
    assert strided.seconds > p.seconds and strided.components["lsu"] > 8 * p.components["lsu"]


def _two_launches() -> lp.TranslationUnit:
    """A copy of slice 1 of a (5, n) array over n/256 work-groups, a global barrier, then
    a sum of its first 256 entries by one work-group of 256: two device kernels."""
    t = lp.make_kernel(
        ["{[i]: 0 <= i < n}", "{[j, k]: 0 <= j < 256 and 0 <= k < 4}"],
        """
        t[i] = 2 * q[1, i]  {id=copy}
        ... gbarrier {id=gb, dep=copy}
        s[j] = t[j] + t[j] * k  {id=sum, dep=gb}
        """,
        [lp.GlobalArg("q", np.float32, shape=(5, "n")),
         lp.TemporaryVariable("t", np.float32, shape=("n",),
                              address_space=lp.AddressSpace.GLOBAL),
         lp.GlobalArg("s", np.float32, shape=(256,)), lp.ValueArg("n", np.int32)],
        target=lp.PyOpenCLTarget(), lang_version=(2018, 2), seq_dependencies=False)
    t = lp.assume(t, "n mod 8192 = 0 and n >= 8192")
    t = lp.split_iname(t, "i", 256, outer_tag="g.0", inner_tag="l.0")
    return lp.tag_inames(t, {"j": "l.0", "k": "unr"})


def test_each_launch_is_charged_its_own_dram_traffic() -> None:
    """Each device kernel moves what it touches, a constant index's slice only: the copy
    reads one of q's 5 rows and writes t; the sum reads t (all of it: its index varies)
    and writes s. (They used to share the program's traffic by work-groups: the copy's
    n/256 groups took nearly all of it, the sum's one group nearly none.)"""
    n = 1 << 24
    p = predict(_two_launches(), "h200", {"n": n})
    hw = hardware_for("h200")
    copy, total = p.kernels
    assert copy["groups"] == n // 256 and total["groups"] == 1, p.kernels
    assert p.components["dram"] == pytest.approx((4 * n + 4 * n + 4 * n + 4 * 256)
                                                 / hw.dram_bandwidth)


def test_missing_lengths_are_named() -> None:
    with pytest.raises(PredictionError, match="lengths of n"):
        predict(_copy(False), "h200", {})


def test_configurations_of_every_model() -> None:
    """The contraction recipe's default for GEMM predicted on every GPU model, each model's
    own code; the H200's is faster than the A100's (a smaller, slower GPU)."""
    e = feinsum.canonicalize(feinsum.einsum("ik,kj->ij", feinsum.array("A", (1024, 1024)),
                                            feinsum.array("B", (1024, 1024))))
    lengths = feinsum.canonical_lengths(feinsum.einsum(
        "ik,kj->ij", feinsum.array("A", (1024, 1024)), feinsum.array("B", (1024, 1024))))
    r = feinsum.get_recipe("contraction")
    times = {}
    for key in ("h200", "a100", "mi300x"):
        dev = MODELS[key].info
        p = predict_configuration(r, e, r.default(e, dev), key, lengths)
        assert p.seconds > 0 and 0 < p.fraction <= 1 and p.hardware == key
        times[key] = p.seconds
    assert times["h200"] < times["a100"]
    with pytest.raises(PredictionError, match="cannot generate"):
        predict_configuration(r, e, {**r.default(e, MODELS["h200"].info), "lx": 3}, "h200",
                              lengths)


@pytest.mark.parametrize(("workload", "recipe", "best"), [
    ("local", "dg_nodes", (0.45, 0.55)), ("divergence", "dg_nodes", (0.45, 0.55)),
    ("gemm", "gemm_gpu", (0.8, 0.95)), ("gaussian", "tiled_1d", (0.99, 1.0)),
    ("inner", "split_reduction", (0.9, 1.0))])
def test_no_schedule_beats_the_models_floor(workload: str, recipe: str,
                                            best: tuple[float, float]) -> None:
    """floor_seconds: one launch and the roofline's flops and bytes in sequence (Hopper
    does not overlap them). The GPU defaults are predicted no faster; the floor is about
    half the roofline's pace for the fp64 DG operators at E = 5e4 (flops and bytes alike,
    plus a launch of 2.5 us beside 6.5 us of DRAM), near it for the compute-bound
    Gaussian and the DRAM-bound inner product."""
    from feinsum.prediction import floor_seconds, roofline_seconds
    from feinsum.tuning.workloads import workloads

    w = workloads(gpu=True)[workload]
    e = feinsum.canonicalize(w.spec)
    lengths = feinsum.canonical_lengths(w.spec.with_lengths(w.lengths))
    r = feinsum.get_recipe(recipe)
    p = predict_configuration(r, e, r.default(e, MODELS["h200"].info, lengths), "h200",
                              lengths)
    floor = floor_seconds(e, lengths, "h200")
    assert p.seconds >= floor
    assert best[0] <= roofline_seconds(e, lengths, "h200") / floor <= best[1]


# }}}
