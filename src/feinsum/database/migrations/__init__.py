"""Alembic environment and revisions of the timing database (run programmatically by
:func:`feinsum.database.engine.ensure_schema`; no alembic.ini needed)."""
