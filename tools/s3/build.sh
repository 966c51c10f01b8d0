#!/usr/bin/env bash
# Build (or reuse) SeaweedFS's `weed` program, the S3-compatible store the tests start
# (tools/s3/seaweed.py, tests/conftest.py's s3_store fixture; issue 19).
#
# Like tools/kubeflow/build.sh: the source comes from the Go module proxy through the helper
# module beside this script (seaweedfs/: go.mod + go.sum only); the binary goes to
#   ${TFKUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfkube}/seaweedfs-<version>/bin/weed
# with a stamp file (go.mod/go.sum hash, Go version, flags), so a second run is a no-op.
# Nothing of SeaweedFS is committed. SeaweedFS tags its releases "4.01"-style, which are not
# Go module versions, so the proxy offers only pseudo-versions: VERSION is the newest one
# `go list -m github.com/seaweedfs/seaweedfs@latest` gave (2026-11-09). The steps: ../go-binary.sh.
#
# Usage: tools/s3/build.sh [--print-bin|--check]
# Env: TFKUBE_GO_P   go build -p (default 2)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="v0.0.0-20261109003541-7506e5f91cd6"   # keep in step with seaweedfs/go.mod
# shellcheck source=../go-binary.sh
source "$HERE/../go-binary.sh"
go_binary seaweedfs "$HERE/seaweedfs" github.com/seaweedfs/seaweedfs "$VERSION" \
  github.com/seaweedfs/seaweedfs/weed "seaweedfs-${VERSION:0:21}" weed "" \
  "about 20 minutes on 2 busy cores with a warm module cache" "$@"
