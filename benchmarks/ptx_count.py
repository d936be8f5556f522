"""Instructions per (i, j) pair in the inner loop of a kernel reduction's GPU code, without
a GPU: the structural check of ``docs/device-models.rst``.

    python benchmarks/ptx_count.py [--model h100] [--only gaussian ...] [--set K=256 ...]

For each kernel workload, the recipe's default for the device model (``--recipe``,
default ``tiled_1d``; ``--set NAME=JSON`` overrides parameters, ``--classic`` takes the
plain GpuConv1D configuration) is generated, its OpenCL compiled to NVIDIA PTX by clang
(``clang-14``, ``llvm-link-14``, ``opt-14``, ``llc-14`` and libclc's nvptx64 library:
Debian's ``clang-14 libclc-14``), LLVM's own loop unrolling off (what is unrolled is what
the recipe unrolled). The math built-ins are replaced first by what NVIDIA's compiler makes
of them: ``native_exp2`` and ``exp2`` (with ``-cl-denorms-are-zero``) one ``ex2.approx``,
``native_exp`` a multiplication and one ``ex2.approx``, the accurate ``exp`` CUDA's 8-step
``expf`` around one ``ex2.approx``, the logarithms one ``lg2.approx`` and a multiplication.
The innermost loop that reads local memory is the main tile loop: its instructions over
the pairs it computes (``rows x unroll``, or ``rows x K`` with the tile unrolled) are the
count. Moves, ``abs`` and ``neg`` are left out (ptxas folds them into operands), so this is
PTX, not SASS: a structural measure, to compare configurations, and an estimate of the
issue time (:func:`issue_ms`).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

LIBCLC = Path("/usr/lib/clc/nvptx64--nvidiacl.bc")
TOOLS = ("clang-14", "llvm-link-14", "opt-14", "llc-14")
KERNELS = ("gaussian", "gaussian4", "softmin", "nearest")

PRELUDE = """
float fk_ex2(float x) { return __nvvm_ex2_approx_ftz_f(x); }
float fk_lg2(float x) { return __nvvm_lg2_approx_ftz_f(x); }
float fk_exp(float x) {  /* CUDA's expf: 7 steps around MUFU.EX2 */
  float j = fma(x, 1.442695f, 12582912.0f);
  float jm = j - 12582912.0f;
  float f = fma(jm, -0.693145752f, x);
  f = fma(jm, -1.42860677e-06f, f);
  int e = as_int(j) << 23;
  float r = __nvvm_ex2_approx_ftz_f(f * 1.442695f);
  return as_float(as_int(r) + e);
}
"""
SUBSTITUTIONS = [
    (r"\bnative_exp2\(", "fk_ex2("), (r"\bexp2\(", "fk_ex2("),
    (r"\bnative_exp\(", "fk_ex2(1.442695f * "), (r"\bexp\(", "fk_exp("),
    (r"\b(native_)?log2\(", "fk_lg2("), (r"\b(native_)?log\(", "0.6931472f * fk_lg2("),
]
FOLDED = ("mov", "abs", "neg", "cvta")


def device_code(workload: str, model: str, recipe: str, overrides: dict[str, Any],
                classic: bool) -> tuple[str, dict[str, Any], Any]:
    """The OpenCL of *recipe*'s configuration for *workload* on device model *model*, the
    configuration, and its transformed translation unit."""
    import loopy as lp

    import feinsum
    from feinsum.devices.models import get_model
    from feinsum.spec.canonical import canonicalize
    from feinsum.tuning.workloads import workloads

    e = canonicalize(workloads(gpu=True)[workload].spec)
    r = next(x for x in feinsum.recipes() if x.name == recipe)
    info = get_model(model)
    params = dict(r.default(e, info))
    if classic:
        params.update(rows=1, unroll=1, peel=False, pack=False, math="accurate")
    params = r.check({**params, **overrides}, e, info)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_unit = r.apply(feinsum.generate_loopy(e), params, e, info)
        code = lp.generate_code_v2(t_unit)
    return code.device_code(), params, t_unit


def model_count(t_unit: Any, model: str, points: int) -> dict[str, float]:
    """What the performance model (:mod:`feinsum.prediction`) counts of *t_unit* at M = N
    = *points*: the warp instructions the whole kernel issues per pair (x 32: per pair of
    one lane), by kind."""
    from feinsum.prediction.hardware import hardware_for
    from feinsum.prediction.kernels import read_kernel
    from feinsum.prediction.model import issued

    knl = t_unit.default_entrypoint
    stats = read_kernel(t_unit, dict.fromkeys(knl.all_params(), points), hardware_for(model))
    out: dict[str, float] = {}
    for k in stats.kernels:
        for kind, n in issued(k).items():
            out[kind] = out.get(kind, 0.0) + n * 32 / points**2
    return out


def to_ptx(source: str) -> str:
    """PTX of OpenCL *source* (built-ins substituted, LLVM unrolling off)."""
    for pat, rep in SUBSTITUTIONS:
        source = re.sub(pat, rep, source)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "k.cl").write_text(PRELUDE + source)
        steps = [
            ["clang-14", "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl",
             "-Xclang", "-finclude-default-header", "-O3", "-fno-unroll-loops", "-emit-llvm",
             "-c", "k.cl", "-o", "k.bc"],
            ["llvm-link-14", "--only-needed", "k.bc", str(LIBCLC), "-o", "l.bc"],
            ["opt-14", "-O3", "-disable-loop-unrolling", "l.bc", "-o", "o.bc"],
            ["llc-14", "-mcpu=sm_80", "o.bc", "-o", "k.ptx"],
        ]
        for cmd in steps:
            proc = subprocess.run(cmd, cwd=d, capture_output=True, text=True, check=False)
            if proc.returncode:
                raise SystemExit(f"{cmd[0]} failed:\n{proc.stderr[-2000:]}")
        return (d / "k.ptx").read_text()


def main_loop(ptx: str) -> list[str]:
    """The instructions of the first innermost loop that reads local memory (llc names
    each block's loop in a comment: ``=>This Inner Loop Header``, ``in Loop: Header=BBx``)."""
    loops: dict[str, list[str]] = {}
    inner: list[str] = []
    current: str | None = None
    last_label: str | None = None
    for raw in ptx.splitlines():
        x = raw.strip()
        block = re.match(r"^(?:\S*?(BB\d+_\d+):|// %bb\.\d+:)", x)
        if not block and x.startswith("//") and "Inner Loop Header" in x and last_label:
            current = last_label  # the header's annotation on a line of its own
            inner.append(last_label)
            continue
        if block:
            last_label = block.group(1)
            name = block.group(1)
            if "Inner Loop Header" in x and name:
                current = name
                inner.append(name)
            else:
                m = re.search(r"in Loop: Header=(BB\d+_\d+)", x)
                current = m.group(1) if m else (name if "Loop Header" in x else None)
            if current and name:
                loops.setdefault(current, []).append(f"{name}:")
            continue
        if current and x.endswith(";") and not x.startswith((".", "//")):
            loops.setdefault(current, []).append(x)
    for head in inner:
        if any(x.startswith("ld.shared") for x in loops.get(head, [])):
            return loops[head]
    raise SystemExit("no innermost loop reads local memory")


def skipped_blocks(body: list[str]) -> tuple[list[str], list[str]]:
    """*body* (a loop's instructions and block labels) split into what every iteration
    runs and what a conditional branch skips: the instructions after ``@%p bra X`` up to
    the label ``X`` further down, or up to the unconditional ``bra X`` back to the loop's
    header (a lazy argmin's search for the index, run only in a chunk with a new
    minimum)."""
    always: list[str] = []
    skipped: list[str] = []
    labels = {x[:-1] for x in body if x.endswith(":")}
    seen: set[str] = set()
    target: str | None = None
    back = False
    for x in body:
        if x.endswith(":"):
            seen.add(x[:-1])
            if x[:-1] == target and not back:
                target = None
            continue
        m = re.match(r"(@!?%p\d+\s+)?bra(?:\.uni)?\s+\$?L?(BB\d+_\d+);", x)
        if target is not None:
            skipped.append(x)
            if back and m and not m.group(1) and m.group(2) == target:
                target = None
            continue
        always.append(x)
        if m and m.group(1) and m.group(2) in labels:
            target, back = m.group(2), m.group(2) in seen
    return always, skipped


def count(body: list[str]) -> dict[str, int]:
    """Instructions of *body* by kind (folded ones left out)."""
    out: dict[str, int] = {}
    for x in body:
        op = x.lstrip("@!%p0123456789 ").split()[0].split(".")[0]
        if op in FOLDED:
            continue
        kind = ("lds" if x.startswith("ld.shared") or " ld.shared" in x else
                "mufu" if op in ("ex2", "lg2") else
                "branch" if op == "bra" else "setp" if op == "setp" else
                "select" if op in ("selp", "slct") else
                "fp" if re.match(r"(add|sub|mul|fma|min|max)\.(rn\.)?(ftz\.)?f", x.split(None, 1)[0]
                                 .lstrip("@!%p0123456789 ")) or ".f32" in op else "int/other")
        out[kind] = out.get(kind, 0) + 1
    return out


def issue_ms(per_pair: float, pairs: float, sms: int, clock_ghz: float) -> float:
    """The time to issue *per_pair* warp instructions for *pairs* pairs (32 pairs a warp
    instruction, 4 schedulers per SM, one instruction each per clock), in ms."""
    return pairs / 32 * per_pair / (sms * 4 * clock_ghz * 1e9) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="h100", help="device model (feinsum.devices.models)")
    ap.add_argument("--recipe", default="tiled_1d")
    ap.add_argument("--only", nargs="*", default=list(KERNELS))
    ap.add_argument("--set", nargs="*", default=[], metavar="NAME=JSON")
    ap.add_argument("--classic", action="store_true", help="tiled_1d's plain configuration")
    ap.add_argument("--show", action="store_true", help="print the loop's PTX")
    args = ap.parse_args()
    missing = [t for t in TOOLS if shutil.which(t) is None] + (
        [] if LIBCLC.exists() else [str(LIBCLC)])
    if missing:
        raise SystemExit(f"needs {', '.join(missing)} (Debian: apt-get install clang-14 "
                         "libclc-14)")
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    from feinsum.devices.models import get_model

    info = get_model(args.model)
    print(f"{'workload':<10} {'per pair':>8} {'issue ms':>8} {'model':>6} {'skipped':>7}  kinds"
          "   (config; the model's kinds)")
    for w in args.only:
        src, params, t_unit = device_code(w, args.model, args.recipe, overrides, args.classic)
        modelled = model_count(t_unit, args.model, 100_000)
        body, skipped = skipped_blocks(main_loop(to_ptx(src)))
        kinds = count(body)
        k, rows, unroll = params.get("K", 1), params.get("rows", 1), params.get("unroll", 1)
        pairs = rows * (k if unroll >= k else unroll)
        per = sum(kinds.values()) / pairs
        rare = sum(count(skipped).values()) / pairs
        # 1e10 pairs at 1.98 GHz (H100/H200 boost clock)
        ms = issue_ms(per, 1e10, info.compute_units, 1.98)
        print(f"{w:<10} {per:8.2f} {ms:8.2f} {sum(modelled.values()):6.2f} {rare:7.2f}  "
              f"{json.dumps(kinds)}  ({json.dumps(dict(params), sort_keys=True)}; "
              f"{json.dumps({k: round(v, 2) for k, v in modelled.items()})})")
        if args.show:
            print("\n".join(body))
            if skipped:
                print("// skipped by a conditional forward branch:\n" + "\n".join(skipped))


if __name__ == "__main__":
    main()
