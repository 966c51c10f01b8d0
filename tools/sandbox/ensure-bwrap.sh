#!/usr/bin/env bash
# Debian's bubblewrap (util-linux's setpriv and nsenter, iproute2's ip) for the local engine's sandbox: a tfkube
# server running as root confines each team's workloads with them (docs/security.md).
# Installs only when missing and only as root: not root, it says so and succeeds (such a
# machine cannot isolate teams anyway, and the server says that at start).
#
# Usage: tools/sandbox/ensure-bwrap.sh [--check]
#   --check  exit 0 when all are installed, 1 otherwise (installs nothing)
set -euo pipefail
exec bash "$(dirname "$0")/../debian/ensure-packages.sh" ensure-bwrap --not-root-ok "$@" \
  bubblewrap=/usr/bin/bwrap util-linux=/usr/bin/setpriv util-linux=/usr/bin/nsenter \
  iproute2=/usr/sbin/ip
