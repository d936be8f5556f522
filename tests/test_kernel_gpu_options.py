"""tiled_1d's GPU options, one at a time on top of a GPU model's default, generated for the
model and run on the CPU device against evaluate at lengths that end in a partial tile, a
whole number of tiles, and a single point (the kernel workloads: every reduction kind)."""

from __future__ import annotations

import pytest
from gpu_model_cases import cpu_fit, recipes, specs

from feinsum.devices.models import MODELS
from feinsum.devices.opencl import device_info
from feinsum.lowering.reduction_updates import MATH_MODES
from feinsum.recipes.testing import check_configuration

#: Each option changed alone from the H100 default (K 64, 4 rows, unroll 16, peeled,
#: packed, native_exp2; log-sum-exp and the lazy argmin: 2 rows, in chunks of unroll terms,
#: a whole tile with 64).
VARIATIONS = [{"peel": False}, {"pack": False}, {"rows": 1, "unroll": 16},
              {"rows": 2, "unroll": 4}, {"unroll": 1}, {"unroll": 64},
              {"split": 2}, {"rows": 1, "split": 8, "unroll": 16},
              {"K": 32, "unroll": 32},
              *({"math": m} for m in MATH_MODES if m != "native_exp2")]
WORKLOADS = ["gaussian", "gaussian4", "softmin", "nearest"]


@pytest.mark.parametrize("variation", VARIATIONS, ids=lambda v: "-".join(
    f"{k}{x}" for k, x in v.items()))
@pytest.mark.parametrize("workload", WORKLOADS)
def test_tiled_1d_option_on_h100(workload: str, variation: dict, cl_queue) -> None:  # type: ignore[type-arg, no-untyped-def]
    model = MODELS["h100"].info
    fit = cpu_fit(model, device_info(cl_queue.device))
    if fit:
        pytest.skip(f"does not fit the CPU device: {fit}")
    r, e = recipes()["tiled_1d"], specs()[workload]
    default = r.default(e, model)
    assert default["peel"] and default["pack"] and default["rows"] > 1
    params = r.check({**default, **variation}, e, model)
    syms = e.length_symbols
    lengths = ({s: 301 for s in syms}, {s: 256 for s in syms}, {s: 1 for s in syms})
    err = check_configuration(r, e, params, lengths, cl_queue, device=model)
    assert err is None, f"{workload} {params}: {err}"


def test_configurations_of_before_the_options_keep_their_code() -> None:
    """The shipped records of tiled_1d and tiled_2d, measured before their GPU options
    (``unroll`` a boolean, no ``rows``/``peel``/``pack``/``math``), are upgraded to the plain
    kernel they ran: their code fingerprints are unchanged, so revalidation keeps them."""
    import json
    from pathlib import Path

    from feinsum.devices.opencl import DeviceInfo
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.spec.serialize import spec_from_json
    from feinsum.timing.fingerprint import code_fingerprint

    old = []  # (the record, its file's device, its spec)
    for path in sorted(Path(__file__).parents[1].glob("db/*.jsonl")):
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        device = DeviceInfo.from_dict(next(d["info"] for d in lines if d["type"] == "device"))
        spec_text = {d["canonical_key"]: json.dumps(d["spec"]) for d in lines
                     if d["type"] == "einsum"}
        old += [(d, device, spec_text[d["einsum"]]) for d in lines
                if d["type"] == "measurement" and d["code_fingerprint"]
                and d["recipe"] in ("tiled_1d", "tiled_2d") and "math" not in d["params"]]
    assert {d["recipe"] for d, _, _ in old} == {"tiled_1d"}, "the shipped records changed: adapt"
    for d, device, text in old:
        e = spec_from_json(text)
        t = recipes()[d["recipe"]].apply(generate_loopy(e), d["params"], e, device)
        assert code_fingerprint(t, device) == d["code_fingerprint"], d["params"]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_tiled_1d_gpu_default_keeps_the_device_busy(workload: str) -> None:
    """The H200 default takes 4 rows per work-item (log-sum-exp and the lazy argmin: 2)
    and one work-item per row at M = 1e6; at M = 1e5 those rows would leave 6 (12) warps
    per compute unit, so 4 (2) work-items share each row. The model predicts the default
    faster there than the same rows unshared and than one row per work-item."""
    import feinsum
    from feinsum.prediction import predict_configuration
    from feinsum.reductions import analysis as ka
    from feinsum.tuning.workloads import workloads

    w = workloads(gpu=True)[workload]
    r, e = recipes()["tiled_1d"], feinsum.canonicalize(w.spec)
    model = MODELS["h200"].info
    m = str(ka.analyze(e).m)
    lengths = dict(feinsum.canonical_lengths(w.spec.with_lengths(w.lengths)))
    assert lengths[m] == 100_000
    rows = 2 if workload in ("softmin", "nearest") else 4
    assert (r.default(e, model)["rows"], r.default(e, model)["split"]) == (rows, 1)
    big = r.default(e, model, {**lengths, m: 1_000_000})
    assert (big["rows"], big["split"]) == (rows, 1)
    small = r.default(e, model, lengths)
    assert (small["rows"], small["split"]) == (rows, rows)
    unshared = r.check({**small, "split": 1}, e, model)
    single = r.check({**small, "rows": 1, "split": 1, "unroll": 32}, e, model)
    seconds = {name: predict_configuration(r, e, p, "h200", lengths).seconds
               for name, p in (("default", small), ("unshared", unshared), ("single", single))}
    assert seconds["default"] < min(seconds["unshared"], seconds["single"]), seconds


def test_split_out_of_range_is_named() -> None:
    """A split not offered, one that makes a work-group too large, one whose partial
    accumulators exceed local memory: each refused with the constraint it violates."""
    import feinsum
    from feinsum.tuning.workloads import workloads

    r, model = recipes()["tiled_1d"], MODELS["h200"].info
    e = feinsum.canonicalize(workloads(gpu=True)["softmin"].spec)
    default = r.default(e, model)
    with pytest.raises(feinsum.InvalidConfigurationError, match="'split': 3 is not one of"):
        r.check({**default, "split": 3}, e, model)
    with pytest.raises(feinsum.InvalidConfigurationError,
                       match=r"'work_group' \(K x split <= max_work_group_size\): 2048 > 1024"):
        r.check({**default, "K": 256, "split": 8}, e, model)
    with pytest.raises(feinsum.InvalidConfigurationError, match="'local_memory'"):
        r.check({**default, "K": 512, "split": 2, "rows": 8, "unroll": 4}, e, model)
