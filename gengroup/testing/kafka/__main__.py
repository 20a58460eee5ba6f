"""Run a broker until SIGINT or SIGTERM: see :mod:`gengroup.testing.kafka.cli`."""

import sys

from .cli import main

sys.exit(main())
