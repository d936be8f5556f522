"""Fingerprints of generated code: what a timing is the timing of.

A record's fingerprint hashes what the OpenCL compiler was handed for its configuration:

* the **device source** loopy generated, normalised so that differences the compiler cannot
  see do not count: comments are removed, every run of blanks becomes one space, blank
  lines go, the conjuncts of an ``if`` condition are sorted (loopy joins the bounds checks
  of a guard in an order that depends on the process's hash seed), and the ``__kernel``
  functions are renamed ``_fk0``, ``_fk1``, ... in the order loopy emits them (a kernel's
  name is cosmetic: the hook renames kernels when it replays a record);
* the **build options**, as a set (``-D X`` and ``-DX`` alike; order and duplicates do not
  matter);
* the **launch geometry** of every device kernel (global and local sizes as expressions of
  the length arguments), which lives in loopy's host code, not in the device source;
* the **compiler**: the device's identity (vendor, name, OpenCL, driver and platform
  versions: :attr:`feinsum.devices.info.DeviceInfo.key`).

The code generator itself is not hashed: a new loopy that generates the same code keeps
the fingerprint (and the record), one that generates different code changes it.
:func:`loopy_version` names the generator a fingerprint is computed with.

Computing a fingerprint needs no device: only loopy's code generation runs
(:func:`code_fingerprint`). Nothing of the code is stored, only the digest.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.devices.opencl import DeviceInfo

#: The fingerprint scheme (normalisation and hashed fields); a prefix of every fingerprint,
#: so that fingerprints of another scheme are recognised as incomparable, not as different.
SCHEME = "c1"
#: Options whose argument may be given as the next word (``-D X`` is ``-DX``).
_JOINED_OPTIONS = ("-D", "-I", "-U")

_COMMENT_OR_LITERAL = re.compile(
    r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*', re.DOTALL
)


def _split_top(text: str, sep: str) -> list[str]:
    """*text* split at the occurrences of *sep* outside parentheses and brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i].strip())
            start = i = i + len(sep)
            continue
        i += 1
    parts.append(text[start:].strip())
    return parts


def _sort_conjunctions(line: str) -> str:
    """An ``if (a && b)`` line with its conjuncts in sorted order: loopy joins the bounds
    checks of a guard in an order that depends on the process's hash seed."""
    m = re.match(r"^(\s*(?:\} )?(?:else )?if \()(.*)(\))(\s*\{?)$", line)
    if m is None:
        return line
    head, cond, close, tail = m.groups()
    depth = 0
    for c in cond:  # the parenthesis closing "if (" must be the last one
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth < 0:
            return line
    parts = _split_top(cond, "&&")
    if len(parts) < 2:
        return line
    return head + " && ".join(sorted(parts)) + close + tail


def normalise_source(code: str, kernel_names: Sequence[str] = ()) -> str:
    """*code* without comments, with one space for every run of blanks and no blank
    lines, the conjuncts of every ``if`` condition sorted, the kernels *kernel_names*
    renamed ``_fk0``, ``_fk1``, ... (in that order); string and character literals are
    left as they are."""
    literals: list[str] = []

    def hide(m: re.Match[str]) -> str:
        text = m.group(0)
        if text[0] in "\"'":
            literals.append(text)
            return f"\0{len(literals) - 1}\0"
        return "\n" if "\n" in text else " "

    code = _COMMENT_OR_LITERAL.sub(hide, code)
    lines = (_sort_conjunctions(" ".join(line.split())) for line in code.splitlines())
    text = "\n".join(line for line in lines if line)
    for i, name in enumerate(kernel_names):
        text = re.sub(rf"\b{re.escape(name)}\b", f"_fk{i}", text)
    return re.sub(r"\0(\d+)\0", lambda m: literals[int(m.group(1))], text)


