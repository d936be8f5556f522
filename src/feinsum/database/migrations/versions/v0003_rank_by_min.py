"""Rank by minimum time: an index for it; every timed record gets a min_time; GFLOP/s at it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

``best``/``query`` rank records by ``min_time`` (ties: ``median_time``, then insertion
order), as the autotuner does. The lookup index ended in ``median_time``; the rank index
ends in ``min_time, median_time`` (the same prefix: it replaces the lookup index). Records
timed by a median alone get it as their ``min_time`` (the only time known), and a GFLOP/s
that was derived from the median is derived from ``min_time`` instead.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_PREFIX = ["einsum_id", "device_id", "status", "lengths_key"]
# gflops = flops / time * 1e-9 computed by normalise() from the given time (relative 1e-9).
_DERIVED_FROM = "abs(gflops * {t} - flops * 1e-9) <= 1e-9 * flops * 1e-9"


def _rederive(old: str, new: str) -> None:
    op.execute(sa.text(
        f"UPDATE measurements SET gflops = flops * 1e-9 / {new} "
        f"WHERE gflops IS NOT NULL AND flops > 0 AND {old} > 0 AND {new} > 0 "
        f"AND {_DERIVED_FROM.format(t=old)}"
    ))


def upgrade() -> None:
    op.execute(sa.text(
        "UPDATE measurements SET min_time = median_time "
        "WHERE min_time IS NULL AND median_time IS NOT NULL"
    ))
    _rederive("median_time", "min_time")
    op.create_index("ix_measurements_rank", "measurements", [*_PREFIX, "min_time", "median_time"])
    op.drop_index("ix_measurements_lookup", table_name="measurements")


def downgrade() -> None:
    op.create_index("ix_measurements_lookup", "measurements", [*_PREFIX, "median_time"])
    op.drop_index("ix_measurements_rank", table_name="measurements")
    _rederive("min_time", "median_time")
