"""The timing database: every measurement feinsum makes, and the queries that reuse them.

* :func:`open_database` — the user's database (SQLite by default, any SQLAlchemy URL) plus,
  read-only, the records shipped with feinsum;
* :class:`Database` — ``add_measurement``, ``measured_params``, ``revision``, ``query``,
  ``best``, rooflines, peers' timings, ``export``/``import_file``/``merge``/``prune``;
* :func:`query`, :func:`best` — the same on the default database, with the fallback chain
  exact -> nearest lengths -> same vendor -> default;
* :func:`resolve_database` — what every public ``db=`` argument accepts (a
  :class:`Database`, a path, an SQLAlchemy URL, or None for the default database);
* :mod:`~feinsum.database.revalidation` — records whose code is unchanged survive new
  recipe versions (``feinsum db revalidate``, and lazily in queries).

``python -m feinsum.database --help`` upgrades, exports, imports, merges and prunes.
See ``docs/database.rst``.
"""

from feinsum.database.api import Database, lengths_distance, open_database
from feinsum.database.engine import default_path, resolve_url
from feinsum.database.models import KNOWN_VERSIONS, SCHEMA_VERSION
from feinsum.database.origins import einsum_origin
from feinsum.database.peers import PeerRecord
from feinsum.database.records import (
    RUNGS,
    STATUSES,
    Answer,
    EinsumIdentity,
    ImportReport,
    NewMeasurement,
    Record,
    Rung,
    Status,
    canonical_json,
    einsum_identity,
    lengths_key,
    params_key,
)
from feinsum.database.resolve import DatabaseLike, best, query, resolve_database
from feinsum.database.revalidation import CodeChecker, RevalidationReport, Verdict
from feinsum.database.sharing import FORMAT_VERSION

__all__ = [
    "FORMAT_VERSION",
    "KNOWN_VERSIONS",
    "RUNGS",
    "SCHEMA_VERSION",
    "STATUSES",
    "Answer",
    "CodeChecker",
    "Database",
    "DatabaseLike",
    "EinsumIdentity",
    "ImportReport",
    "NewMeasurement",
    "PeerRecord",
    "Record",
    "RevalidationReport",
    "Rung",
    "Status",
    "Verdict",
    "best",
    "canonical_json",
    "default_path",
    "einsum_identity",
    "einsum_origin",
    "lengths_distance",
    "lengths_key",
    "open_database",
    "params_key",
    "query",
    "resolve_database",
    "resolve_url",
]
