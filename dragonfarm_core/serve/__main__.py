"""`python -m dragonfarm_core.serve`: the same as `dragonfarm serve`."""

import sys

from dragonfarm_core.serve.server import main

sys.exit(main())
