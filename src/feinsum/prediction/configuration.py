"""A recipe configuration's predicted time: the code a recipe generates for a canonical
einsum, predicted at given lengths (cached: tuning and the CLI ask again)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from feinsum.devices.info import DeviceInfo
from feinsum.errors import InvalidConfigurationError, PredictionError, RecipeFailure
from feinsum.prediction.hardware import Hardware, hardware_for
from feinsum.prediction.model import Prediction, kernel_seconds, predict
from feinsum.spec.model import BatchedEinsum


def _device(device: DeviceInfo | str) -> DeviceInfo:
    if isinstance(device, DeviceInfo):
        return device
    from feinsum.devices.models import get_model

    return get_model(device)


def _roofline_parts(spec: BatchedEinsum, lengths: Mapping[str, int], hw: Hardware
                    ) -> tuple[float, float]:
    """Seconds of *spec*'s roofline flops at *hw*'s peak and of its bytes at the sustained
    bandwidth (:func:`feinsum.spec.costs.roofline_work`)."""
    import numpy as np

    from feinsum.spec.costs import roofline_work

    w = roofline_work(spec.with_lengths(dict(lengths)) if spec.length_symbols else spec)
    flops = w.flops / hw.peak_flops(np.dtype(w.dtype).itemsize)
    return flops, w.bytes / hw.dram_bandwidth if hw.dram_bandwidth > 0 else 0.0


def roofline_seconds(spec: BatchedEinsum, lengths: Mapping[str, int],
                     device: DeviceInfo | str) -> float:
    """The roofline's time of *spec* at *lengths* on *device*'s hardware: the flops, bytes
    and dtype the tuner and the database rate it by (:func:`feinsum.spec.costs.roofline_work`)
    over the hardware's peak and sustained bandwidth."""
    return max(_roofline_parts(spec, lengths, hardware_for(device)))


def floor_seconds(spec: BatchedEinsum, lengths: Mapping[str, int],
                  device: DeviceInfo | str) -> float:
    """The least time the performance model allows any one-kernel schedule of *spec* at
    *lengths* on *device*: one launch, the roofline's flops at the peak and its bytes at
    the sustained bandwidth, as much in sequence as the hardware keeps them
    (:attr:`~feinsum.prediction.hardware.Hardware.dram_overlap`; 0 on Hopper: their sum).
    Its :func:`roofline_seconds` over it is the best fraction of the roofline a schedule
    can be predicted at."""
    hw = hardware_for(device)
    flops, dram = _roofline_parts(spec, lengths, hw)
    return kernel_seconds({"fp": flops, "dram": dram}, hw)[0] + hw.launch_seconds


def predict_configuration(recipe: Any, spec: BatchedEinsum, params: Mapping[str, Any],
                          device: DeviceInfo | str, lengths: Mapping[str, int], *,
                          code_device: DeviceInfo | None = None) -> Prediction:
    """The predicted time of *recipe*'s configuration *params* for the canonical einsum
    *spec* on GPU *device* (a device model's key or name, or a ``DeviceInfo``) at
    *lengths* (the values of *spec*'s length symbols). The code is generated for
    *code_device* (default: *device*), as :func:`feinsum.measure` would generate it.
    *recipe*: a :class:`~feinsum.recipes.Recipe` or a recipe's name."""
    from feinsum.recipes import get_recipe

    r = get_recipe(recipe) if isinstance(recipe, str) else recipe
    dev = code_device or _device(device)
    return _cached(r, spec, json.dumps(dict(params), sort_keys=True), dev, device,
                   tuple(sorted((k, int(v)) for k, v in lengths.items())))


def fastest(spec: BatchedEinsum, candidates: Sequence[tuple[Any, Mapping[str, Any]]],
            device: DeviceInfo, lengths: Mapping[str, int]) -> int | None:
    """The index of the candidate, a ``(recipe, params)`` pair, that the performance model
    predicts fastest for *spec* on *device* at *lengths* (the first on a tie); ``None``
    where the model describes neither the device (a CPU, a GPU nothing describes) nor any
    candidate (one it cannot generate or whose lengths it lacks)."""
    try:
        hardware_for(device)
    except PredictionError:
        return None
    best: tuple[float, int] | None = None
    for k, (recipe, params) in enumerate(candidates):
        try:
            seconds = predict_configuration(recipe, spec, params, device, lengths).seconds
        except PredictionError:
            continue
        if best is None or seconds < best[0]:
            best = (seconds, k)
    return None if best is None else best[1]


@functools.lru_cache(maxsize=512)
def _cached(recipe: Any, spec: BatchedEinsum, params: str, dev: DeviceInfo,
            device: DeviceInfo | str, lengths: tuple[tuple[str, int], ...]) -> Prediction:
    from feinsum.lowering.kernel import generate_loopy

    lens = dict(lengths)
    try:
        t_unit = recipe.apply(generate_loopy(spec), json.loads(params), spec, dev)
    except (InvalidConfigurationError, RecipeFailure) as exc:
        raise PredictionError(f"{recipe.name} cannot generate {params}: {exc}") from exc
    except Exception as exc:  # a recipe's own bug: one line, not loopy's traceback
        raise PredictionError(f"{recipe.name} failed to generate {params}: "
                              f"{type(exc).__name__}: {exc}") from exc
    return predict(t_unit, device, lens, roofline_seconds=roofline_seconds(spec, lens, device))
