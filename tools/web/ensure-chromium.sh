#!/usr/bin/env bash
# Debian's Chromium for the dashboard's browser tests (Playwright drives it; Playwright's
# own browser download does not work offline). Installs only when missing; waits for the
# dpkg lock other work may hold. Needs root (or sudo).
set -euo pipefail
if [[ -x /usr/bin/chromium ]]; then
  exit 0
fi
SUDO=""
[[ "$(id -u)" == 0 ]] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache policy chromium 2>/dev/null | grep -q "Candidate: [0-9]"; then
  $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq
fi
$SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq chromium >/dev/null
/usr/bin/chromium --version >&2
