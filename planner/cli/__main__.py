"""`python -m planner.cli`: the modelplan command line."""

from planner.cli.main import main

raise SystemExit(main())
