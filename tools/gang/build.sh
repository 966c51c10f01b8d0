#!/usr/bin/env bash
# Build (or reuse) a real gang scheduler for the test control plane: the scheduler-plugins
# scheduler v0.34.7 (kube-scheduler plus the Coscheduling plugin, which places a PodGroup's
# pods all together or none), for tests/cluster/test_gang.py. Part of `make kube-bins`.
#
# Like tools/kube/build.sh: the source comes from the Go module proxy through the helper
# module beside this script (scheduler/: go.mod + go.sum only); the binary goes to
#   ${TFKUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfkube}/scheduler-plugins-<version>/bin/scheduler
# with a stamp file (go.mod/go.sum hash, Go version, flags), so a second run is a no-op.
# Nothing of scheduler-plugins is committed; its PodGroup CRD is read from the module cache
# (--print-crd prints its path, downloading the module if needed). The steps: ../go-binary.sh.
#
# Usage: tools/gang/build.sh [--print-bin|--print-crd|--check]
# Env: TFKUBE_GO_P   go build -p (default 2)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="v0.34.7"   # keep in step with scheduler/go.mod
# shellcheck source=../go-binary.sh
source "$HERE/../go-binary.sh"
go_binary gang-bins "$HERE/scheduler" sigs.k8s.io/scheduler-plugins "$VERSION" \
  sigs.k8s.io/scheduler-plugins/cmd/scheduler "scheduler-plugins-$VERSION" scheduler \
  manifests/coscheduling/crd.yaml "about 7 minutes cold on 2 cores" "$@"
