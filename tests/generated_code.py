"""The code every recipe generates on the reference workloads, as fingerprints.

The workloads are the einsums of the shipped records (``db/*.jsonl``: every reference
workload of ``shared/workloads.md``), the device is the shipped records' device (read from
the file: no OpenCL is opened), and the configuration is each recipe's default.
``tests/test_generated_code.py`` checks that restructuring feinsum leaves all of it
byte-identical; after a change that is meant to alter generated code, write the file anew::

    PYTHONHASHSEED=0 .venv/bin/python tests/generated_code.py --write

(loopy's code for some kernels depends on the hash seed: the fingerprints are taken under
``feinsum``'s code hash seed, in a child process when the caller runs under another).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "generated_code.json"


def _shipped() -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The shipped device's info and the (key, spec JSON) of every shipped einsum."""
    device: dict[str, Any] | None = None
    specs: list[tuple[str, str]] = []
    for path in sorted((ROOT / "db").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            d = json.loads(line)
            if d["type"] == "device" and device is None:
                device = d["info"]
            elif d["type"] == "einsum":
                specs.append((d["canonical_key"], json.dumps(d["spec"], sort_keys=True)))
    if device is None:
        raise SystemExit("no device in db/*.jsonl")
    return device, sorted(specs)


def fingerprints() -> dict[str, str]:
    """``{"recipe | workload key | config": fingerprint or error}`` for every recipe and
    every shipped workload it applies to."""
    import feinsum
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.spec.serialize import spec_from_json
    from feinsum.timing.fingerprint import code_fingerprint

    device, specs = _shipped()
    info = DeviceInfo.from_dict(device)
    out: dict[str, str] = {}
    warnings.simplefilter("ignore")
    for recipe in feinsum.recipes():
        for key, text in specs:
            spec = spec_from_json(text)
            if recipe.applies(spec, info) is not None:
                continue
            cfg = dict(recipe.default(spec, info))
            label = f"{recipe.name} | {key} | {json.dumps(cfg, sort_keys=True)}"
            try:
                t_unit = recipe.apply(generate_loopy(spec), cfg, spec, info)
                out[label] = code_fingerprint(t_unit, info)
            except Exception as exc:  # the error is part of what the recipe does
                out[label] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    return out


def fingerprints_under_code_seed() -> dict[str, str]:
    """:func:`fingerprints` in a child process under feinsum's code hash seed."""
    import os
    import subprocess
    import tempfile

    from feinsum.timing.hashseed import CODE_HASH_SEED

    if os.environ.get("PYTHONHASHSEED") == CODE_HASH_SEED:
        return fingerprints()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fingerprints.json"
        proc = subprocess.run([sys.executable, __file__, "--print", str(out)],
                              capture_output=True, text=True, check=False,
                              env={**os.environ, "PYTHONHASHSEED": CODE_HASH_SEED})
        if proc.returncode:
            raise RuntimeError(f"generating the code failed:\n{proc.stderr[-4000:]}")
        result: dict[str, str] = json.loads(out.read_text())
    return result


if __name__ == "__main__":
    if "--write" in sys.argv:
        GOLDEN.write_text(json.dumps(fingerprints_under_code_seed(), indent=1,
                                     sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
    elif sys.argv[1:2] == ["--print"] and len(sys.argv) == 3:
        Path(sys.argv[2]).write_text(json.dumps(fingerprints(), sort_keys=True))
    else:
        raise SystemExit("usage: generated_code.py --write | --print FILE")
