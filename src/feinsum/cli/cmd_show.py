"""``feinsum show RECORD``: one record's recipe, parameters, timings and generated code."""

from __future__ import annotations

import argparse
from typing import Any

from feinsum.cli.common import (
    add_db_argument,
    add_json_argument,
    emit_json,
    fmt_float,
    fmt_rate,
    record_dict,
)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("record", metavar="RECORD",
                        help="a record id (12, user#12, shipped#3, as `feinsum query` shows "
                        "them) or uid")
    add_db_argument(parser)
    parser.add_argument("--no-code", action="store_true",
                        help="do not generate the OpenCL code")
    add_json_argument(parser)


def generated_code(db: Any, r: Any) -> tuple[str, str]:
    """(OpenCL code of the record's configuration on its canonical einsum, a note)."""
    import loopy as lp

    from feinsum.cli.dbread import devices, einsum_text
    from feinsum.errors import DatabaseError
    from feinsum.lowering import generate_loopy
    from feinsum.measurement import UNTRANSFORMED
    from feinsum.recipes import get_recipe
    from feinsum.serialize import spec_from_json

    found = einsum_text(db, r.canonical_key)
    if found is None:
        raise DatabaseError(f"the database holds no specification for {r.canonical_key}")
    spec = spec_from_json(found[1])
    t_unit = generate_loopy(spec)
    note = ""
    if r.recipe_name != UNTRANSFORMED:
        recipe = get_recipe(r.recipe_name)
        if recipe.version != r.recipe_version:
            note = (f"recorded with {r.recipe_name} {r.recipe_version}; this is the code of "
                    f"the current version {recipe.version}")
        info = devices(db).get(r.device_key)
        t_unit = recipe.apply(t_unit, r.params, spec, info)
    return lp.generate_code_v2(t_unit).device_code(), note


def run(args: argparse.Namespace) -> int:
    from feinsum.cli.common import einsum_label as short_label
    from feinsum.cli.dbread import einsum_origin_of, einsum_text, find_record, open_db
    from feinsum.database.origins import einsum_label, lengths_label

    with open_db(args.db) as db:
        r = find_record(db, args.record)
        text = einsum_text(db, r.canonical_key)
        origin = einsum_origin_of(db, r.canonical_key)
        code, note = (None, "") if args.no_code else generated_code(db, r)
    if args.json:
        d = record_dict(r)
        d.update(canonical_text=None if text is None else text[0], code=code, code_note=note)
        emit_json(d)
        return 0
    rows: list[tuple[str, Any]] = [
        ("record", f"{r.source}#{r.id}  (uid {r.uid})"),
        ("einsum", f"{einsum_label(origin, short_label(text, r.canonical_key))}  "
                   f"({r.canonical_key})"),
        ("canonical", "-" if text is None else text[0].replace("\n", "\n" + " " * 16)),
        ("lengths", lengths_label(origin, r.lengths)),
        ("device", f"{r.device_name} ({r.device_type}, {r.platform_name}, driver "
                   f"{r.driver_version})"),
        ("recipe", f"{r.recipe_name} {r.recipe_version}"),
        ("parameters", ", ".join(f"{k}={v}" for k, v in r.params.items()) or "-"),
        ("status", r.status + (f": {r.message}" if r.message else "")),
        ("median", "-" if r.median_time is None else f"{r.median_time * 1e3:.4g} ms"
         f" (min {fmt_float(None if r.min_time is None else r.min_time * 1e3, 4)} ms, "
         f"spread {fmt_float(r.spread)}, {r.sample_count} samples)"),
        ("GFLOP/s", fmt_rate(r.gflops)),
        ("flops/bytes", f"{fmt_float(r.flops)} / {fmt_float(r.bytes)}"),
        ("validation", fmt_float(r.validation_error)),
        ("measured", f"{r.measured_at:%Y-%m-%d %H:%M:%S} UTC on {r.host}"),
        ("versions", f"loopy {r.loopy_version}, pyopencl {r.pyopencl_version}, "
                     f"feinsum {r.feinsum_version}"),
    ]
    for k, v in rows:
        print(f"{k:<15} {v}")
    if code is not None:
        print()
        if note:
            print(f"// {note}")
        print(code)
    return 0
