"""`python -m tokswap.cli ...`, the same as the `tokswap` command."""

import sys

from tokswap.cli import main

sys.exit(main())
