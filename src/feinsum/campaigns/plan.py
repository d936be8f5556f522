"""A campaign's PLAN: one tuning job per line, each line the arguments of ``feinsum tune``.

::

    # the DG operators of the application, float64
    "xre,rij,xej->ei" -s x=3,r=3,i=35,j=35,e=E -l E=50000 --budget 32
    --kernel operators.py:face_mass -l nelements=50000 --device gpu
    "ij,ej->ei" -s i=35,j=35,e=E -l E=50000 --dtype float32 --no-peers

Lines are split like a shell does (quotes, backslashes); ``#`` starts a comment. A line
with ``--kernel FILE.py[:NAME]`` stands for every einsum of that kernel (the ``-l`` values
of the symbols each einsum has). ``--device`` names the devices a job runs on by part of
their name or by type (``cpu``, ``gpu``, ``accelerator``); without it, a job runs on every
distinct device in the cluster. The whole PLAN is checked before anything runs: a bad line
is a :class:`~feinsum.errors.PlanError` naming the line number and the problem.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from feinsum.errors import FeinsumError, PlanError

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.spec.model import BatchedEinsum

#: ``--device`` words that name a device type rather than part of a name.
DEVICE_TYPES = ("cpu", "gpu", "accelerator")
#: ``feinsum tune`` options that belong to the campaign, not to one of its lines.
_CAMPAIGN_OPTIONS = {"db": "--db", "no_db": "--no-db", "json": "--json", "quiet": "--quiet"}


@dataclass(frozen=True)
class Job:
    """One einsum of a PLAN line, at fixed lengths, with the line's tuning options."""

    line: int
    text: str
    einsum: BatchedEinsum
    lengths: dict[str, int]
    canonical_key: str
    device: str | None = None
    recipes: tuple[str, ...] | None = None
    recipe_path: tuple[str, ...] | None = None
    strategy: str = "auto"
    budget: int | None = None
    time_limit: float | None = None
    seed: int = 0
    workers: int | None = None
    peers: bool = True
    baseline: bool = True

    def __post_init__(self) -> None:
        from feinsum import checks

        checks.optional_count("budget", self.budget)
        checks.optional_seconds("time_limit", self.time_limit)
        checks.processes("workers", self.workers)
        checks.seed("seed", self.seed)
        checks.lengths("lengths", self.lengths)

    @property
    def label(self) -> str:
        lens = " ".join(f"{k}={v}" for k, v in self.lengths.items())
        return f"{self.einsum.subscripts}" + (f" {lens}" if lens else "")

    def runs_on(self, info: DeviceInfo) -> bool:
        """Whether the line's ``--device`` (if any) names *info*."""
        if self.device is None:
            return True
        want = self.device.lower()
        if want in DEVICE_TYPES:
            return info.device_type.lower() == want
        return want in info.name.lower() or want in info.key.lower()

    def tune_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`feinsum.autotune` for this job."""
        return {
            "recipes": None if self.recipes is None else list(self.recipes),
            "recipe_path": None if self.recipe_path is None else list(self.recipe_path),
            "strategy": self.strategy, "budget": self.budget, "time_limit": self.time_limit,
            "seed": self.seed, "workers": self.workers, "peers": self.peers,
            "baseline": self.baseline, "lengths": dict(self.lengths) or None,
        }

    def _options_key(self) -> tuple[Any, ...]:
        return (self.device, self.recipes, self.recipe_path, self.strategy, self.budget,
                self.time_limit, self.seed, self.peers, self.baseline)


@dataclass(frozen=True)
class Plan:
    """The jobs of a PLAN, in order; *merged*: (line, earlier line) of einsums that a line
    repeats with the same options, tuned once."""

    jobs: tuple[Job, ...]
    source: str = "PLAN"
    merged: tuple[tuple[int, int], ...] = field(default=())


class _LineParser(argparse.ArgumentParser):
    """The ``feinsum tune`` parser, raising instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise _LineError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise _LineError(message.strip() if message else "options that print and exit "
                         "(--help) are not tuning options")


class _LineError(Exception):
    pass


def _tune_parser() -> argparse.ArgumentParser:
    from feinsum.cli import cmd_tune

    parser = _LineParser(prog="PLAN line", add_help=False)
    cmd_tune.configure(parser, "tune")
    return parser


