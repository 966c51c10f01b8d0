#!/usr/bin/env bash
# Install Debian packages only when what they provide is missing (checked by the files,
# fast and true to use, instead of asking dpkg). apt waits for the dpkg lock other work
# may hold; the package lists may be absent on a fresh machine (then `update` first).
#
# Usage: tools/debian/ensure-packages.sh NAME [--check] [--not-root-ok] PACKAGE=FILE...
#   NAME           what the messages are about (the calling script's name)
#   --check        exit 0 when everything is installed, 1 otherwise (installs nothing)
#   --not-root-ok  not root and something missing: say so and exit 0 (instead of 1)
set -euo pipefail

name=$1
shift
check=0
not_root_ok=0
pairs=()
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    --not-root-ok) not_root_ok=1 ;;
    *=*) pairs+=("$arg") ;;
    *) printf '%s: unknown argument %s\n' "$name" "$arg" >&2; exit 2 ;;
  esac
done

log() { printf '%s: %s\n' "$name" "$*" >&2; }

missing=()
for pair in "${pairs[@]}"; do
  [[ -x "${pair#*=}" ]] || missing+=("${pair%%=*}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $check -eq 1 ]]; then
  log "missing: ${missing[*]} (install them with the $name script, as root)"
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  log "missing: ${missing[*]}; run this as root (it uses apt-get)"
  exit $((1 - not_root_ok))
fi
export DEBIAN_FRONTEND=noninteractive
apt_get() { apt-get -q -o DPkg::Lock::Timeout=900 "$@"; }
log "installing ${missing[*]} from Debian's packages"
if ! apt_get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  for attempt in 1 2 3; do
    apt_get update >/dev/null && break
    log "apt-get update failed (attempt $attempt); retrying"
    sleep 10
  done
  apt_get install -y --no-install-recommends "${missing[@]}"
fi
for pair in "${pairs[@]}"; do
  [[ -x "${pair#*=}" ]] || { log "${pair%%=*} did not provide ${pair#*=}"; exit 1; }
done
log "installed ${missing[*]}"
