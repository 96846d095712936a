"""`python -m meshplan`: the same as the `meshplan` command."""

from meshplan.tools.cli import main

raise SystemExit(main())
