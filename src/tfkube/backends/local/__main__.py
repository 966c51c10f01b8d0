"""`python -m tfkube.backends.local JOB_DIR`: run one job's supervisor."""

import sys

from tfkube.backends.local._supervisor import main

raise SystemExit(main(sys.argv[1:]))
