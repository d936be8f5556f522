"""``feinsum tune``: autotune an einsum given on the command line or found in a kernel file."""

from __future__ import annotations

import argparse
from typing import Any

from feinsum.checks import count_type, processes_type, seconds_type, seed_type
from feinsum.cli.common import (
    add_db_argument,
    add_device_argument,
    add_json_argument,
    emit_json,
)
from feinsum.cli.predicted import add_model_argument
from feinsum.cli.specargs import add_spec_arguments, parse_lengths, spec_from_args

STRATEGIES = ("auto", "predicted", "exhaustive", "random", "model")


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    parser.epilog = ('example: feinsum tune "xre,rij,xej->ei" -s x=3,r=3,i=35,j=35,e=E '
                     "-l E=2048 --budget 16")
    add_spec_arguments(parser, kernel=True)
    add_device_argument(parser)
    add_db_argument(parser)
    g = parser.add_argument_group("search")
    g.add_argument("--recipe", action="append", default=None, metavar="NAME",
                   help="consider only this recipe (repeatable; default: every applicable one)")
    g.add_argument("--recipe-path", action="append", default=None, metavar="DIR",
                   help="extra directory of recipe files (repeatable)")
    g.add_argument("--strategy", choices=STRATEGIES, default="auto",
                   help="search strategy (auto: the performance model's order on a GPU it "
                   "describes, else exhaustive for small spaces and model-based for others)")
    g.add_argument("--budget", type=count_type(), default=None, metavar="N",
                   help="configurations to evaluate in all, records already in the database "
                   "included (default: the autotuner's, 100)")
    g.add_argument("--time-limit", type=seconds_type(), default=None, metavar="SECONDS",
                   help="start no new configuration after this many seconds")
    g.add_argument("--seed", type=seed_type(), default=0,
                   metavar="N", help="random seed of the strategies")
    g.add_argument("--workers", type=processes_type(), default=None, metavar="N",
                   help="parallel build workers (default: the CPU count, at most 4)")
    g.add_argument("--no-peers", action="store_true",
                   help="do not time numpy/opt_einsum/torch for comparison")
    g.add_argument("--no-baseline", action="store_true",
                   help="do not time the untransformed kernel")
    g.add_argument("--no-db", action="store_true",
                   help="record nothing (no resume; the database is not opened)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bar; print only the final table")
    g = parser.add_argument_group("prediction")
    g.add_argument("--dry-run", action="store_true",
                   help="measure nothing: print the configurations the tuner would measure "
                   "first, in the performance model's order, with their predicted times")
    add_model_argument(g)  # type: ignore[arg-type]
    g.add_argument("--show", type=count_type(), default=4, metavar="N",
                   help="with --dry-run: candidates shown per recipe (default 4)")
    add_json_argument(parser)


def _measurement(m: Any) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"recipe": m.recipe_name, "recipe_version": m.recipe_version,
            "params": m.params, "status": m.status, "seconds": m.seconds, "gflops": m.gflops,
            "roofline_fraction": m.roofline_fraction}


def check_lengths(spec: Any, lengths: dict[str, int], *, every: bool = True) -> dict[str, int]:
    """The values of *spec*'s length symbols in *lengths* (``-l``): one for each symbol is
    needed; *every*: a value for a symbol *spec* lacks is an error too."""
    from feinsum.errors import SpecificationError

    symbols = set(spec.length_symbols)
    unknown = sorted(set(lengths) - symbols)
    if unknown and every:
        raise SpecificationError(
            f"--lengths: {', '.join(unknown)} is not a length symbol of {spec.subscripts} "
            f"(symbols: {', '.join(sorted(symbols)) or 'none'})")
    missing = sorted(symbols - set(lengths))
    if missing:
        raise SpecificationError(f"tuning needs a value for every length symbol: add "
                                 f"{' '.join(f'-l {s}=...' for s in missing)}")
    return {k: v for k, v in lengths.items() if k in symbols}


def run(args: argparse.Namespace) -> int:
    from feinsum.cli.specargs import load_kernel_match
    from feinsum.errors import TuningError

    found = load_kernel_match(args.kernel) if args.kernel else None
    spec = found.einsum if found is not None else spec_from_args(args)
    lengths = check_lengths(spec, parse_lengths(args.lengths))
    if args.dry_run:
        from feinsum.cli.predicted import dry_run

        return dry_run(args, spec, lengths)
    if args.model:
        from feinsum.errors import SpecificationError

        raise SpecificationError("--model predicts, it does not tune: add --dry-run (tuning "
                                 "measures on a real --device)")

    from feinsum.devices.opencl import get_device

    device = get_device(args.device)
    db: Any = False
    if not args.no_db:
        from feinsum.cli.dbread import open_db

        db = open_db(args.db, write=True)
    from feinsum.database import einsum_origin
    from feinsum.tuning import autotune

    # recorded with the einsum: the user's subscripts and symbols, or the kernel's statements
    origin = einsum_origin(spec, lengths, kernel=None if found is None else found.kernel_name,
                           statements=() if found is None else found.all_insn_ids,
                           file=args.kernel)
    progress = not (args.json or args.quiet)
    result = autotune(
        spec, device=device, db=db, recipes=args.recipe, strategy=args.strategy,
        budget=args.budget, time_limit=args.time_limit, lengths=lengths or None,
        seed=args.seed, progress=progress, recipe_path=args.recipe_path,
        workers=args.workers, peers=not args.no_peers, baseline=not args.no_baseline,
        origin=origin)
    if args.json:
        emit_json({
            "einsum": str(spec), "canonical_key": result.canonical_key,
            "device": result.device_name, "lengths": result.lengths, "flops": result.flops,
            "database": None if db is False else db.where,
            "best": _measurement(result.best),
            "best_per_recipe": {k: _measurement(v) for k, v in result.best_per_recipe.items()},
            "untransformed": _measurement(result.baseline), "peers": result.peers,
            "speedup_over_untransformed": result.speedup_over_untransformed,
            "speedup_over_peer": result.speedup_over_peer,
            "evaluated": len(result.measurements), "previous": result.previous,
            "failures": result.failures, "recipes": result.recipe_stats,
            "seconds": result.elapsed,
        })
    elif args.quiet:
        print(str(result), end="")
    if result.best is None:
        raise TuningError(f"no configuration of {spec.subscripts} ran successfully "
                          f"({', '.join(f'{k}: {v}' for k, v in result.failures.items())}); "
                          "try more --budget or other --recipe")
    return 0
