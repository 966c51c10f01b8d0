#!/usr/bin/env bash
# Install (only when missing) the Debian packages a real kubelet node and the image build
# need: containerd (CRI v1) and runc run the pods, containernetworking-plugins gives the
# CNI bridge and host-local plugins, mmdebstrap builds the TensorFlow image's root file
# system. Other work on the machine may hold the dpkg lock: apt waits for it.
#
# Usage: tools/kube/node-deps.sh [--check]
#   --check  exit 0 when everything is installed, 1 otherwise (installs nothing)
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins mmdebstrap)
# What each package must provide, checked instead of asking dpkg (fast, and true to use).
FILES=(/usr/bin/containerd /usr/sbin/runc /usr/lib/cni/bridge /usr/bin/mmdebstrap)

log() { printf 'node-deps: %s\n' "$*" >&2; }

missing=()
for i in "${!PACKAGES[@]}"; do
  [[ -x "${FILES[$i]}" ]] || missing+=("${PACKAGES[$i]}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  log "missing: ${missing[*]} (install with tools/kube/node-deps.sh, as root)"
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  log "missing: ${missing[*]}; run this script as root (it uses apt-get)"
  exit 1
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
  apt_get install -y --no-install-recommends "${missing[@]}"
fi
for i in "${!PACKAGES[@]}"; do
  [[ -x "${FILES[$i]}" ]] || { log "${PACKAGES[$i]} did not provide ${FILES[$i]}"; exit 1; }
done
log "installed ${missing[*]}"
