"""``feinsum query`` (every record of an einsum, fastest first) and ``feinsum best`` (the
fallback chain). Fastest: the smallest minimum time, as ``feinsum tune`` ranks."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from feinsum.checks import count_type
from feinsum.cli.common import (
    add_db_argument,
    add_json_argument,
    emit_json,
    fmt_float,
    fmt_rate,
    nothing_found,
    params_text,
    print_table,
    record_dict,
)
from feinsum.cli.specargs import add_spec_arguments, parse_lengths, spec_from_args

if TYPE_CHECKING:
    from feinsum.spec.model import BatchedEinsum


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_spec_arguments(parser, kernel=True)
    add_db_argument(parser)
    if name == "query":
        parser.add_argument("--device", metavar="TEXT",
                            help="only records of the database device whose name or key "
                            "contains TEXT (default: every device)")
        parser.add_argument("--recipe", default=None, help="only records of this recipe")
        parser.add_argument("--status", default="ok",
                            help='only this status (default ok; "all" for every record)')
        parser.add_argument("--limit", type=count_type(), default=None, metavar="N",
                            help="at most N records")
        parser.add_argument("--current", action="store_true",
                            help="only records of the current recipe versions (records of "
                            "older versions are revalidated first, as the hook does)")
        parser.add_argument("--retired", action="store_true",
                            help="also the records revalidation retired")
    else:
        parser.add_argument("--device", metavar="DEVICE",
                            help="a device of the database (part of its name) or an OpenCL "
                            "device (PLATFORM:DEVICE or part of its name; default: the "
                            "default device)")
        parser.add_argument("--any-version", action="store_true",
                            help="also records of recipe versions that are not current "
                            "(default: as the hook, current versions, older ones "
                            "revalidated first)")
    parser.add_argument("--recipe-path", action="append", default=None, metavar="DIR",
                        help="also load recipes from this directory or file (repeatable): "
                        "their records count as current")
    add_json_argument(parser)


def _spec_and_lengths(args: argparse.Namespace) -> tuple[BatchedEinsum, dict[str, int] | None]:
    from feinsum.errors import SpecificationError
    from feinsum.spec.canonical import canonical_lengths

    spec = spec_from_args(args)
    lengths = parse_lengths(args.lengths)
    unknown = sorted(set(lengths) - set(spec.length_symbols))
    if unknown:
        raise SpecificationError(f"--lengths: {', '.join(unknown)} is not a length symbol "
                                 f"of {spec.subscripts}")
    if not lengths:
        return spec, None
    fixed = spec.with_lengths(lengths)
    return fixed, dict(canonical_lengths(fixed))


def run(args: argparse.Namespace) -> int:
    return _query(args) if args.command == "query" else _best(args)


def _in_your_names(spec: BatchedEinsum) -> Any:
    """Canonical lengths (``n0=2048``) -> text in the names of *spec* (``E=2048``)."""
    from feinsum.database.origins import einsum_origin, lengths_label
    from feinsum.errors import FeinsumError

    try:
        origin = einsum_origin(spec)
    except FeinsumError:  # a spec without a JSON form: the canonical names
        origin = None
    return lambda lengths: lengths_label(origin, lengths)


def _query(args: argparse.Namespace) -> int:
    from feinsum.cli.dbread import open_db, pick_device

    spec, lengths = _spec_and_lengths(args)
    names = _in_your_names(spec_from_args(args))
    with open_db(args.db) as db:
        device = pick_device(db, args.device)
        records = db.query(spec, device, recipe=args.recipe,
                           status=None if args.status == "all" else args.status,
                           lengths=lengths, limit=args.limit,
                           recipe_versions=_current(args) if args.current else None,
                           include_retired=args.retired)
    if args.json:
        emit_json([record_dict(r) for r in records])
        return 0 if records else nothing_found("query", "no record matches")
    from feinsum.spec.canonical import canonical_key

    print_table(
        f"{len(records)} records of {spec.subscripts} ({canonical_key(spec)})",
        ["record", "device", "lengths", "recipe", "status", "min ms", "median ms",
         "GFLOP/s", "configuration"],
        [[f"{r.source}#{r.id}", r.device_name, names(r.lengths), r.recipe_name,
          r.status + (" (retired)" if r.retired_at else ""), _ms(r.min_time),
          _ms(r.median_time), fmt_rate(r.gflops), params_text(r.params)] for r in records])
    return 0 if records else nothing_found("query", "no record matches")


def _current(args: argparse.Namespace) -> Any:
    from feinsum.tuning.codecheck import current_recipes

    return current_recipes(args.recipe_path)


def _ms(seconds: float | None) -> str:
    return fmt_float(None if seconds is None else seconds * 1e3, 4)


def _device_for_best(db: Any, text: str | None) -> Any:
    from feinsum.cli.dbread import devices

    if text is not None:
        known = [i for k, i in devices(db).items() if text.lower() in k.lower()]
        if len(known) == 1:
            return known[0]
    from feinsum.devices.opencl import device_info, get_device

    return device_info(get_device(text))


def _best(args: argparse.Namespace) -> int:
    from feinsum.cli.dbread import open_db
    from feinsum.spec.canonical import canonicalize

    spec, lengths = _spec_and_lengths(args)
    names = _in_your_names(spec_from_args(args))
    with open_db(args.db) as db:
        info = _device_for_best(db, args.device)
        answer = db.best(spec, info, lengths=lengths,
                         recipe_versions=None if args.any_version else _current(args))
    out: dict[str, Any] = {"einsum": str(spec), "canonical_key": answer.canonical_key,
                           "device": info.name, "rung": answer.rung,
                           "lengths": dict(answer.lengths), "distance": answer.distance,
                           "record": None if answer.record is None
                           else record_dict(answer.record), "default": None}
    if answer.is_default:
        from feinsum.hook.choice import default_choices
        from feinsum.recipes import recipes

        choices, why = default_choices(canonicalize(spec), info, recipes())
        out["default"] = ({"recipe": choices[0].recipe.name, "params": choices[0].params}
                          if choices else {"recipe": None, "why": why})
    if args.json:
        emit_json(out)
        return 0 if answer.record is not None else nothing_found("best", "no record")
    print(f"{spec.subscripts} on {info.name}: rung {answer.rung}")
    r = answer.record
    if r is not None:
        print(f"  record    {r.source}#{r.id} (uid {r.uid}), measured at "
              f"{names(r.lengths)}")
        print(f"  recipe    {r.recipe_name} {r.recipe_version}")
        print(f"  config    {params_text(r.params, 400)}")
        print(f"  speed     {_ms(r.min_time)} ms min (median {_ms(r.median_time)} ms), "
              f"{fmt_rate(r.gflops)} GFLOP/s")
    else:
        d = out["default"]
        if d["recipe"] is None:
            print(f"  no record and no applicable recipe: {d['why']}")
        else:
            print(f"  no record: the hook would apply {d['recipe']}'s default "
                  f"({params_text(d['params'], 400)})")
    return 0 if r is not None else nothing_found("best", "no record")
