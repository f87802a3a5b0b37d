"""``python -m ferry.runner RUN_FOLDER``: see :mod:`ferry.runner.run`."""

import sys

from ferry.runner.run import main

sys.exit(main())
