"""per-launch summaries for the noise profiles: tuner_launches

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tuner_launches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpu", sa.String(length=255), nullable=False),
        sa.Column("vllm_version", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=512), nullable=False),
        sa.Column("workload", sa.String(length=255), nullable=False),
        sa.Column("windows", sa.Integer(), nullable=False),
        sa.Column("placement", sa.String(length=16), nullable=False, server_default="off"),
        sa.Column("config_label", sa.Text(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("is_defaults", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("run", sa.String(length=255), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=True),
        sa.Column("startup_s", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuner_launches")),
    )
    op.create_index(
        "ix_tuner_launches_key",
        "tuner_launches",
        ["host", "gpu", "vllm_version", "model", "workload", "windows", "placement"],
    )


def downgrade() -> None:
    op.drop_index("ix_tuner_launches_key", table_name="tuner_launches")
    op.drop_table("tuner_launches")
