"""Lazy revalidation: a query given a :class:`~feinsum.database.revalidation.CodeChecker`
as ``recipe_versions`` checks the records it is about to answer with.

A record of another version of a current recipe (or one whose code an older loopy
generated) that carries a fingerprint is a candidate: before it is returned its code is
generated again (:mod:`feinsum.database.revalidation`), then it is returned under the
current version (same code) or left out and retired (changed code). Only the records a
query would return are checked: :func:`checked_best` checks its best candidate, and the
next best while that one is retired. Verdicts are written back to the user's database
when it is writable, kept in a file beside the shipped records' cached SQLite file for
those (:mod:`.kept_verdicts`: every later process reads them), and in memory for the
process otherwise (read-only databases, shipped records in memory): each record is checked
once per (recipe version, loopy version).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from feinsum.errors import DatabaseError

from .revalidation import CodeChecker, Mode, Verdict, decide, plan, write_verdicts
from .statements import Filters

if TYPE_CHECKING:
    from .records import Answer, Record
    from .store import Store


class Overlay:
    """The verdicts of one :class:`~feinsum.database.Database`, in memory, by (uid, recipe
    version, loopy version)."""

    def __init__(self) -> None:
        self._verdicts: dict[tuple[str, str, str], Verdict] = {}
        self._lock = threading.Lock()
        #: where the shipped records' verdicts are kept across processes (None: nowhere)
        self._kept: Path | None = None

    def keep_in(self, path: Path | None) -> None:
        """Read the verdicts kept in *path* (:mod:`.kept_verdicts`), and keep those
        :meth:`add` is told to keep there."""
        if path is None:
            return
        from .kept_verdicts import load

        found = load(path)
        with self._lock:
            self._kept = path
            for key, v in found.items():
                self._verdicts.setdefault(key, v)

    def add(self, verdicts: Sequence[Verdict], checker: CodeChecker, keep: bool = False
            ) -> None:
        """Remember *verdicts*; *keep*: also in the file of :meth:`keep_in`."""
        mine = []
        with self._lock:
            for v in verdicts:
                version = checker.versions.get(v.recipe_name, v.recipe_version)
                key = (v.uid, version, checker.loopy_version)
                self._verdicts[key] = v
                mine.append((key, v))
            path = self._kept
        if keep and path is not None:
            from .kept_verdicts import save

            save(path, mine)

    def get(self, r: Record, checker: CodeChecker) -> Verdict | None:
        version = checker.versions.get(r.recipe_name)
        if version is None:
            return None
        return self._verdicts.get((r.uid, version, checker.loopy_version))

    def filters(self, base: Filters, checker: CodeChecker) -> Filters:
        """*base* with the records known kept taken as current and the others left out."""
        loopy = checker.loopy_version
        kept, dropped = set(), set()
        with self._lock:
            for (uid, version, lv), v in self._verdicts.items():
                if lv != loopy or checker.versions.get(v.recipe_name) != version:
                    continue
                if v.action in ("kept", "current", "fingerprinted"):
                    kept.add(uid)
                else:
                    dropped.add(uid)
        return dataclasses.replace(base, kept=frozenset(kept), dropped=frozenset(dropped))


class Database(Protocol):
    """What lazy revalidation uses of a :class:`feinsum.database.Database`."""

    overlay: Overlay
    readonly: bool

    @property
    def user_store(self) -> Store: ...

    @property
    def shipped_store(self) -> Store | None: ...


def candidates(base: Filters, checker: CodeChecker) -> Filters:
    """*base* restricted to the checker's recipes, widened to their other fingerprinted
    versions (the candidates of a revalidation)."""
    return dataclasses.replace(base, recipe_versions=dict(checker.versions),
                               fingerprinted=True)


def _resolve(db: Database, records: Sequence[Record], checker: CodeChecker) -> None:
    """Decide *records* (of any store of *db*) and remember the verdicts; write them back
    to the user's database when it is writable."""
    for source in sorted({r.source for r in records}):
        mine = [r for r in records if r.source == source]
        store = db.user_store if source == "user" else db.shipped_store
        if store is None:  # pragma: no cover - a shipped record comes from the shipped store
            raise DatabaseError(f"no store holds the {source} records")
        verdicts = decide(store, mine, checker)
        db.overlay.add(verdicts, checker, keep=source == "shipped")
        if source == "user" and not db.readonly:
            # failing that, the verdicts stand in memory; `feinsum db revalidate` writes them
            with contextlib.suppress(DatabaseError):
                write_verdicts(store, verdicts, {r.uid: r for r in mine})


def _usable(db: Database, r: Record, checker: CodeChecker) -> Record | Literal[False] | None:
    """*r* as it may be returned (under the current version), False if it must be left
    out, None if its code must be checked first."""
    known = db.overlay.get(r, checker)
    if known is not None:
        if known.action in ("kept", "current", "fingerprinted"):
            return dataclasses.replace(r, recipe_version=known.recipe_version,
                                       code_loopy_version=known.loopy_version or None)
        return False
    v = plan(r, checker, Mode())
    if v is None:
        return None
    return r if v.action == "current" else False


def checked_query(db: Database, checker: CodeChecker, base: Filters,
                  run: Callable[[Filters], list[Record]]) -> list[Record]:
    """``run(filters)`` (a query), its candidates checked first."""
    base = candidates(base, checker)
    while True:
        records = run(db.overlay.filters(base, checker))
        out: list[Record] = []
        todo: list[Record] = []
        left: list[Record] = []
        for r in records:
            u = _usable(db, r, checker)
            if u is None:
                todo.append(r)
            elif u is False:
                left.append(r)
            else:
                out.append(u)
        if not todo and not left:
            return out
        _drop(db, left, checker)
        if todo:
            _resolve(db, todo, checker)


def checked_best(db: Database, checker: CodeChecker, base: Filters,
                 run: Callable[[Filters], Answer]) -> Answer:
    """``run(filters)`` (a best), checking its record until one stands."""
    base = candidates(base, checker)
    while True:
        answer = run(db.overlay.filters(base, checker))
        r = answer.record
        if r is None:
            return answer
        u = _usable(db, r, checker)
        if u is None:
            _resolve(db, [r], checker)
        elif u is False:
            _drop(db, [r], checker)
        else:
            return dataclasses.replace(answer, record=u)


def _drop(db: Database, records: Sequence[Record], checker: CodeChecker) -> None:
    """Leave *records* out of this process's answers (not retired: they could not be
    compared)."""
    db.overlay.add([Verdict(r.uid, "unverifiable", recipe_name=r.recipe_name,
                            recipe_version=r.recipe_version) for r in records], checker)
