"""A writer process of the concurrency tests (tests/test_database_concurrency.py).

``python tests/database_writer.py URL WRITER COUNT``: open the database and add COUNT
measurements one by one (one transaction each), printing the id of each after its commit.
COUNT 0 writes until killed. Importing this module does nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(url: str, writer: int, count: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from database_support import make_identity, make_measurement

    from feinsum.database import open_database

    db = open_database(url, include_shipped=False)
    ident = make_identity()
    i = 0
    while count == 0 or i < count:
        mid = db.add_measurement(
            make_measurement(ident, params={"writer": writer, "i": i}, median=1e-3 + i * 1e-6,
                             uid=f"w{writer}-{i}")
        )
        print(mid, flush=True)
        i += 1
    db.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
