#!/usr/bin/env bash
# Build (or reuse) Kubeflow's training operator v1.9.2, only for benchmarks/vs_kubeflow.
#
# Like tools/kube/build.sh: the source comes from the Go module proxy through the helper
# module beside this script (operator/: go.mod + go.sum only, every dependency at the
# version Kubeflow's own go.mod pins); the binary goes to
#   ${TFKUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfkube}/kubeflow-<version>/bin/training-operator
# with a stamp file (go.mod/go.sum hash, Go version, flags), so a second run is a no-op.
# Nothing of Kubeflow is committed; its TFJob CRD is read from the module cache
# (--print-crd prints its path, downloading the module if needed).
#
# Usage: tools/kubeflow/build.sh [--print-bin|--print-crd|--check]
# Env: TFKUBE_GO_P   go build -p (default 2)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODULE="github.com/kubeflow/training-operator"
VERSION="v1.9.2"   # keep in step with operator/go.mod
PKG="$MODULE/cmd/training-operator.v1"
CACHE_ROOT="${TFKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfkube}"
BIN_DIR="$CACHE_ROOT/kubeflow-$VERSION/bin"
BIN="$BIN_DIR/training-operator"
LDFLAGS="-s -w"

log() { printf 'kubeflow-bins: %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { log "the Go toolchain (go >= 1.24) is needed"; exit 1; }

mode=build
case "${1:-}" in
  --print-bin) echo "$BIN"; exit 0 ;;
  --print-crd)
    dir="$(cd "$HERE/operator" && GOFLAGS=-mod=readonly go mod download -json "$MODULE@$VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    echo "$dir/manifests/base/crds/kubeflow.org_tfjobs.yaml"; exit 0 ;;
  --check) mode=check ;;
  "") ;;
  *) echo "usage: $0 [--print-bin|--print-crd|--check]" >&2; exit 2 ;;
esac

stamp="$({ echo "go=$(go env GOVERSION)"; echo "ldflags=$LDFLAGS"
           cat "$HERE/operator/go.mod" "$HERE/operator/go.sum"; } | sha256sum | cut -d' ' -f1)"
if [[ -x $BIN && -f $BIN_DIR/.stamp && "$(cat "$BIN_DIR/.stamp")" == "$stamp" ]]; then
  [[ $mode == check ]] || log "up to date: $BIN"
  exit 0
fi
if [[ $mode == check ]]; then log "missing or out of date: $BIN (run $0)"; exit 1; fi

mkdir -p "$BIN_DIR"
exec 9>"$BIN_DIR/.lock"
flock 9
tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
log "building $PKG@$VERSION, -p ${TFKUBE_GO_P:-2}; about 2 minutes with a warm module cache"
(
  cd "$HERE/operator"
  CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
    nice -n 10 go build -p "${TFKUBE_GO_P:-2}" -trimpath -ldflags "$LDFLAGS" -o "$tmp/bin" "$PKG"
)
mv -f "$tmp/bin" "$BIN"
echo "$stamp" > "$BIN_DIR/.stamp"
log "built in $((SECONDS - start))s: $BIN"
