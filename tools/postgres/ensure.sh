#!/usr/bin/env bash
# Make sure Debian's PostgreSQL server binaries (initdb, pg_ctl) are installed; print the
# folder holding them. Installs the `postgresql` package only when missing, waiting for
# the dpkg lock other installs may hold. Used by throwaway.py (the tests and benchmarks).
set -euo pipefail
find_bin() {
  for dir in /usr/lib/postgresql/*/bin; do
    if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then echo "$dir"; return 0; fi
  done
  return 1
}
if bin=$(find_bin); then echo "$bin"; exit 0; fi
if [[ $(id -u) -ne 0 ]]; then
  echo "PostgreSQL is not installed; run: sudo apt-get install postgresql" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=900 update -qq >&2
apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends postgresql >&2
# The package starts a system cluster on Debian; the tests use their own throwaway one.
find_bin
