#!/usr/bin/env bash
# Build (or reuse) Kubeflow's training operator v1.9.4, only for benchmarks/vs_kubeflow.
#
# Like tools/kube/build.sh: the source comes from the Go module proxy through the helper
# module beside this script (operator/: go.mod + go.sum only, every dependency at the
# version Kubeflow's own go.mod pins); the binary goes to
#   ${TFKUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfkube}/kubeflow-<version>/bin/training-operator
# with a stamp file (go.mod/go.sum hash, Go version, flags), so a second run is a no-op.
# Nothing of Kubeflow is committed; its TFJob CRD is read from the module cache
# (--print-crd prints its path, downloading the module if needed). The steps: ../go-binary.sh.
#
# Usage: tools/kubeflow/build.sh [--print-bin|--print-crd|--check]
# Env: TFKUBE_GO_P   go build -p (default 2)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="v1.9.4"   # keep in step with operator/go.mod
# shellcheck source=../go-binary.sh
source "$HERE/../go-binary.sh"
go_binary kubeflow-bins "$HERE/operator" github.com/kubeflow/training-operator "$VERSION" \
  github.com/kubeflow/training-operator/cmd/training-operator.v1 "kubeflow-$VERSION" \
  training-operator manifests/base/crds/kubeflow.org_tfjobs.yaml \
  "about 2 minutes with a warm module cache" "$@"
