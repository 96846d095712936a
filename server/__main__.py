"""`python -m meshplan.server [--host H] [--port P] ...`: run the Planner service (see server.cli)."""

import sys

from meshplan.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
