# Sourced by tools/kubeflow/build.sh and tools/gang/build.sh: build (or reuse) one Go
# program from the Go module proxy through a helper module (go.mod + go.sum only, nothing
# of the program committed), into ${TFKUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfkube}/<dir>/bin,
# with a stamp file (go.mod/go.sum hash, Go version, flags): a second run is a no-op. The
# build writes to a temporary name and is moved into place, serialized with flock (a
# second caller waits for the first's build, then reuses it).
#
#   go_binary NAME HELPER_DIR MODULE VERSION PKG CACHE_DIR BIN_NAME CRD_PATH COLD_TIME [ARG]
#     NAME       log prefix             HELPER_DIR  the helper module (absolute)
#     MODULE     the program's module   VERSION     its version (as in the helper's go.mod)
#     PKG        the main package       CACHE_DIR   under the cache root, e.g. kubeflow-v1.9.2
#     BIN_NAME   the binary's name      CRD_PATH    its CRD inside the module (--print-crd)
#     COLD_TIME  what a cold build costs, for the log line
#     ARG        --print-bin | --print-crd | --check | nothing (build)
# Env: TFKUBE_GO_P   go build -p (default 2)

go_binary() {
  local name="$1" helper="$2" module="$3" version="$4" pkg="$5" cache_dir="$6" \
    bin_name="$7" crd_path="$8" cold_time="$9" arg="${10:-}"
  local root="${TFKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfkube}"
  local bin_dir="$root/$cache_dir/bin" ldflags="-s -w"
  local bin="$bin_dir/$bin_name"
  log() { printf '%s: %s\n' "$name" "$*" >&2; }

  if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    PATH="/usr/local/go/bin:$PATH"
  fi
  command -v go >/dev/null 2>&1 || { log "the Go toolchain (go >= 1.24) is needed"; return 1; }

  local mode=build dir
  case "$arg" in
    --print-bin) echo "$bin"; return 0 ;;
    --print-crd)
      dir="$(cd "$helper" && GOFLAGS=-mod=readonly go mod download -json "$module@$version" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
      echo "$dir/$crd_path"; return 0 ;;
    --check) mode=check ;;
    "") ;;
    *) echo "usage: $0 [--print-bin|--print-crd|--check]" >&2; return 2 ;;
  esac

  local stamp
  stamp="$({ echo "go=$(go env GOVERSION)"; echo "ldflags=$ldflags"
             cat "$helper/go.mod" "$helper/go.sum"; } | sha256sum | cut -d' ' -f1)"
  current() { [[ -x $bin && -f $bin_dir/.stamp && "$(cat "$bin_dir/.stamp")" == "$stamp" ]]; }
  if current; then
    [[ $mode == check ]] || log "up to date: $bin"
    return 0
  fi
  if [[ $mode == check ]]; then log "missing or out of date: $bin (run $0)"; return 1; fi

  # One build at a time (make test's background build and a test that needs the program
  # may race): the second waits for the first's lock, then finds the program built.
  mkdir -p "$bin_dir"
  exec 9>"$bin_dir/.lock"
  if ! flock -n 9; then
    log "waiting for the $name build under way (it holds $bin_dir/.lock) ..."
    flock 9
  fi
  if current; then
    log "built meanwhile by the other build: $bin"
    return 0
  fi
  local tmp start=$SECONDS
  tmp="$(mktemp -d "$bin_dir/.build.XXXXXX")"
  # shellcheck disable=SC2064  # $tmp is expanded now: it is local to this function
  trap "rm -rf '$tmp'" EXIT
  log "building $pkg@$version, -p ${TFKUBE_GO_P:-2}; $cold_time"
  (
    cd "$helper"
    CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
      nice -n 10 go build -p "${TFKUBE_GO_P:-2}" -trimpath -ldflags "$ldflags" -o "$tmp/bin" "$pkg"
  )
  mv -f "$tmp/bin" "$bin"
  echo "$stamp" > "$bin_dir/.stamp"
  rm -rf "$tmp"
  trap - EXIT
  log "built in $((SECONDS - start))s: $bin"
}
