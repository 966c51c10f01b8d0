#!/usr/bin/env bash
# Debian's bubblewrap (and util-linux's setpriv) for the local engine's sandbox: a tfkube
# server running as root confines each team's workloads with them (docs/security.md).
# Installs only when missing and only as root (a non-root machine cannot isolate teams
# anyway: the server says so at start); waits for the dpkg lock other work may hold.
#
# Usage: tools/sandbox/ensure-bwrap.sh [--check]
#   --check  exit 0 when both are installed, 1 otherwise (installs nothing)
set -euo pipefail

log() { printf 'ensure-bwrap: %s\n' "$*" >&2; }

missing=()
[[ -x /usr/bin/bwrap ]] || missing+=(bubblewrap)
[[ -x /usr/bin/setpriv ]] || missing+=(util-linux)
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  log "missing: ${missing[*]} (install with tools/sandbox/ensure-bwrap.sh, as root)"
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  log "not root: ${missing[*]} not installed (the local engine cannot isolate teams here)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt_get() { apt-get -q -o DPkg::Lock::Timeout=900 "$@"; }
log "installing ${missing[*]} from Debian's packages"
# The package lists may be absent on a fresh machine; `update` waits for the lock as well.
if ! apt_get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  for attempt in 1 2 3; do
    apt_get update >/dev/null && break
    log "apt-get update failed (attempt $attempt); retrying"
    sleep 10
  done
  apt_get install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
[[ -x /usr/bin/bwrap && -x /usr/bin/setpriv ]] || { log "installing ${missing[*]} failed"; exit 1; }
log "installed ${missing[*]} ($(/usr/bin/bwrap --version))"
