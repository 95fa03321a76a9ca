"""per-request records of a trial: tuner_trial_requests

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 11:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tuner_trial_requests",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("windows", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["trial_id"],
            ["tuner_trials.id"],
            name=op.f("fk_tuner_trial_requests_trial_id_tuner_trials"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trial_id", name=op.f("pk_tuner_trial_requests")),
    )


def downgrade() -> None:
    op.drop_table("tuner_trial_requests")
