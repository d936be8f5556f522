"""``feinsum cache``: the hook's persistent cache of transformed programs (``info``, ``clear``)."""

from __future__ import annotations

import argparse
from typing import Any

from feinsum.cli.common import add_json_argument, emit_json, nothing_found


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("action", choices=["info", "clear"],
                        help="info: where the cache is, its entries and bytes; clear: remove "
                        "every entry, and the lock files no process holds")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from feinsum.errors import FeinsumError
    from feinsum.hook.locks import remove_unheld
    from feinsum.hook.store import ENV_VAR, MAX_BYTES, ProgramCache, cache_directory

    directory = cache_directory()
    if directory is None:
        return nothing_found("cache", f"the cache of transformed programs is turned off "
                             f"({ENV_VAR}=none)")
    try:
        cache = ProgramCache(directory)
    except Exception as exc:  # an unwritable directory or a damaged file: say so, in a line
        raise FeinsumError(f"cannot open the cache in {directory}: {exc}; set {ENV_VAR} to a "
                           "writable directory (or remove the damaged file)") from exc
    info: dict[str, Any] = {"directory": str(directory), "file": str(cache.path),
                            "entries": len(cache), "bytes": cache.nbytes(),
                            "max_bytes": MAX_BYTES}
    if args.action == "clear":
        info["removed"] = cache.clear()
        info["entries"], info["bytes"] = len(cache), cache.nbytes()
        info["locks_removed"], info["locks_held"] = remove_unheld(directory / "locks")
    if args.json:
        emit_json(info)
        return 0
    if args.action == "clear":
        held = (f"; {info['locks_held']} held by a process transforming its program, kept"
                if info["locks_held"] else "")
        print(f"removed {info['removed']} transformed programs from {info['file']} and "
              f"{info['locks_removed']} lock files{held}")
    else:
        print(f"{info['file']}: {info['entries']} transformed programs, "
              f"{info['bytes'] / 2**20:.1f} MiB of at most {MAX_BYTES / 2**20:.0f} MiB")
    return 0
