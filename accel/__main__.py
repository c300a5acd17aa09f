"""`python -m accel` runs the command line, like the `accel` console script."""

from accel.cli.main import main

raise SystemExit(main())
