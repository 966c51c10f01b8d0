#!/usr/bin/env bash
# Build (or reuse) tfkube's native model server, native/modelserver (Go, cgo against the
# TensorFlow C API that the TensorFlow wheel in the venv exports: libtensorflow_cc.so.2,
# headers under tensorflow/include), into
#   ${TFKUBE_CACHE:-~/.cache/tfkube}/modelserver-<hash>/bin/tfkube-modelserver
# where <hash> covers the Go sources (not the tests), go.mod/go.sum, the Go version, the
# wheel's version and where the wheel lies relative to the venv's bin (the binary's rpath
# is $ORIGIN-relative: a fresh clone's venv of the same layout reuses the build). A second
# run is a no-op; builds are serialized with flock; builds unused for 7 days are removed.
# The binary is then copied to $VENV/bin (the local engine's sandbox sees the venv, not
# the cache), where tfkube.modelserver finds it for the local engine and
# `tfkube serve --engine local`.
#
#   tools/modelserver/build.sh [--print-bin | --check | --test]
#   --test: gofmt -l (nothing may be listed), go vet, go test (the pure parts' unit tests)
# Env: VENV (default .venv), TFKUBE_GO_P (go build -p, default 2)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=../cached-build.sh
source "$here/tools/cached-build.sh"
src="$here/native/modelserver"
venv="${VENV:-$here/.venv}"
[[ $venv == /* ]] || venv="$here/$venv"
root="${TFKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfkube}"
log() { printf 'modelserver: %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { log "the Go toolchain (go >= 1.24) is needed"; exit 1; }

read -r tf tf_version < <("$venv/bin/python" - <<'PY'
import importlib.metadata as md, importlib.util as u, os
version = "?"
for name in ("tensorflow-cpu", "tensorflow"):
    try:
        version = md.version(name)
        break
    except md.PackageNotFoundError:
        pass
print(os.path.dirname(u.find_spec("tensorflow").origin), version)
PY
)
[[ -f $tf/libtensorflow_cc.so.2 && -f $tf/include/tensorflow/c/c_api.h ]] || {
  log "no TensorFlow C API in $tf (libtensorflow_cc.so.2, include/tensorflow/c)"; exit 1; }

rel="$(realpath --relative-to="$venv/bin" "$tf")"  # e.g. ../lib/python3.11/site-packages/tensorflow
# Also where the same TensorFlow lies from /usr/local/bin in tfkube's images: Debian's
# python3 with pip as root (tools/kube/images.py: dist-packages; a venv's layout, as $rel,
# in python:3.11-slim of deploy/Dockerfile). One binary for the venv and the images.
py="$("$venv/bin/python" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')"
image_rel="../lib/$py/dist-packages/tensorflow"
rpath="\$ORIGIN/$rel:\$ORIGIN/$image_rel"
hash="$({ echo "go=$(go env GOVERSION)"; echo "tf=$rel $tf_version"; echo "image=$image_rel"; \
          go_sources "$src"; } | sha256sum | cut -c1-16)"
bin_dir="$root/modelserver-$hash/bin"
bin="$bin_dir/tfkube-modelserver"
case "${1:-}" in
  --print-bin) echo "$bin"; exit 0 ;;
  --check) [[ -x $bin && -x $venv/bin/tfkube-modelserver ]] && cmp -s "$bin" "$venv/bin/tfkube-modelserver" \
             || { log "missing or out of date: $bin (run $0)"; exit 1; }
           exit 0 ;;
  --test)
    cd "$src"
    unformatted="$(gofmt -l .)"
    [[ -z $unformatted ]] || { log "gofmt would change: $unformatted"; exit 1; }
    export CGO_ENABLED=1 CGO_CFLAGS="-I$tf/include" CGO_LDFLAGS="-L$tf -Wl,-rpath,$tf" \
      GOFLAGS="-mod=readonly -buildvcs=false" TF_CPP_MIN_LOG_LEVEL=2
    nice -n 10 go vet .
    exec nice -n 10 go test -count=1 . ;;
  "") ;;
  *) echo "usage: $0 [--print-bin|--check|--test]" >&2; exit 2 ;;
esac

build_into() (  # a subshell: its cd stays in it
  cd "$src"
  CGO_ENABLED=1 CGO_CFLAGS="-I$tf/include" CGO_LDFLAGS="-L$tf -Wl,-rpath,$rpath" \
    GOFLAGS="-mod=readonly -buildvcs=false" \
    nice -n 10 go build -p "${TFKUBE_GO_P:-2}" -trimpath -ldflags "-s -w" -o "$1" .
)
cached_build modelserver "$bin" "native/modelserver against $tf (TensorFlow $tf_version), \
-p ${TFKUBE_GO_P:-2}; about 1 min cold" build_into
if ! cmp -s "$bin" "$venv/bin/tfkube-modelserver" 2>/dev/null; then
  install -m 0755 "$bin" "$venv/bin/.tfkube-modelserver.tmp"
  mv -f "$venv/bin/.tfkube-modelserver.tmp" "$venv/bin/tfkube-modelserver"
fi
