#!/usr/bin/env bash
# Build (or reuse) the test control plane binaries: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl and kwok; with --with-node also what the
# real node runs: kubelet, kube-proxy, kube-router (its network policy controller), CoreDNS,
# metrics-server and the pause program of pod sandboxes.
#
# Sources come from the Go module proxy through the helper modules beside this script
# (k8s/, etcd/, kwok/, kubelet/, kube-proxy/, kube-router/, metrics-server/: go.mod + go.sum only; pause/ is our own program, coredns/ our own main over CoreDNS with six of its plugins). Binaries go to
#   ${TFKUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfkube}/kube-<k8s version>/bin
# and are never put in the repository. Each component has a stamp file recording what it
# was built from (go.mod/go.sum hash, Go version, flags): a component whose stamp matches is
# reused, so a second run is a fast no-op. Builds write to a temporary name and are moved
# into place at the end, so an interrupted build never leaves a half-written binary.
#
# Usage: tools/kube/build.sh [--with-node] [--print-bin-dir] [--check]
#   --with-node      also kubelet, kube-proxy, kube-router, coredns, metrics-server and pause (the real node: cluster.py up --real-node)
#   --print-bin-dir  print the bin directory and exit (no build)
#   --check          exit 0 if every binary is present and current, 1 otherwise (no build)
# Env: TFKUBE_GO_P   go build -p (default 2; the machine has 2 cores and other work)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_VERSION="v1.34.4"   # keep in step with k8s/go.mod
ETCD_VERSION="v3.6.16"   # keep in step with etcd/go.mod
KWOK_VERSION="v0.7.0"    # keep in step with kwok/go.mod
COREDNS_VERSION="v1.12.1" # keep in step with coredns/go.mod
METRICS_SERVER_VERSION="v0.8.0" # keep in step with metrics-server/go.mod
KUBE_ROUTER_VERSION="v2.1.0" # keep in step with kube-router/go.mod

CACHE_ROOT="${TFKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfkube}"
BIN_DIR="$CACHE_ROOT/kube-$KUBE_VERSION/bin"

log() { printf 'kube-bins: %s\n' "$*" >&2; }

mode=build
with_node=0
for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN_DIR"; exit 0 ;;
    --check) mode=check ;;
    --with-node) with_node=1 ;;
    *) echo "usage: $0 [--with-node] [--print-bin-dir|--check]" >&2; exit 2 ;;
  esac
done

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
  PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
  log "the Go toolchain (go >= 1.24) is needed to build the control plane; install Go first"
  exit 1
fi
GO_VERSION="$(go env GOVERSION)"

# Fields: component, helper module dir, packages, binaries, ldflags.
k8s_ldflags() {
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local f=() pkg
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    f+=("-X $pkg.gitVersion=$KUBE_VERSION" "-X $pkg.gitMajor=1" "-X $pkg.gitMinor=$minor"
        "-X $pkg.gitTreeState=clean" "-X $pkg.buildDate=1970-01-01T00:00:00Z")
  done
  echo "-s -w ${f[*]}"
}

stamp_of() { # component moddir ldflags -> stamp text
  local moddir="$1" ldflags="$2"
  {
    echo "go=$GO_VERSION"
    echo "ldflags=$ldflags"
    cat "$HERE/$moddir/go.mod"
    # go.sum, and the sources of a module of our own (pause/)
    find "$HERE/$moddir" -maxdepth 1 -type f \( -name go.sum -o -name '*.go' \) | sort | xargs cat
  } | sha256sum | cut -d' ' -f1
}

is_current() { # name stamp bins...
  local name="$1" stamp="$2"; shift 2
  [[ -f "$BIN_DIR/.$name.stamp" && "$(cat "$BIN_DIR/.$name.stamp")" == "$stamp" ]] || return 1
  local b
  for b in "$@"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

build_component() { # name moddir ldflags "pkgs" "bins"
  local name="$1" moddir="$2" ldflags="$3" pkgs="$4" bins="$5"
  local stamp; stamp="$(stamp_of "$moddir" "$ldflags")"
  # shellcheck disable=SC2086
  if is_current "$name" "$stamp" $bins; then
    [[ $mode == check ]] || log "$name: up to date in $BIN_DIR"
    return 0
  fi
  if [[ $mode == check ]]; then
    log "$name: missing or out of date in $BIN_DIR (run: make kube-bins)"
    return 1
  fi
  local tmp; tmp="$(mktemp -d "$BIN_DIR/.build-$name.XXXXXX")"
  local start=$SECONDS
  log "$name: building ($pkgs) with $GO_VERSION, -p ${TFKUBE_GO_P:-2}; this takes minutes when cold"
  # One package: name the output after the binary (etcd's module root would build as "v3").
  local out="$tmp/"
  # shellcheck disable=SC2086
  if [[ $(wc -w <<<"$pkgs") -eq 1 ]]; then out="$tmp/$bins"; fi
  # shellcheck disable=SC2086
  (
    cd "$HERE/$moddir"
    CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
      nice -n 10 go build -p "${TFKUBE_GO_P:-2}" -trimpath -tags notest -ldflags "$ldflags" -o "$out" $pkgs
  ) || { rm -rf "$tmp"; log "$name: build FAILED"; return 1; }
  local b
  for b in $bins; do mv -f "$tmp/$b" "$BIN_DIR/$b"; done
  rm -rf "$tmp"
  echo "$stamp" > "$BIN_DIR/.$name.stamp"
  log "$name: built in $((SECONDS - start))s"
}

mkdir -p "$BIN_DIR"
# One build at a time per cache dir (make kube-bins and the pytest fixture may race).
exec 9>"$BIN_DIR/.lock"
if [[ $mode == build ]] && ! flock -n 9; then
  log "waiting for the build under way (it holds $BIN_DIR/.lock) ..."
  flock 9
fi

status=0
build_component etcd etcd \
  "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
  "go.etcd.io/etcd/server/v3" "etcd" || status=1
build_component kube k8s "$(k8s_ldflags)" \
  "k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl" \
  "kube-apiserver kube-controller-manager kube-scheduler kubectl" || status=1
build_component kwok kwok \
  "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBE_VERSION#v}" \
  "sigs.k8s.io/kwok/cmd/kwok" "kwok" || status=1
if [[ $with_node -eq 1 ]]; then
  # The kubelet's own module (same pins as k8s/): the control plane's stamp stays as it is.
  build_component kubelet kubelet "$(k8s_ldflags)" "k8s.io/kubernetes/cmd/kubelet" "kubelet" \
    || status=1
  # kube-proxy (iptables mode) makes ClusterIPs work for the real node's pods (issue 18).
  build_component kube-proxy kube-proxy "$(k8s_ldflags)" "k8s.io/kubernetes/cmd/kube-proxy" \
    "kube-proxy" || status=1
  # kube-router's network policy controller: NetworkPolicy enforced on the real nodes.
  build_component kube-router kube-router \
    "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router" "kube-router" || status=1
  build_component coredns coredns \
    "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" \
    "." "coredns" || status=1
  # metrics-server: the kubelet's resource metrics as metrics.k8s.io (issue 21 point 5).
  build_component metrics-server metrics-server \
    "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION" \
    "sigs.k8s.io/metrics-server/cmd/metrics-server" "metrics-server" || status=1
  build_component pause pause "-s -w" "." "tfkube-pause" || status=1
fi

if [[ $status -ne 0 ]]; then exit 1; fi
[[ $mode == check ]] || log "ready: $BIN_DIR"
