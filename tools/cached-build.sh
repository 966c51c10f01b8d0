# Sourced by tools/modelserver/build.sh and benchmarks/serving/build-loadgen.sh: the build
# of a Go program of ours into a cache folder named by a hash of its inputs,
# <cache root>/<prefix>-<hash>/bin/<name>, once: a second run finds it there; builds are
# serialized with flock (a second caller waits for the first's build, then reuses it);
# the build writes to a temporary name that is moved into place; folders of the same
# prefix unused for 7 days are removed. The lock stays held (fd 9) until the caller exits,
# for what it does next with the program (the model server's copy into the venv).
#
#   cached_build NAME BIN WHAT COMMAND [ARG ...]
#     NAME     log prefix                  BIN   <cache root>/<prefix>-<hash>/bin/<name>
#     WHAT     what is built, for the log  COMMAND ARG ...  the build, run with the
#              temporary output path appended (e.g. go build ... -o)
#   go_sources DIR   what a Go module's build depends on, for the hash: go.mod, go.sum and
#                    its Go sources but the tests

cached_build() {
  local name="$1" bin="$2" what="$3"
  shift 3
  local bin_dir folder
  bin_dir="$(dirname "$bin")"
  folder="$(basename "$(dirname "$bin_dir")")"  # <prefix>-<hash>
  mkdir -p "$bin_dir"
  exec 9>"$bin_dir/.lock"
  flock 9
  if [[ -x $bin ]]; then
    printf '%s: up to date: %s\n' "$name" "$bin" >&2
  else
    local tmp start=$SECONDS
    tmp="$(mktemp -d "$bin_dir/.build.XXXXXX")"
    # shellcheck disable=SC2064  # $tmp is expanded now: it is local to this function
    trap "rm -rf '$tmp'" EXIT
    printf '%s: building %s\n' "$name" "$what" >&2
    "$@" "$tmp/bin"
    mv -f "$tmp/bin" "$bin"
    rm -rf "$tmp"
    trap - EXIT
    printf '%s: built in %ss: %s\n' "$name" "$((SECONDS - start))" "$bin" >&2
  fi
  touch "$bin_dir"  # in use: kept
  find "$(dirname "$(dirname "$bin_dir")")" -maxdepth 1 -name "${folder%-*}-*" ! -name "$folder" \
    -mtime +7 -exec rm -rf {} + 2>/dev/null || true
}

go_sources() {
  (
    cd "$1"
    local f
    for f in go.mod go.sum $(ls ./*.go | grep -v _test.go | sort); do echo "== $f"; cat "$f"; done
  )
}
