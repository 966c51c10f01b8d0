#!/usr/bin/env bash
# Install (only when missing) the Debian packages a real kubelet node and the image build
# need: containerd (CRI v1) and runc run the pods, containernetworking-plugins gives the
# CNI bridge and host-local plugins, ipset holds kube-router's address sets (NetworkPolicy),
# mmdebstrap builds the TensorFlow image's root file
# system. Other work on the machine may hold the dpkg lock: apt waits for it.
#
# Usage: tools/kube/node-deps.sh [--check]
#   --check  exit 0 when everything is installed, 1 otherwise (installs nothing)
set -euo pipefail
# What each package must provide, checked instead of asking dpkg (fast, and true to use).
exec bash "$(dirname "$0")/../debian/ensure-packages.sh" node-deps "$@" \
  containerd=/usr/bin/containerd runc=/usr/sbin/runc \
  containernetworking-plugins=/usr/lib/cni/bridge ipset=/usr/sbin/ipset \
  mmdebstrap=/usr/bin/mmdebstrap