def read_plan(path: str | os.PathLike[str], *, budget: int | None = None) -> Plan:
    """Read and check the PLAN file *path*; *budget*: that of lines that give none."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise PlanError(f"cannot read the PLAN {str(p)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PlanError(f"the PLAN {str(p)!r} is not a text file") from None
    return parse_plan(text, source=str(p), budget=budget)


def parse_plan(text: str, *, source: str = "PLAN", budget: int | None = None) -> Plan:
    """Check the PLAN *text* completely (every line) and return its jobs."""
    from feinsum import checks

    budget = checks.optional_count("budget", budget)
    parser = _tune_parser()
    jobs: list[Job] = []
    merged: list[tuple[int, int]] = []
    seen: dict[tuple[str, str], Job] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{source}, line {number}"
        try:
            words = shlex.split(raw, comments=True)
        except ValueError as exc:
            raise PlanError(f"{where}: {exc} in {raw.strip()!r}") from None
        if not words:
            continue
        try:
            line_jobs = _line_jobs(parser, words, number, raw.strip(), budget)
        except _LineError as exc:
            raise PlanError(f"{where}: {exc} (in {raw.strip()!r})") from None
        except FeinsumError as exc:
            raise PlanError(f"{where}: {exc}") from None
        for job in line_jobs:
            from feinsum.database import lengths_key

            key = (job.canonical_key, lengths_key(job.lengths))
            first = seen.get(key)
            if first is None:
                seen[key] = job
                jobs.append(job)
            elif first._options_key() == job._options_key():
                merged.append((job.line, first.line))
            else:
                raise PlanError(
                    f"{where}: {job.label} is the einsum of line {first.line} at the same "
                    "lengths, with other options; tune it once (remove one of them, or give "
                    "both the same options)")
    if not jobs:
        raise PlanError(f"{source} holds no job: write one `feinsum tune` argument list per "
                        "line (e.g. \"ij,j->i\" -s i=64,j=64)")
    return Plan(tuple(jobs), source, tuple(merged))


def _line_jobs(parser: argparse.ArgumentParser, words: Sequence[str], number: int,
               text: str, budget: int | None) -> list[Job]:
    from feinsum.cli.cmd_tune import check_lengths
    from feinsum.cli.specargs import parse_lengths, spec_from_args
    from feinsum.recipes import get_recipe

    args = parser.parse_args(list(words))
    for attr, option in _CAMPAIGN_OPTIONS.items():
        if getattr(args, attr, None):
            raise _LineError(f"{option} belongs on the `feinsum campaign` command line, not "
                             "in a PLAN line")
    device = args.device
    if device is not None and not device.strip(": "):
        raise _LineError("--device needs a name")
    if device is not None and all(c.isdigit() or c == ":" for c in device):
        raise _LineError(f"--device {device}: indices differ from machine to machine; "
                         f"name the device (part of its name, or one of "
                         f"{', '.join(DEVICE_TYPES)})")
    for name in args.recipe or ():
        get_recipe(name, args.recipe_path)  # RecipeError names the recipes there are
    lengths = parse_lengths(args.lengths)
    if args.kernel:
        if args.subscripts:
            raise _LineError("give SUBSCRIPTS or --kernel, not both")
        einsums = _kernel_einsums(args.kernel)
        unused = set(lengths) - {s for e in einsums for s in e.length_symbols}
        if unused:
            raise _LineError(f"--lengths: {', '.join(sorted(unused))} is a length symbol of "
                             f"no einsum of {args.kernel}")
        fixed = [check_lengths(e, lengths, every=False) for e in einsums]
    else:
        einsums = [spec_from_args(args)]
        fixed = [check_lengths(einsums[0], lengths)]
    from feinsum.timing.measurement import Target

    options = {
        "device": device, "strategy": args.strategy, "time_limit": args.time_limit,
        "budget": args.budget if args.budget is not None else budget, "seed": args.seed,
        "workers": args.workers, "peers": not args.no_peers, "baseline": not args.no_baseline,
        "recipes": None if args.recipe is None else tuple(args.recipe),
        "recipe_path": None if args.recipe_path is None else tuple(args.recipe_path),
    }
    jobs = []
    for e, lens in zip(einsums, fixed, strict=True):
        key = Target.make(e, lens).key  # canonicalises: a TuningError for what cannot be timed
        jobs.append(Job(line=number, text=text, einsum=e, lengths=lens, canonical_key=key,
                        **options))
    return jobs


def _kernel_einsums(path_spec: str) -> list[BatchedEinsum]:
    from feinsum.cli.specargs import load_kernel
    from feinsum.matching import find_einsums

    found = [m.einsum for m in find_einsums(load_kernel(path_spec))]
    if not found:
        raise _LineError(f"{path_spec} holds no einsum (`feinsum match {path_spec}` says why)")
    return found
