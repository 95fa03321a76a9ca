"""tuner's Alembic history on PostgreSQL: up, down to nothing, up again, the schema enforced."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from tests.studykit import schema_drift
from tuner.db import migrate
from tuner.db.models import VERSION_TABLE
from tuner.db.session import make_engine

TUNER_TABLES = {"tuner_studies", "tuner_trials", "tuner_comparisons"}


def _schema(url: str) -> dict[str, Any]:
    """Tables, and per tuner table its unique constraints, foreign keys and indexes."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            insp = inspect(conn)
            tables = set(insp.get_table_names())
            out: dict[str, Any] = {"tables": tables}
            for table in TUNER_TABLES & tables:
                out[table] = {
                    "pk": insp.get_pk_constraint(table)["name"],
                    "unique": {
                        u["name"]: u["column_names"] for u in insp.get_unique_constraints(table)
                    },
                    "fk": {
                        f["name"]: (f["referred_table"], f["options"].get("ondelete"))
                        for f in insp.get_foreign_keys(table)
                    },
                    "indexes": {i["name"] for i in insp.get_indexes(table)},
                }
            return out
    finally:
        engine.dispose()


def test_upgrade_down_to_base_and_up_again(pg_url: str) -> None:
    assert migrate.current_revision(pg_url) is None
    migrate.upgrade(pg_url)
    assert migrate.current_revision(pg_url) == migrate.head_revision()
    migrate.ensure_current(pg_url)
    schema = _schema(pg_url)
    assert schema["tables"] >= TUNER_TABLES | {VERSION_TABLE}
    assert "alembic_version" not in schema["tables"]  # Optuna's name stays free
    assert schema_drift(pg_url) == []  # PostgreSQL's types match the models too

    migrate.downgrade(pg_url, "base")
    assert migrate.current_revision(pg_url) is None
    assert not (_schema(pg_url)["tables"] & TUNER_TABLES)

    migrate.upgrade(pg_url)
    assert migrate.current_revision(pg_url) == migrate.head_revision()
    assert _schema(pg_url) == schema
    assert schema_drift(pg_url) == []


def test_constraints_exist_and_are_enforced(pg_url: str) -> None:
    migrate.ensure_ready(pg_url)
    schema = _schema(pg_url)
    assert schema["tuner_studies"]["unique"] == {"uq_tuner_studies_name": ["name"]}
    assert schema["tuner_trials"]["unique"] == {
        "uq_tuner_trials_study_id_number": ["study_id", "number"]
    }
    assert schema["tuner_trials"]["fk"] == {
        "fk_tuner_trials_study_id_tuner_studies": ("tuner_studies", "CASCADE")
    }
    assert schema["tuner_comparisons"]["fk"] == {
        "fk_tuner_comparisons_study_id_tuner_studies": ("tuner_studies", "SET NULL")
    }
    assert {"ix_tuner_trials_study_status", "ix_tuner_trials_provenance"} <= schema["tuner_trials"][
        "indexes"
    ]
    assert "ix_tuner_comparisons_lookup" in schema["tuner_comparisons"]["indexes"]
    assert schema["tuner_trials"]["pk"] == "pk_tuner_trials"

    # The server enforces them, not just the catalog: a trial of no study is refused.
    engine = make_engine(pg_url)
    try:
        with pytest.raises(IntegrityError, match="foreign key"), engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO tuner_trials (study_id, number, phase, is_baseline, config,"
                    " config_label, status, failure_detail, log_tail, metrics, windows, memory,"
                    " server_metrics) VALUES (4242, 0, 'search', false, '{}', '', 'running',"
                    " '', '', '{}', '[]', '{}', '{}')"
                )
            )
    finally:
        engine.dispose()


def test_the_db_commands_mask_the_password_of_the_url(pg_url: str) -> None:
    """`tuner db upgrade` and `tuner db current` printed the URL as given: a PostgreSQL
    password landed in the terminal and the CI log, where every other message masks it."""
    from sqlalchemy.engine import make_url
    from typer.testing import CliRunner

    from tuner.cli.app import app

    # the test server trusts local connections: the password is carried, never checked
    url = make_url(pg_url).set(password="s3cret-pw").render_as_string(hide_password=False)
    for command in (["db", "upgrade"], ["db", "current"]):
        done = CliRunner().invoke(app, [*command, "--storage", url])
        assert done.exit_code == 0, done.output
        assert "s3cret-pw" not in done.output and "***" in done.output
