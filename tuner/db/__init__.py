"""tuner's own storage, beside Optuna's in the same database.

models (tables), session (engines, transactions, error translation), migrate (Alembic, own
version table), repository (reads and writes in domain types), rows (what it returns), codec
and convert (JSON and ORM conversions).
"""
