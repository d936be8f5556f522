"""Whether a GPU overlaps a DG kernel's DRAM traffic with its compute: the measurements that
settle the performance model's ``dram_overlap``.

    python benchmarks/gpu_overlap.py [--device SPEC] [--model h200] [--elements N ...]
                                     [--only local ...] [--repeat 10] [--out FILE.jsonl]
    python benchmarks/gpu_overlap.py --analyse FILE.jsonl

The model adds a kernel's DRAM time to its compute time (``Hardware.dram_overlap``, 0 on
Hopper), which caps one-field DG at E = 5e4 at 49-51 % of the roofline. One H200 record
beats that sum (local, E = 1e6: 0.217 ms measured, 0.325 predicted), others fit it. This
script measures the same configurations at several element counts: for each DG workload,
``dg_nodes``' defaults for the smallest and the largest ``--elements`` (the device's model,
else ``--model``), each at every element count. The code is generated for the model, built
once per configuration and timed with OpenCL profiling events (best of ``--repeat`` after a
warm-up; every count's output checked against numpy once). Each row is written to ``--out``
as it completes: workload, configuration, elements, measured seconds and the device's
limits (the model's parts are left to ``--analyse``: the lease's seconds are for the GPU).

``--analyse`` reads such a file, generates each row's code again for its device, and
prints the model's parts (``compute``: the larger of the instruction stream and the warps'
path with the L1 service; ``dram``; ``launch``; summed over the device kernels) and the
share of the shorter of ``compute`` and ``dram`` that the measurement hides
(``(compute + dram + launch - measured) / min(compute, dram)``; 0: the model's sum, 1: full
overlap, outside 0-1: another part of the model is off), and its median per workload and
over all rows. Nothing is fitted here: ``feinsum.prediction.hardware`` changes when a person
has read these numbers. Without a GPU (PoCL) the script runs the same code and checks it;
its times say nothing of a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import feinsum  # noqa: E402

WORKLOADS = ("local", "divergence", "gradient", "face_mass")
ELEMENTS = (50_000, 200_000, 1_000_000)


def model_parts(t_unit: Any, lengths: dict[str, int], model: str) -> dict[str, float]:
    """The model's compute, DRAM and launch seconds of *t_unit* at *lengths*."""
    from feinsum.prediction import model as pm
    from feinsum.prediction.hardware import hardware_for
    from feinsum.prediction.kernels import read_kernel

    hw = hardware_for(model)
    parts = dict.fromkeys(("compute", "dram", "launch", "predicted"), 0.0)
    for k in read_kernel(t_unit, lengths, hw).kernels:
        c = pm.kernel_components(k, hw)
        c["dram"] = k.dram_bytes / hw.dram_bandwidth
        parts["compute"] += max(c["latency"] + c["lsu"], c["issue"], c["fp"], c["sfu"])
        parts["dram"] += c["dram"]
        parts["launch"] += hw.launch_seconds
        parts["predicted"] += pm.kernel_seconds(c, hw)[0] + hw.launch_seconds
    return parts


