"""``python -m gengroup.cli``: the same as the ``gengroup`` command."""

import sys

from . import main

sys.exit(main())
