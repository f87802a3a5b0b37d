"""``python -m ferry.launcher``: run the launcher (started by ``ferry`` itself)."""

import sys

from ferry.launcher.server import main

sys.exit(main())
