"""`python -m asyncagents`, the same as the `asyncagents` command."""

import sys

from .cli import main

sys.exit(main())
