"""Entry point of ``python -m scheduler.sim`` (see ``scheduler.sim.cli``)."""

import sys

from scheduler.sim.cli import main

sys.exit(main())
