"""Code fingerprints and retirement: records survive recipe refactors that keep their code.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

Every measurement gets the fingerprint of the code it timed (``code_fingerprint``, with
``fingerprint_origin`` and the ``code_loopy_version`` that generated it), the recipe
version it was timed with (``measured_recipe_version``: existing records get their current
one), and ``retired_at``/``retired_reason`` (revalidation retires a record whose code
changed; queries ignore retired records, nothing is deleted). Existing records have no
fingerprint until ``feinsum db revalidate`` computes one. The rank index gains
``retired_at`` after ``status``, so that it still covers ``best``'s grouping query and
orders a group of live records by time.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_PREFIX = ["einsum_id", "device_id", "status"]
_RANK = [*_PREFIX, "lengths_key", "min_time", "median_time"]
_COLUMNS = (
    ("code_fingerprint", sa.String(64)),
    ("fingerprint_origin", sa.String(16)),
    ("code_loopy_version", sa.String(64)),
    ("measured_recipe_version", sa.String(255)),
    ("retired_at", sa.DateTime(timezone=True)),
    ("retired_reason", sa.Text()),
)


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        for name, type_ in _COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    op.execute(sa.text(
        "UPDATE measurements SET measured_recipe_version = "
        "(SELECT version FROM recipes WHERE recipes.id = measurements.recipe_id)"
    ))
    # queries skip retired records: retired_at joins the rank index after the status
    op.drop_index("ix_measurements_rank", table_name="measurements")
    op.create_index("ix_measurements_rank", "measurements",
                    [*_PREFIX, "retired_at", *_RANK[len(_PREFIX):]])


def downgrade() -> None:
    op.drop_index("ix_measurements_rank", table_name="measurements")
    op.create_index("ix_measurements_rank", "measurements", _RANK)
    with op.batch_alter_table("measurements") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
