"""Where an einsum was first recorded from, and labels in the user's words.

The database keys records by the canonical einsum (``ab,cb->ca``, symbols ``n0, n1``), which
the user never wrote. Beside it (``einsums.origin_json``, schema revision 0005) it keeps the
spec as first recorded: the user's subscripts and spec, their name of every canonical length
symbol (``{"n0": "E"}``) and, for an einsum found in a loopy kernel, the kernel and
statements. :func:`einsum_label` and :func:`lengths_label` turn it back into text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feinsum.spec.model import BatchedEinsum

#: The version of the origin's JSON layout.
ORIGIN_VERSION = 1


def einsum_origin(einsum: BatchedEinsum, lengths: Mapping[str, int] | None = None, *,
                  kernel: str | None = None, statements: Sequence[str] = (),
                  file: str | None = None) -> dict[str, Any]:
    """The origin of *einsum* as the user gave it (its length symbols free, *lengths* their
    values where it was measured), found in *kernel*'s *statements* if given, of the kernel
    file *file* (``FILE.py[:NAME]``, as ``--kernel`` names it) if given."""
    from feinsum.errors import FeinsumError
    from feinsum.spec.canonical import canonical_lengths, canonicalize, isomorphism
    from feinsum.spec.serialize import spec_to_json

    fixed = einsum.with_lengths(dict(lengths)) if lengths else einsum
    symbols: dict[str, str] = {}
    try:
        canon = canonicalize(fixed)
        iso = isomorphism(canon.with_lengths(canonical_lengths(fixed)), fixed)
    except FeinsumError:  # no renaming: the labels fall back to the canonical symbols
        iso = None
    if iso is not None:
        for index, n in canon.lengths.items():
            if isinstance(n, str) and n not in symbols and index in iso.indices:
                mine = iso.indices[index]
                given = einsum.lengths.get(mine)
                symbols[n] = given if isinstance(given, str) else mine
    out: dict[str, Any] = {
        "version": ORIGIN_VERSION, "subscripts": einsum.subscripts, "nrows": einsum.nrows,
        "reduction": einsum.reduction, "symbols": symbols, "spec": spec_to_json(einsum),
    }
    if kernel is not None:
        out["kernel"] = kernel
        out["statements"] = list(statements)
    if file is not None:
        out["file"] = file
    return out


def parse_origin(text: str | None) -> dict[str, Any] | None:
    """A stored origin (None for none, or for one this feinsum cannot read)."""
    if not text:
        return None
    try:
        d = json.loads(text)
    except ValueError:
        return None
    if not isinstance(d, dict) or not isinstance(d.get("subscripts"), str):
        return None
    return d


def einsum_label(origin: Mapping[str, Any] | None, fallback: str) -> str:
    """``"xre,rij,xej->ei x4"`` (rows, a reduction other than sum), preceded for an einsum
    found in a kernel by the kernel file as the user named it (``workloads.py:gaussian``),
    else by ``kernel:statement``; *fallback* without an origin."""
    if origin is None:
        return fallback
    text = str(origin["subscripts"])
    nrows = origin.get("nrows", 1)
    if isinstance(nrows, int) and nrows > 1:
        text += f" x{nrows}"
    if origin.get("reduction", "sum") != "sum":
        text += f" {origin['reduction']}"
    kernel, file = origin.get("kernel"), origin.get("file")
    if isinstance(file, str):
        text = f"{file.replace(chr(92), '/').rsplit('/', 1)[-1]} {text}"
    elif isinstance(kernel, str):
        statements = origin.get("statements") or []
        text = f"{kernel}:{'+'.join(map(str, statements))} {text}"
    return text


def lengths_label(origin: Mapping[str, Any] | None, lengths: Mapping[str, int]) -> str:
    """Canonical lengths (``{"n0": 50000}``) in the user's names (``"E=50000"``)."""
    symbols = (origin or {}).get("symbols") or {}
    return ", ".join(f"{symbols.get(k, k)}={v}" for k, v in lengths.items()) or "-"
