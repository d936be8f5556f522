"""``feinsum match``: the einsums found in a loopy kernel, with their canonical keys, and the
precise reason each other statement does not match; with ``--program``, what the hook makes
of the whole program: its device kernels, launch grids and global temporaries, before and
after."""

from __future__ import annotations

import argparse
from typing import Any

from feinsum.cli.common import (
    add_db_argument,
    add_device_argument,
    add_json_argument,
    emit_json,
    nothing_found,
    print_table,
)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("kernel", metavar="FILE.py[:NAME]",
                        help="Python file building a loopy kernel or translation unit (NAME: "
                        "a module-level kernel or a function returning one)")
    parser.add_argument("--kernel-name", default=None,
                        help="only this kernel of the translation unit (default: every one)")
    parser.add_argument("--within", default=None, metavar="MATCH",
                        help='explain the statements a loopy match expression selects '
                        '(e.g. "id:lift*"): their einsum, or why they are not one')
    parser.add_argument("--as-hook", action="store_true",
                        help="match each kernel as the hook does: after the exact rewrites "
                        "of feinsum.matching.prepare_kernel (listed), which put what array "
                        "compilers emit into einsums")
    parser.add_argument("--program", action="store_true",
                        help="transform the whole program as the hook does (records of --db, "
                        "recipe defaults otherwise) and list its device kernels: launch grid "
                        "and the global temporaries each writes, against the untransformed "
                        "program's")
    add_db_argument(parser)
    add_device_argument(parser)
    add_json_argument(parser)


def _program(args: argparse.Namespace, t_unit: Any) -> int:
    """``--program``: the hook's report and the launches before and after."""
    from feinsum.hook.program import transform_program

    _, report = transform_program(t_unit, device=args.device,
                                  db=args.db if args.db is not None else None)
    if args.json:
        emit_json(report.as_dict())
        return 0
    print(report)
    return 0


def _why_not(t_unit: Any, kernel: str, insn: Any) -> str:
    from feinsum.errors import EinsumMatchError
    from feinsum.matching import match_einsum

    try:
        m = match_einsum(t_unit, within=f"id:{insn.id}", kernel_name=kernel)
    except EinsumMatchError as exc:
        return str(exc)
    except Exception as exc:  # statements the matcher cannot even describe (barriers...)
        return f"not an einsum statement ({type(insn).__name__}: {type(exc).__name__})"
    return f"not reported: {m.einsum} has no reduction and a single operand (elementwise)"


def run(args: argparse.Namespace) -> int:
    from feinsum.cli.specargs import load_kernel
    from feinsum.errors import EinsumMatchError
    from feinsum.hook.program import kernel_names
    from feinsum.matching import find_einsums, match_einsum

    t_unit = load_kernel(args.kernel)
    if args.program:
        return _program(args, t_unit)
    names = kernel_names(t_unit)
    rewrites: list[dict[str, Any]] = []
    if args.as_hook:
        from feinsum.matching import prepare_kernel

        for name in names:
            prepared = prepare_kernel(t_unit[name])
            t_unit = t_unit.with_kernel(prepared.kernel)
            rewrites.extend({"kernel": name, "rewrite": c} for c in prepared.changes)
    if args.kernel_name is not None:
        if args.kernel_name not in names:
            raise EinsumMatchError(f"no kernel {args.kernel_name!r} in {args.kernel} "
                                   f"(kernels: {', '.join(names)})")
        names = [args.kernel_name]
    found: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for name in names:
        if args.within is not None:
            m = match_einsum(t_unit, within=args.within, kernel_name=name)
            matches = [m]
        else:
            matches = find_einsums(t_unit, kernel_name=name)
        for m in matches:
            found.append({"kernel": name, "statements": list(m.all_insn_ids),
                          "outputs": [o for row in m.outputs for o in row],
                          "einsum": str(m.einsum), "subscripts": m.einsum.subscripts,
                          "lengths": {k: v for k, v in m.einsum.lengths.items()},
                          "canonical_key": m.canonical_key,
                          "canonical": str(m.canonical)})
        if args.within is None:
            used = {i for m in matches for i in m.all_insn_ids}
            for insn in t_unit[name].instructions:
                if insn.id not in used:
                    rejected.append({"kernel": name, "statement": insn.id,
                                     "reason": _why_not(t_unit, name, insn)})
    none = f"no einsum found in {args.kernel}"
    if args.json:
        emit_json({"file": args.kernel, "kernels": names, "einsums": found,
                   "not_matched": rejected, "rewrites": rewrites})
        return 0 if found else nothing_found("match", none)
    if rewrites:
        print("rewritten as the hook does before matching:")
        for r in rewrites:
            print(f"  {r['kernel']}: {r['rewrite']}")
    print_table(f"einsums in {args.kernel}", ["kernel", "statements", "einsum",
                                              "lengths", "canonical key"],
                [[f["kernel"], ", ".join(f["statements"]), f["subscripts"],
                  ", ".join(f"{k}={v}" for k, v in f["lengths"].items()), f["canonical_key"]]
                 for f in found])
    if rejected:
        print("statements that are not einsums:")
        for r in rejected:
            print(f"  {r['kernel']}:{r['statement']}: {r['reason']}")
    return 0 if found else nothing_found("match", none + (" (why not: above)" if rejected
                                                          else ""))