def device_inputs(spec: Any, lengths: dict[str, int], queue: Any
                  ) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Random inputs of *spec* at *lengths* on the device (with the lengths), numpy's
    outputs for them, and the tolerance they are compared with."""
    import numpy as np
    import pyopencl.array as cla

    from feinsum.lowering.validation import (
        random_inputs,
        reduction_length,
        reference_outputs,
        tolerance,
    )

    inputs = random_inputs(spec, lengths, 0)
    args: dict[str, Any] = {k: cla.to_device(queue, np.ascontiguousarray(v))
                            for k, v in inputs.items()}
    args |= {k: np.int32(v) for k, v in lengths.items()}
    return (args, reference_outputs(spec, lengths, inputs),
            tolerance(spec.value_dtype(0), reduction_length(spec, lengths)))


def time_kernel(t_unit: Any, args: dict[str, Any], want: dict[str, Any], rtol: float,
                queue: Any, repeat: int) -> tuple[float, str | None]:
    """Best of *repeat* profiled runs of *t_unit* on *args* after a warm-up, and what is
    wrong with its output (``None``: it matches *want* within *rtol*)."""
    from feinsum.lowering.validation import compare

    knl = t_unit.executor(queue.context)
    _, result = knl(queue, **args)
    names = [a.name for a in t_unit.default_entrypoint.args if a.is_output]
    outs = dict(result) if isinstance(result, dict) else dict(zip(names, result, strict=True))
    _, wrong = compare({k: v.get() for k, v in outs.items()}, want, rtol)
    best = float("inf")
    for _ in range(repeat):
        evt, _ = knl(queue, **args, **outs)
        evt.wait()
        best = min(best, (evt.profile.end - evt.profile.start) * 1e-9)
    return best, wrong


def measure(args: argparse.Namespace) -> int:
    import pyopencl as cl

    from feinsum.devices.models import get_model, model_key
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.recipes import get_recipe
    from feinsum.tuning.workloads import workloads

    dev = get_device(args.device)
    info = device_info(dev)
    model = None if info.is_cpu else model_key(info)
    if model is None:  # the code is the model's, run where it can be checked
        model, info = args.model, get_model(args.model)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    recipe = get_recipe("dg_nodes")
    every = workloads(families=("dg",), gpu=True)
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    print(f"# {dev.name} (model {model}), dg_nodes, best of {args.repeat}", flush=True)
    for name in args.only or WORKLOADS:
        w = every[name]
        spec = feinsum.canonicalize(w.spec)
        configs: dict[str, int] = {}  # each configuration, and the count it is default at
        for n in (min(args.elements), max(args.elements)):
            lens = feinsum.canonical_lengths(w.spec.with_lengths({"E": n}))
            configs.setdefault(json.dumps(recipe.default(spec, info, lens), sort_keys=True), n)
        units = {p: recipe.apply(generate_loopy(spec), json.loads(p), spec, info)
                 for p in configs}
        for n in args.elements:
            lens = feinsum.canonical_lengths(w.spec.with_lengths({"E": n}))
            inputs, want, rtol = device_inputs(spec, lens, queue)
            for params_json, t_unit in units.items():
                t0 = time.time()
                try:
                    seconds, wrong = time_kernel(t_unit, inputs, want, rtol, queue,
                                                 args.repeat)
                except Exception as exc:  # a build or launch failure: say it, stop
                    print(f"# {name} at E = {n}: {type(exc).__name__}: {str(exc)[:500]}",
                          file=sys.stderr)
                    return 1
                row = {"workload": name, "model": model, "device": dev.name, "elements": n,
                       "params": json.loads(params_json), "default_at": configs[params_json],
                       "measured": seconds, "wrong": wrong,
                       "wall": round(time.time() - t0, 2), "info": info.as_dict()}
                print(json.dumps(row), flush=True)
                if out is not None:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                if wrong is not None:
                    print(f"# {name} at E = {n}: wrong output ({wrong})", file=sys.stderr)
                    return 1
    return 0


def with_parts(row: dict[str, Any]) -> dict[str, Any]:
    """*row* with the model's parts of its configuration's code, generated again for the
    device it ran on."""
    from feinsum.devices.info import DeviceInfo
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.recipes import get_recipe
    from feinsum.tuning.workloads import workloads

    w = workloads(families=("dg",), gpu=True)[row["workload"]]
    spec = feinsum.canonicalize(w.spec)
    t_unit = get_recipe("dg_nodes").apply(generate_loopy(spec), row["params"], spec,
                                          DeviceInfo.from_dict(row["info"]))
    lens = feinsum.canonical_lengths(w.spec.with_lengths({"E": row["elements"]}))
    return {**row, **model_parts(t_unit, lens, row["model"])}


def overlap(row: dict[str, Any]) -> float:
    """The share of the shorter of *row*'s compute and DRAM time its measurement hides."""
    shorter = min(row["compute"], row["dram"])
    hidden = row["compute"] + row["dram"] + row["launch"] - row["measured"]
    return hidden / shorter if shorter > 0 else float("nan")


def analyse(path: Path) -> int:
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = [with_parts(r) for r in rows]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"gpu_overlap.py: cannot analyse {path}: {type(exc).__name__}: {exc} (it takes "
              "the JSON lines gpu_overlap.py --out wrote)", file=sys.stderr)
        return 2
    if not rows:
        print(f"{path}: no rows", file=sys.stderr)
        return 1
    print("workload      elements  measured ms  predicted ms  compute ms  dram ms  launch ms"
          "  overlap")
    by: dict[str, list[float]] = {}
    for r in rows:
        o = overlap(r)
        by.setdefault(r["workload"], []).append(o)
        print(f"{r['workload']:12s} {r['elements']:9d} {r['measured'] * 1e3:12.4f} "
              f"{r['predicted'] * 1e3:13.4f} {r['compute'] * 1e3:11.4f} "
              f"{r['dram'] * 1e3:8.4f} {r['launch'] * 1e3:10.4f} {o:8.2f}")
    for name, values in by.items():
        print(f"median overlap, {name}: {statistics.median(values):.2f}")
    print(f"median overlap, all {len(rows)} rows: "
          f"{statistics.median(v for vs in by.values() for v in vs):.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", help="OpenCL device (default: $PYOPENCL_CTX, else the first)")
    p.add_argument("--model", default="h200",
                   help="the device model where the device matches none (default h200)")
    p.add_argument("--elements", type=int, nargs="+", default=list(ELEMENTS),
                   help="element counts (default 5e4 2e5 1e6)")
    p.add_argument("--only", nargs="+", choices=WORKLOADS, help="only these DG workloads")
    p.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    p.add_argument("--out", type=Path, help="append the rows to this JSON-lines file")
    p.add_argument("--analyse", type=Path, metavar="FILE", help="analyse rows of an earlier run")
    args = p.parse_args(argv)
    if args.analyse:
        return analyse(args.analyse)
    if any(n < 1 for n in args.elements) or args.repeat < 1:
        p.error("--elements and --repeat take positive whole numbers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return measure(args)


if __name__ == "__main__":
    sys.exit(main())
