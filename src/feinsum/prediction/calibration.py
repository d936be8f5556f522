"""The performance model checked against measured records: predicted over measured time per
record, the spread of those ratios, and the rank correlation per einsum.

A :class:`MeasuredConfiguration` is everything needed to generate a record's code again
without a device (the canonical spec as JSON, the recipe and its parameters, the
``DeviceInfo`` the code was generated for, the lengths) and what was measured.
``benchmarks/calibrate_model.py`` reads them from a feinsum database and writes the table
of docs/performance-model.rst; ``tests/data/h200_records.json`` holds a subset the tests
check the model against.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from feinsum.devices.info import DeviceInfo
from feinsum.prediction.configuration import roofline_seconds
from feinsum.prediction.model import Prediction, predict


@dataclass(frozen=True)
class MeasuredConfiguration:
    """One measured record, as the model needs it."""

    id: int
    #: the einsum's name (a workload, or its canonical text)
    workload: str
    recipe: str
    params: Mapping[str, Any]
    spec_json: str
    device: Mapping[str, Any]
    lengths: Mapping[str, int]
    #: the fastest measured time (seconds)
    seconds: float
    code_fingerprint: str | None = None
    #: the run (database) it was measured in: ids are unique within a run only
    run: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MeasuredConfiguration:
        return cls(id=int(d["id"]), workload=str(d["workload"]), recipe=str(d["recipe"]),
                   params=dict(d["params"]), spec_json=str(d["spec_json"]),
                   device=dict(d["device"]), lengths=dict(d["lengths"]),
                   seconds=float(d["seconds"]), code_fingerprint=d.get("code_fingerprint"),
                   run=str(d.get("run", "")))

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "workload": self.workload, "recipe": self.recipe,
                "params": dict(self.params), "spec_json": self.spec_json,
                "device": dict(self.device), "lengths": dict(self.lengths),
                "seconds": self.seconds, "code_fingerprint": self.code_fingerprint,
                "run": self.run}

    @property
    def device_info(self) -> DeviceInfo:
        return DeviceInfo.from_dict(dict(self.device))

    def check(self, model: str) -> tuple[Prediction, bool]:
        """The record's configuration predicted on device model *model* (its code generated
        for the device it ran on), and whether that code is the code measured (its
        fingerprint equals :attr:`code_fingerprint`; a changed recipe generates other
        code, which the measured time says nothing about)."""
        from feinsum.lowering.kernel import generate_loopy
        from feinsum.recipes import get_recipe
        from feinsum.spec.serialize import spec_from_json
        from feinsum.timing.fingerprint import code_fingerprint

        spec = spec_from_json(self.spec_json)
        dev = self.device_info
        t_unit = get_recipe(self.recipe).apply(generate_loopy(spec), dict(self.params), spec,
                                               dev)
        same = code_fingerprint(t_unit, dev) == self.code_fingerprint
        roof = roofline_seconds(spec, self.lengths, model)
        return predict(t_unit, model, self.lengths, roofline_seconds=roof), same


def check_records(records: Sequence[MeasuredConfiguration], model: str
                  ) -> list[tuple[Prediction, bool]]:
    """:meth:`MeasuredConfiguration.check` of each record, its code generated with the hash
    seed the timing workers generate code with (in a process of that seed: loopy's code
    for some kernels depends on it, and another seed can make a record's code differ from
    the code measured)."""
    from feinsum.timing.hashseed import has_code_seed, seeded_pool

    if has_code_seed():
        return [r.check(model) for r in records]
    return list(seeded_pool(1).map(_check, records, [model] * len(records)))


def _check(record: MeasuredConfiguration, model: str) -> tuple[Prediction, bool]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return record.check(model)


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation of two equally long sequences (ties: mean ranks); nan
    for fewer than 3 values or a constant sequence."""
    if len(xs) != len(ys) or len(xs) < 3:
        return math.nan
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx > 0 and vy > 0 else math.nan


def pairs_in_order(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """The fraction of pairs (measured times differing by more than 5%) the prediction
    orders as measured."""
    right = total = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            if abs(measured[i] - measured[j]) <= 0.05 * min(measured[i], measured[j]):
                continue
            total += 1
            right += (predicted[i] < predicted[j]) == (measured[i] < measured[j])
    return right / total if total else math.nan


@dataclass(frozen=True)
class Summary:
    """How a model's predictions compare with measured times."""

    count: int
    #: predicted over measured: each record's, in the records' order
    ratios: tuple[float, ...]
    #: the share of ratios within [1/2, 2], and the geometric mean of max(r, 1/r)
    within_2x: float
    geometric_error: float
    #: per workload: Spearman's rank correlation and the share of pairs in order
    spearman: dict[str, float]
    pairs: dict[str, float]


def summarise(checked: Iterable[tuple[MeasuredConfiguration, Prediction]]) -> Summary:
    """The ratio spread and the rank agreement of *checked* (a record and its prediction)."""
    rows = list(checked)
    ratios = tuple(p.seconds / r.seconds for r, p in rows)
    by: dict[str, list[tuple[float, float]]] = {}
    for r, p in rows:
        by.setdefault(r.workload, []).append((p.seconds, r.seconds))
    n = len(ratios) or 1
    return Summary(
        count=len(ratios), ratios=ratios,
        within_2x=sum(0.5 <= x <= 2.0 for x in ratios) / n,
        geometric_error=math.exp(sum(abs(math.log(x)) for x in ratios) / n),
        spearman={w: spearman([a for a, _ in v], [b for _, b in v]) for w, v in by.items()},
        pairs={w: pairs_in_order([a for a, _ in v], [b for _, b in v]) for w, v in by.items()})
