"""Fixtures of the database tests, loaded with ``pytest_plugins = ("database_fixtures",)``.

Every database test runs against SQLite and PostgreSQL (the ``db_url`` fixture). The
PostgreSQL half needs ``FEINSUM_TEST_POSTGRES_URL`` (``bash .ci/start-postgres.sh`` starts a
local server and prints it); without it those tests skip, saying so, unless
``FEINSUM_REQUIRE_POSTGRES=1`` (set by ``.ci/run``) turns the skip into a failure. Each
PostgreSQL test gets a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

PG_URL_ENV = "FEINSUM_TEST_POSTGRES_URL"
PG_REQUIRE_ENV = "FEINSUM_REQUIRE_POSTGRES"

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def postgres_url_or_skip() -> str:
    url = os.environ.get(PG_URL_ENV, "").strip()
    if not url:
        reason = (
            f"PostgreSQL tests skipped: {PG_URL_ENV} is not set (run "
            f"`bash .ci/start-postgres.sh` and export {PG_URL_ENV} as the URL it prints)"
        )
        if os.environ.get(PG_REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}; {PG_REQUIRE_ENV}=1 forbids skipping them")
        pytest.skip(reason)
    return url


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema (dropped afterwards)."""
    import sqlalchemy as sa

    base = postgres_url_or_skip()
    schema = "t_" + uuid.uuid4().hex[:16]
    admin = sa.create_engine(base)
    try:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        url = sa.make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """A URL of an empty database on each backend."""
    if request.param == "sqlite":
        yield str(tmp_path / "feinsum.sqlite")
    else:
        yield request.getfixturevalue("pg_schema_url")


@pytest.fixture
def db(db_url: str) -> Iterator[Any]:
    from feinsum.database import open_database

    database = open_database(db_url, include_shipped=False)
    try:
        yield database
    finally:
        database.close()
