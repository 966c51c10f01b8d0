#!/usr/bin/env bash
# Build (or reuse) benchmarks/serving's Go client (benchmarks/serving/loadgen) into
#   ${TFKUBE_CACHE:-~/.cache/tfkube}/serving-loadgen-<hash>/bin/loadgen
# where <hash> covers go.mod, go.sum, the Go sources and the Go version; its path is
# printed on stdout (the log on stderr). A second run is a no-op; builds are serialized
# with flock; builds unused for 7 days are removed. Static (CGO_ENABLED=0), from the
# committed go.sum (-mod=readonly: the module cache or the Go module proxy).
#
#   benchmarks/serving/build-loadgen.sh [--print-bin | --check | --test]
#   --test: gofmt -l (nothing may be listed) and go vet
# Env: TFKUBE_GO_P (go build -p, default 2)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=../../tools/cached-build.sh
source "$here/tools/cached-build.sh"
src="$here/benchmarks/serving/loadgen"
root="${TFKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfkube}"
log() { printf 'loadgen: %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { log "the Go toolchain (go >= 1.24) is needed"; exit 1; }
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"

hash="$({ echo "go=$(go env GOVERSION)"; go_sources "$src"; } | sha256sum | cut -c1-16)"
bin_dir="$root/serving-loadgen-$hash/bin"
bin="$bin_dir/loadgen"
case "${1:-}" in
  --print-bin) echo "$bin"; exit 0 ;;
  --check) [[ -x $bin ]] || { log "missing or out of date: $bin (run $0)"; exit 1; }
           exit 0 ;;
  --test)
    cd "$src"
    unformatted="$(gofmt -l .)"
    [[ -z $unformatted ]] || { log "gofmt would change: $unformatted"; exit 1; }
    exec nice -n 10 go vet . ;;
  "") ;;
  *) echo "usage: $0 [--print-bin|--check|--test]" >&2; exit 2 ;;
esac

build_into() (  # a subshell: its cd stays in it
  cd "$src"
  nice -n 10 go build -p "${TFKUBE_GO_P:-2}" -trimpath -ldflags "-s -w" -o "$1" .
)
cached_build loadgen "$bin" "benchmarks/serving/loadgen, -p ${TFKUBE_GO_P:-2}; about 1 min \
with a cold Go build cache" build_into
echo "$bin"