def normalise_build_options(options: Iterable[str] | None) -> tuple[str, ...]:
    """The build options as a sorted set of words (``-D X`` joined to ``-DX``)."""
    words: list[str] = []
    for opt in options or ():
        words.extend(shlex.split(str(opt)))
    out: set[str] = set()
    i = 0
    while i < len(words):
        w = words[i]
        if w in _JOINED_OPTIONS and i + 1 < len(words):
            out.add(w + words[i + 1])
            i += 2
            continue
        out.add(w)
        i += 1
    return tuple(sorted(out))


@functools.cache
def loopy_version() -> str:
    """The version of loopy, the code generator fingerprints are computed with."""
    from importlib import metadata

    try:
        return metadata.version("loopy")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class GeneratedCode:
    """What the OpenCL compiler is handed for one configuration, normalised."""

    source: str
    build_options: tuple[str, ...]
    #: (global size, local size) of every device kernel, as text
    launch: tuple[tuple[str, str], ...]

    def fingerprint(self, device: DeviceInfo) -> str:
        """``"c1-"`` and 40 hex digits of sha256 over the code and the compiler."""
        payload = json.dumps(
            {"scheme": SCHEME, "source": self.source, "build_options": self.build_options,
             "launch": self.launch, "compiler": device.key},
            sort_keys=True, separators=(",", ":"), ensure_ascii=True,
        )
        return f"{SCHEME}-{hashlib.sha256(payload.encode()).hexdigest()[:40]}"


def is_comparable(fingerprint: str | None) -> bool:
    """Whether *fingerprint* was computed with this scheme (else it cannot be compared)."""
    return fingerprint is not None and fingerprint.startswith(f"{SCHEME}-")


def scheduled(t_unit: lp.TranslationUnit) -> lp.TranslationUnit:
    """*t_unit* preprocessed, typed and linearized: what loopy generates code from (the
    steps ``loopy.generate_code_v2`` takes; done already by an executor's
    ``get_typed_and_scheduled_translation_unit``)."""
    from loopy.kernel import KernelState
    from loopy.preprocess import preprocess_program
    from loopy.schedule import linearize
    from loopy.type_inference import infer_unknown_types

    if t_unit.state < KernelState.PREPROCESSED:
        t_unit = preprocess_program(t_unit)
    t_unit = infer_unknown_types(t_unit, expect_completion=True)
    if t_unit.state < KernelState.LINEARIZED:
        t_unit = linearize(t_unit)
    return t_unit


def _expr_text(exprs: Iterable[Any]) -> str:
    return "(" + ",".join("".join(str(e).split()) for e in exprs) + ")"


def _launch(t_unit: lp.TranslationUnit) -> tuple[tuple[str, str], ...]:
    from loopy.schedule import CallKernel, get_insn_ids_for_block_at

    out = []
    for name in sorted(t_unit.entrypoints):
        knl = t_unit[name]
        lin = knl.linearization or []
        for i, item in enumerate(lin):
            if isinstance(item, CallKernel):
                gsize, lsize = knl.get_grid_sizes_for_insn_ids_as_exprs(
                    get_insn_ids_for_block_at(lin, i), t_unit.callables_table)
                out.append((_expr_text(gsize), _expr_text(lsize)))
    return tuple(out)


def generated_code(t_unit: lp.TranslationUnit) -> GeneratedCode:
    """Generate *t_unit*'s code (no device needed) and normalise it."""
    import loopy as lp

    ts = scheduled(t_unit)
    result = lp.generate_code_v2(ts)
    names = [p.name for p in result.device_programs]
    options: list[str] = []
    for name in sorted(ts.entrypoints):
        options.extend(ts[name].options.build_options or [])
    return GeneratedCode(
        source=normalise_source(result.device_code(), names),
        build_options=normalise_build_options(options),
        launch=_launch(ts),
    )


def code_fingerprint(t_unit: lp.TranslationUnit, device: DeviceInfo) -> str:
    """The fingerprint of *t_unit*'s generated code built for *device* (no device needed:
    code generation only)."""
    return generated_code(t_unit).fingerprint(device)
