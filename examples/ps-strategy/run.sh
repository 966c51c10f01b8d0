#!/usr/bin/env bash
# Every replica runs this; TF_CONFIG says which role it plays.
set -euo pipefail
cd "$(dirname "$0")"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "${PYTHON:-python3}" train.py "$@"
