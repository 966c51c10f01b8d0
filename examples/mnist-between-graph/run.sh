#!/usr/bin/env bash
# Every replica runs this with the classic flags:
#   --ps_hosts=... --worker_hosts=... --job_name=ps|worker --task_index=N [extra args]
# and TF_CONFIG, TFKUBE_DATA_DIR, TFKUBE_LOG_DIR, TFKUBE_SHARD_INDEX, ... in the environment.
set -euo pipefail
cd "$(dirname "$0")"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python3}" train.py "$@"
