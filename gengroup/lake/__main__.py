"""``python -m gengroup.lake``: the same commands as ``gengroup lake``."""

import sys

from .cli import main

sys.exit(main())
