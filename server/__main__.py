"""`python -m server [--host H] [--port P] ...`: run the Planner service (see server.cli)."""

import sys

from server.cli import main

if __name__ == "__main__":
    sys.exit(main())
