"""Rooflines per device, the block-sparse tile fraction, an index for pruning by age.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rooflines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("data_json", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.id"],
            name="fk_rooflines_device_id_devices", ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_rooflines"),
        sa.UniqueConstraint("device_id", name="uq_rooflines_device_id"),
    )
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("tiles_kept_fraction", sa.Float(), nullable=True))
    op.create_index("ix_measurements_measured_at", "measurements", ["measured_at"])


def downgrade() -> None:
    op.drop_index("ix_measurements_measured_at", table_name="measurements")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("tiles_kept_fraction")
    op.drop_table("rooflines")
