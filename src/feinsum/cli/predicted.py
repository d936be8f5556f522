"""Predicted times in the CLI: ``feinsum show --model`` and ``feinsum tune --dry-run``.

The performance model (:mod:`feinsum.prediction`) predicts a configuration on a device
model without the device: ``--model NAME`` names one (``h200``, ``a100``, ...); without it,
the record's device or ``--device`` is predicted when the model describes it."""

from __future__ import annotations

import argparse
from typing import Any


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="NAME",
                        help="predict for this GPU model (h200, h100, gh200, h800, a100, "
                        "mi250x, mi300x, max1550, m2max; works without the device)")


def prediction_dict(p: Any) -> dict[str, Any]:
    """A prediction as JSON."""
    return {"seconds": p.seconds, "roofline_fraction": p.fraction, "limit": p.limit,
            "hardware": p.hardware, "components": p.components,
            "roofline_seconds": p.roofline_seconds, "kernels": list(p.kernels),
            "notes": list(p.notes)}


def prediction_text(p: Any) -> str:
    k = p.kernels[0] if p.kernels else {}
    launch = (f"; {k['groups']} groups of {k['group_size']}, {k['resident_groups']} per CU "
              f"({k['occupancy_limit']})" if k else "")
    return (f"{p.seconds * 1e3:.4g} ms on {p.hardware} ({p.fraction:.0%} of the roofline, "
            f"bound by {p.limit}{launch})")


def record_prediction(model: str | None, recipe: str, spec: Any, params: Any, info: Any,
                      lengths: Any) -> tuple[Any, str]:
    """(prediction or None, why not) of a record's configuration on *model* (default: the
    record's device *info*), its code generated for *info* as it ran."""
    from feinsum.errors import FeinsumError
    from feinsum.prediction import predict_configuration
    from feinsum.timing.measurement import UNTRANSFORMED

    if recipe == UNTRANSFORMED:
        return None, "the untransformed kernel is not predicted"
    if info is None:
        return None, "the record's device is not in the database"
    try:
        return predict_configuration(recipe, spec, params, model or info, lengths,
                                     code_device=info), ""
    except FeinsumError as exc:
        hint = "" if model else "; --model NAME predicts for a GPU model"
        return None, f"{exc}{hint}"


def dry_run(args: argparse.Namespace, spec: Any, lengths: dict[str, int]) -> int:
    """``feinsum tune --dry-run``: per applicable recipe, the configurations the tuner would
    measure first, in the performance model's order, with their predicted times."""
    from feinsum.cli.common import emit_json
    from feinsum.devices.models import get_model
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.errors import TuningError
    from feinsum.prediction import hardware_for
    from feinsum.recipes import get_recipe, recipes
    from feinsum.timing.measurement import Target
    from feinsum.tuning.ranking import Predicted, pool_size, predictor_for

    info = get_model(args.model) if args.model else device_info(get_device(args.device))
    hardware_for(args.model or info)  # a clear error for a CPU or an unknown GPU
    target = Target.make(spec, lengths or None)
    candidates = ([get_recipe(n, args.recipe_path) for n in args.recipe] if args.recipe
                  else recipes(args.recipe_path))
    chosen = [r for r in candidates if r.applies(target.spec, info) is None]
    if not chosen:
        raise TuningError(f"no recipe applies to {spec} on {info.name}")
    share = max(1, (args.budget or 2 * len(chosen)) // len(chosen))
    out: list[dict[str, Any]] = []
    for r in chosen:
        predictor = predictor_for(r, target.spec, info, target.lengths)
        default = r.default(target.spec, info, target.lengths)
        strat = Predicted(r.space(target.spec, info),
                          predictor=predictor or (lambda cs, _: [None] * len(cs)),
                          pool=pool_size(share), seed=args.seed, default=default)
        for rank, (config, _) in enumerate(strat.rank()[:args.show], 1):
            p, why = None, ""
            try:
                from feinsum.prediction import predict_configuration

                p = predict_configuration(r, target.spec, config, info, target.lengths)
            except Exception as exc:  # shown, not raised: the tuner would measure it
                why = str(exc)
            out.append({"recipe": r.name, "rank": rank, "default": dict(config) == default,
                        "params": dict(config),
                        "prediction": None if p is None else prediction_dict(p),
                        "why_not": "" if p is not None else why})
    if args.json:
        emit_json({"einsum": str(spec), "device": info.name, "model": args.model,
                   "lengths": target.lengths, "candidates": out})
        return 0
    print(f"{spec.subscripts} at {target.lengths} on {info.name}: the first "
          f"{args.show} of each recipe's {pool_size(share)} ranked candidates (nothing is "
          "measured)")
    width = max((len(c["recipe"]) for c in out), default=0)
    for c in out:
        d = c["prediction"]
        when = ("-" if d is None else f"{d['seconds'] * 1e3:9.4g} ms "
                f"{d['roofline_fraction']:5.0%} {d['limit']:<8}")
        params = ", ".join(f"{k}={v}" for k, v in c["params"].items())
        print(f"{c['recipe']:<{width}} {c['rank']:>2}{'*' if c['default'] else ' '} {when}  "
              f"{params}{'' if d else '  (' + c['why_not'] + ')'}")
    print("(* the recipe's default; % of the roofline of the device model)")
    return 0
