"""Run the proxy: ``python main.py [--config FILE] [--host H] [--port P] [--workers N]``."""

import sys

from app.server import main

if __name__ == "__main__":
    sys.exit(main())
