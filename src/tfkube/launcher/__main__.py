"""`python -m tfkube.launcher`: the process every replica runs (see `tfkube.launcher`)."""

from tfkube.launcher._run import main

raise SystemExit(main())
