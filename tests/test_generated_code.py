"""Every recipe's default configuration generates, on every reference workload it applies
to, the code recorded in ``tests/data/generated_code.json`` (``tests/generated_code.py``):
moving feinsum's modules around must not change a byte of what recipes generate."""

from __future__ import annotations

import json

from generated_code import GOLDEN, fingerprints_under_code_seed


def test_recipes_generate_the_recorded_code() -> None:
    want = json.loads(GOLDEN.read_text())
    got = fingerprints_under_code_seed()
    assert set(got) == set(want), (
        f"configurations added {sorted(set(got) - set(want))[:5]}, "
        f"gone {sorted(set(want) - set(got))[:5]}")
    changed = sorted(k for k in want if got[k] != want[k])
    assert not changed, (f"{len(changed)} of {len(want)} generate other code, e.g. "
                         f"{changed[:3]}; if intended: tests/generated_code.py --write")
