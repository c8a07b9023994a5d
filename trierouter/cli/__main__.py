"""``python -m trierouter.cli``: the command line."""

import sys

from trierouter.cli import main

sys.exit(main())
