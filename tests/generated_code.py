"""The code every recipe generates on the reference workloads, as fingerprints.

The workloads are the einsums of the shipped records (``db/*.jsonl``: every reference
workload of ``shared/workloads.md``), on each file's device (its recorded limits: no
OpenCL is opened; the CPU of the CPU records, the H200 of the GPU ones), and the
configuration is each recipe's default there.
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


def _shipped() -> list[tuple[dict[str, Any], list[tuple[str, str]]]]:
    """Per shipped file: its device's info and the (key, spec JSON) of its einsums."""
    out = []
    for path in sorted((ROOT / "db").glob("*.jsonl")):
        device: dict[str, Any] | None = None
        specs: list[tuple[str, str]] = []
        for line in path.read_text().splitlines():
            d = json.loads(line)
            if d["type"] == "device" and device is None:
                device = d["info"]
            elif d["type"] == "einsum":
                specs.append((d["canonical_key"], json.dumps(d["spec"], sort_keys=True)))
        if device is None:
            raise SystemExit(f"no device in {path}")
        out.append((device, sorted(set(specs))))
    if not out:
        raise SystemExit("no db/*.jsonl")
    return out


def fingerprints() -> dict[str, str]:
    """``{"device | recipe | workload key | config": fingerprint or error}`` for every
    shipped device, every recipe and every workload shipped for that device it applies
    to."""
    import feinsum
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.spec.serialize import spec_from_json
    from feinsum.timing.fingerprint import code_fingerprint

    out: dict[str, str] = {}
    warnings.simplefilter("ignore")
    for device, specs in _shipped():
        info = DeviceInfo.from_dict(device)
        for recipe in feinsum.recipes():
            for key, text in specs:
                spec = spec_from_json(text)
                if recipe.applies(spec, info) is not None:
                    continue
                cfg = dict(recipe.default(spec, info))
                label = (f"{info.name} | {recipe.name} | {key} | "
                         f"{json.dumps(cfg, sort_keys=True)}")
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
