"""`python -m tfkube.engines.local JOB_DIR`: run one job's supervisor."""

import sys

from tfkube.engines.local._supervisor import main

raise SystemExit(main(sys.argv[1:]))
