"""``python -m planner`` runs the command line."""

import sys

from planner.cli import main

sys.exit(main())
