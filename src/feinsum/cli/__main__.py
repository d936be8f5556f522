"""``python -m feinsum.cli``: the ``feinsum`` command."""

import sys

from feinsum.cli.main import main

sys.exit(main())
