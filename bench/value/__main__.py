"""``python -m bench.value``: see ``bench.value``."""

import sys

from bench.value.cli import main

sys.exit(main())
