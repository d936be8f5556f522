"""The first released schema: devices, einsums, recipes, configurations, measurements.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "feinsum_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("application", sa.String(32), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_feinsum_state"),
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(1000), nullable=False),
        sa.Column("platform_name", sa.String(255), nullable=False),
        sa.Column("platform_version", sa.String(255), nullable=False),
        sa.Column("vendor", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("driver_version", sa.String(255), nullable=False),
        sa.Column("opencl_version", sa.String(255), nullable=False),
        sa.Column("device_type", sa.String(32), nullable=False),
        sa.Column("compute_units", sa.Integer(), nullable=False),
        sa.Column("max_work_group_size", sa.Integer(), nullable=False),
        sa.Column("local_mem_size", sa.BigInteger(), nullable=False),
        sa.Column("global_mem_size", sa.BigInteger(), nullable=False),
        sa.Column("has_fp64", sa.Boolean(), nullable=False),
        sa.Column("info_json", sa.Text(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_devices"),
        sa.UniqueConstraint("key", name="uq_devices_key"),
    )
    op.create_index("ix_devices_vendor_type", "devices", ["vendor", "device_type"])
    op.create_table(
        "einsums",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("canonical_key", sa.String(64), nullable=False),
        sa.Column("structure_key", sa.String(64), nullable=False),
        sa.Column("canonical_text", sa.Text(), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_einsums"),
        sa.UniqueConstraint("canonical_key", name="uq_einsums_canonical_key"),
    )
    op.create_index("ix_einsums_structure_key", "einsums", ["structure_key"])
    op.create_table(
        "recipes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("version", sa.String(255), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_recipes"),
        sa.UniqueConstraint("name", "version", name="uq_recipes_name_version"),
    )
    op.create_table(
        "configurations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("params_hash", sa.String(64), nullable=False),
        sa.Column("params_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_configurations"),
        sa.UniqueConstraint("params_hash", name="uq_configurations_params_hash"),
    )
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(32), nullable=False),
        sa.Column("einsum_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("recipe_id", sa.Integer(), nullable=False),
        sa.Column("configuration_id", sa.Integer(), nullable=False),
        sa.Column("lengths_key", sa.String(1000), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("sample_count", sa.Integer(), nullable=False),
        sa.Column("samples_json", sa.Text(), nullable=False),
        sa.Column("min_time", sa.Float(), nullable=True),
        sa.Column("median_time", sa.Float(), nullable=True),
        sa.Column("spread", sa.Float(), nullable=True),
        sa.Column("flops", sa.Float(), nullable=True),
        sa.Column("bytes", sa.Float(), nullable=True),
        sa.Column("gflops", sa.Float(), nullable=True),
        sa.Column("validation_error", sa.Float(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("loopy_version", sa.String(64), nullable=True),
        sa.Column("pyopencl_version", sa.String(64), nullable=True),
        sa.Column("feinsum_version", sa.String(64), nullable=True),
        sa.Column("started_at", _ts(), nullable=True),
        sa.Column("measured_at", _ts(), nullable=False),
        sa.ForeignKeyConstraint(
            ["einsum_id"], ["einsums.id"],
            name="fk_measurements_einsum_id_einsums", ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.id"],
            name="fk_measurements_device_id_devices", ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["recipe_id"], ["recipes.id"],
            name="fk_measurements_recipe_id_recipes", ondelete="RESTRICT",
        ),
        sa.ForeignKeyConstraint(
            ["configuration_id"], ["configurations.id"],
            name="fk_measurements_configuration_id_configurations", ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_measurements"),
        sa.UniqueConstraint("uid", name="uq_measurements_uid"),
    )
    op.create_index(
        "ix_measurements_lookup",
        "measurements",
        ["einsum_id", "device_id", "status", "lengths_key", "median_time"],
    )
    op.create_index("ix_measurements_device_id", "measurements", ["device_id"])


def downgrade() -> None:
    for index, table in (
        ("ix_measurements_device_id", "measurements"),
        ("ix_measurements_lookup", "measurements"),
        ("ix_einsums_structure_key", "einsums"),
        ("ix_devices_vendor_type", "devices"),
    ):
        op.drop_index(index, table_name=table)
    for table in ("measurements", "configurations", "recipes", "einsums", "devices",
                  "feinsum_state"):
        op.drop_table(table)
