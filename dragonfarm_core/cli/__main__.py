"""`python -m dragonfarm_core.cli`: the same as `dragonfarm `."""

import sys

from dragonfarm_core.cli.commands import main

sys.exit(main())
