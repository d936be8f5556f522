"""Alembic environment for feinsum's timing database.

feinsum runs migrations itself (``feinsum.database.engine.upgrade``), handing the
connection over in ``config.attributes["connection"]`` inside a transaction that holds
the database's write lock. Run from the command line, this environment also accepts a URL
in ``sqlalchemy.url`` (or the ``FEINSUM_DB`` resolution), e.g. for ``--sql`` scripts.
"""

from __future__ import annotations

from typing import Any

from alembic import context

from feinsum.database.models import VERSION_TABLE, Base

config: Any
try:
    config = context.config
except (NameError, AttributeError):  # imported outside Alembic (e.g. by doctest collection)
    config = None
target_metadata = Base.metadata


def _configure(**kw: object) -> None:
    context.configure(
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,
        compare_type=True,
        **kw,  # type: ignore[arg-type]
    )


def run_offline() -> None:
    from feinsum.database.engine import resolve_url

    url = config.get_main_option("sqlalchemy.url") or None
    _configure(url=resolve_url(url), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from feinsum.database.engine import make_engine

    url = config.get_main_option("sqlalchemy.url") or None
    engine = make_engine(url)
    with engine.connect() as conn:
        _configure(connection=conn)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if config is None:
    pass
elif context.is_offline_mode():
    run_offline()
else:
    run_online()
