"""Pruning: the WHERE clauses that select stale measurements (old, measured with older
libraries or other recipe versions, retired) for :meth:`feinsum.database.Database.prune`."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from feinsum.errors import DatabaseError

from .models import Measurement as M
from .models import Recipe as R
from .store import Store


def version_tuple(v: str) -> tuple[Any, ...]:
    """A sortable form of a version string ("2025.2.1" > "2025.2" > "2024.10rc1")."""
    parts: list[Any] = []
    for tok in re.findall(r"\d+|[A-Za-z]+", v):
        parts.append((1, int(tok), "") if tok.isdigit() else (0, 0, tok.lower()))
    return tuple(parts)


def prune_conditions(
    store: Store,
    *,
    older_than: _dt.timedelta | _dt.datetime | None = None,
    loopy_below: str | None = None,
    pyopencl_below: str | None = None,
    feinsum_below: str | None = None,
    recipe_versions: Mapping[str, str] | None = None,
    retired: bool = False,
    status: str | Sequence[str] | None = None,
) -> list[sa.ColumnElement[bool]]:
    """WHERE clauses selecting stale measurements: any of the criteria (measured before a
    time, with a library older than a version, with a recipe version other than the
    current one, retired), restricted to *status* if given."""
    stale: list[sa.ColumnElement[bool]] = []
    if isinstance(older_than, _dt.timedelta):
        from feinsum import checks

        checks.seconds("older_than", older_than.total_seconds())
    if older_than is not None:
        cutoff = (
            _dt.datetime.now(_dt.UTC) - older_than
            if isinstance(older_than, _dt.timedelta) else older_than
        )
        stale.append(M.measured_at < cutoff)
    with store.reading("reading library versions") as conn:
        for col, bound in (
            (M.loopy_version, loopy_below),
            (M.pyopencl_version, pyopencl_below),
            (M.feinsum_version, feinsum_below),
        ):
            if bound is None:
                continue
            present = [v for v in conn.execute(sa.select(col).distinct()).scalars() if v]
            old = [v for v in present if version_tuple(v) < version_tuple(bound)]
            stale.append(col.in_(old) if old else sa.false())
    if recipe_versions:
        stale.append(
            M.recipe_id.in_(
                sa.select(R.id).where(
                    sa.or_(*[sa.and_(R.name == n, R.version != v)
                             for n, v in recipe_versions.items()])
                )
            )
        )
    if retired:
        stale.append(M.retired_at.is_not(None))
    conds: list[sa.ColumnElement[bool]] = []
    if stale:
        conds.append(sa.or_(*stale))
    if status is not None:
        conds.append(M.status == status if isinstance(status, str) else M.status.in_(status))
    if not conds:
        raise DatabaseError(
            "prune needs a criterion (older_than, loopy_below, pyopencl_below, "
            "feinsum_below, recipe_versions, retired or status): refusing to delete every "
            "record"
        )
    return conds
