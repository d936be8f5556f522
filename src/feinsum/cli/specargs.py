"""Building a specification from command-line arguments or from a kernel file."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from feinsum.checks import MAX_ROWS, count_type
from feinsum.errors import FeinsumError, SpecificationError

if TYPE_CHECKING:
    from feinsum.spec.model import BatchedEinsum


_INTEGER = re.compile(r"\s*[+-]?\d+\s*")


class KernelFileError(FeinsumError):
    """A kernel file could not be loaded or holds no loopy kernel."""


def add_spec_arguments(parser: argparse.ArgumentParser, *, kernel: bool = False) -> None:
    """Arguments that describe an einsum: subscripts, index lengths, dtypes, orders, batch."""
    parser.add_argument("subscripts", nargs="?", help='einsum subscripts, e.g. "xre,rij,xej->ei"')
    parser.add_argument(
        "-s", "--size", action="append", default=[], metavar="INDEX=LENGTH[,...]",
        type=_size_items,
        help="length of each index: an integer, or a symbol name for a long axis "
        "(e.g. -s x=3,r=3,i=35,j=35,e=E)",
    )
    parser.add_argument("--dtype", default="float64",
                        help="dtype of every operand, or a comma list, one per operand")
    parser.add_argument("--order", default="C", help="memory order C/F, or a comma list")
    parser.add_argument("--reduction", default="sum",
                        choices=["sum", "min", "max", "argmin", "argmax", "logsumexp"])
    parser.add_argument("--rows", type=count_type(maximum=MAX_ROWS), default=1, metavar="N",
                        help="batch this many outputs sharing the expression")
    parser.add_argument("--vary", default="",
                        help="comma list of operand positions that differ per row "
                        "(default with --rows: the last operand)")
    parser.add_argument("-l", "--lengths", action="append", default=[], metavar="SYMBOL=N",
                        type=_length_items,
                        help="values of length symbols to tune/measure at (e.g. -l E=50000)")
    if kernel:
        parser.add_argument("--kernel", metavar="FILE.py[:NAME]",
                            help="take the einsum from a loopy kernel built by a Python file")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            key, eq, value = part.partition("=")
            if not eq or not key or not value:
                raise SpecificationError(f"{what}: expected NAME=VALUE, got {part!r}")
            out[key.strip()] = value.strip()
    return out


def _length_problem(key: str, value: str) -> str | None:
    from feinsum.checks import MAX_LENGTH, count_problem

    problem = count_problem(value, maximum=MAX_LENGTH)
    return None if problem is None else f"{key} {problem}"


def _checked_pairs(text: str, what: str, integers_only: bool) -> str:
    """*text* (``NAME=VALUE[,...]``) if every value is a length (or, unless
    *integers_only*, a symbol name); else the problem, for argparse."""
    try:
        pairs = _pairs([text], what)
    except SpecificationError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{what}: ")) from None
    for k, v in pairs.items():
        if integers_only or _INTEGER.fullmatch(v):
            problem = _length_problem(k, v)
            if problem is not None:
                raise argparse.ArgumentTypeError(problem)
    return text


def _length_items(text: str) -> str:
    return _checked_pairs(text, "--lengths", integers_only=True)


def _size_items(text: str) -> str:
    return _checked_pairs(text, "--size", integers_only=False)


def parse_lengths(items: list[str]) -> dict[str, int]:
    """``-l E=50000`` -> {"E": 50000} (each 1 to ``checks.MAX_LENGTH``)."""
    out = {}
    for k, v in _pairs(items, "--lengths").items():
        problem = _length_problem(k, v)
        if problem is not None:
            from feinsum.errors import ArgumentError

            raise ArgumentError(f"--lengths: {problem}")
        out[k] = int(v)
    return out


def spec_from_args(args: argparse.Namespace) -> BatchedEinsum:
    """The spec described by SUBSCRIPTS and the size/dtype/order/batch options."""
    if getattr(args, "kernel", None):
        return load_kernel_spec(args.kernel)
    return _spec_from_subscripts(args)


def _spec_from_subscripts(args: argparse.Namespace) -> BatchedEinsum:
    import feinsum
    from feinsum.spec.builders import parse_subscripts

    if not args.subscripts:
        raise SpecificationError("give einsum SUBSCRIPTS (e.g. \"ij,ej->ei\") or --kernel FILE.py")
    nops = args.subscripts.split("->")[0].count(",") + 1
    in_indices, _ = parse_subscripts(args.subscripts, nops)
    sizes: dict[str, int | str] = {}
    for k, v in _pairs(args.size, "--size").items():
        sizes[k] = int(v) if _INTEGER.fullmatch(v) else v
    missing = sorted({i for idx in in_indices for i in idx} - set(sizes))
    if missing:
        raise SpecificationError(
            f"no length for index {', '.join(missing)}: add e.g. -s {missing[0]}=16"
        )
    dtypes = args.dtype.split(",")
    orders = args.order.split(",")
    for what, vals in (("--dtype", dtypes), ("--order", orders)):
        if len(vals) not in (1, nops):
            raise SpecificationError(f"{what}: give one value or {nops} (one per operand)")
    words = [v.strip() for v in args.vary.split(",") if v.strip()]
    if any(not _INTEGER.fullmatch(v) or not 0 <= int(v) < nops for v in words):
        raise SpecificationError(f"--vary {args.vary!r}: operand positions go from 0 to "
                                 f"{nops - 1}")
    vary = {int(v) for v in words} if words else ({nops - 1} if args.rows > 1 else set())
    rows = []
    for r in range(args.rows):
        row = []
        for c, idx in enumerate(in_indices):
            name = f"op{c}_r{r}" if c in vary else f"op{c}"
            order = orders[c if len(orders) > 1 else 0].upper()
            if order not in ("C", "F"):
                raise SpecificationError(f"--order: {order!r} is neither C nor F")
            row.append(feinsum.array(
                name, tuple(sizes[i] for i in idx), dtypes[c if len(dtypes) > 1 else 0],
                order=order))  # type: ignore[arg-type]
        rows.append(row)
    return feinsum.batched_einsum(args.subscripts, rows, reduction=args.reduction)


def load_kernel(path_spec: str) -> Any:
    """Run a Python file and return the loopy TranslationUnit it builds.

    ``FILE.py:NAME`` names a module-level TranslationUnit/LoopKernel or a function returning
    one; without NAME the file must define exactly one.
    """
    import runpy

    import loopy as lp

    path, _, name = path_spec.partition(":")
    if not Path(path).is_file():
        raise KernelFileError(f"kernel file {path!r} does not exist")
    try:
        namespace = runpy.run_path(path, run_name="__feinsum_kernel__")
    except Exception as exc:
        raise KernelFileError(
            f"kernel file {path!r} raised {type(exc).__name__}: {exc}"
        ) from exc

    def as_t_unit(obj: Any, label: str) -> Any:
        if isinstance(obj, lp.LoopKernel):
            return lp.make_program(obj)
        if isinstance(obj, lp.TranslationUnit):
            return obj
        raise KernelFileError(f"{path}:{label} is a {type(obj).__name__}, not a loopy kernel")

    if name:
        if name not in namespace:
            raise KernelFileError(f"kernel file {path!r} defines no {name!r}")
        obj = namespace[name]
        if callable(obj) and not isinstance(obj, (lp.LoopKernel, lp.TranslationUnit)):
            try:
                obj = obj()
            except Exception as exc:
                raise KernelFileError(
                    f"{path}:{name}() raised {type(exc).__name__}: {exc}") from exc
        return as_t_unit(obj, name)
    found = {k: v for k, v in namespace.items()
             if isinstance(v, (lp.LoopKernel, lp.TranslationUnit)) and not k.startswith("_")}
    if len(found) != 1:
        listed = ", ".join(sorted(found)) or "none"
        raise KernelFileError(
            f"kernel file {path!r} defines {len(found)} loopy kernels ({listed}); "
            "name one as FILE.py:NAME"
        )
    (label, obj), = found.items()
    return as_t_unit(obj, label)


def load_kernel_match(path_spec: str) -> Any:
    """The single einsum match found in a kernel file (an error lists what was found
    otherwise)."""
    from feinsum.matching import find_einsums

    t_unit = load_kernel(path_spec)
    matches = find_einsums(t_unit)
    if len(matches) != 1:
        raise KernelFileError(
            f"{path_spec}: found {len(matches)} einsums; `feinsum match {path_spec}` lists them"
        )
    return matches[0]


def load_kernel_spec(path_spec: str) -> BatchedEinsum:
    """The single einsum found in a kernel file (an error lists what was found otherwise)."""
    return load_kernel_match(path_spec).einsum  # type: ignore[no-any-return]
