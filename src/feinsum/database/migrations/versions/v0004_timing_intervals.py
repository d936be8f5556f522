"""When the device was held for timing: two nullable timestamps per measurement.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25

A campaign runs several tuning jobs at once on machines that share devices; the interval
(``timing_started_at``, ``timing_ended_at``) in which a candidate held its device for timing
shows that no two timings on one physical device overlapped. Older records have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("timing_started_at", sa.DateTime(timezone=True),
                                   nullable=True))
        batch.add_column(sa.Column("timing_ended_at", sa.DateTime(timezone=True),
                                   nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("timing_ended_at")
        batch.drop_column("timing_started_at")
