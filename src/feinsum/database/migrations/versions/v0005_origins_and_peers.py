"""Where each einsum was first recorded from; the peers' timings beside the records.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

``einsums.origin_json`` keeps the user's spec (their index names and length symbols) and
the kernel and statements it came from, so that tables and reports can label records in the
user's words (NULL for einsums recorded before). ``peer_timings`` keeps the times of the
libraries the autotuner compares against (numpy, opt_einsum, torch), which were only printed
before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("einsums", sa.Column("origin_json", sa.Text(), nullable=True))
    op.create_table(
        "peer_timings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(length=32), nullable=False),
        sa.Column("einsum_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("lengths_key", sa.String(length=1000), nullable=False),
        sa.Column("peer", sa.String(length=255), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["einsum_id"], ["einsums.id"],
                                name="fk_peer_timings_einsum_id_einsums", ondelete="RESTRICT"),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"],
                                name="fk_peer_timings_device_id_devices", ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("id", name="pk_peer_timings"),
        sa.UniqueConstraint("uid", name="uq_peer_timings_uid"),
    )
    op.create_index("ix_peer_timings_einsum_id_device_id", "peer_timings",
                    ["einsum_id", "device_id"])


def downgrade() -> None:
    op.drop_index("ix_peer_timings_einsum_id_device_id", table_name="peer_timings")
    op.drop_table("peer_timings")
    # not batch mode: SQLite would copy einsums, which measurements reference (SQLite >= 3.35
    # drops a column in place)
    op.execute(sa.text("ALTER TABLE einsums DROP COLUMN origin_json"))
