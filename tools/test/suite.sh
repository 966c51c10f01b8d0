#!/usr/bin/env bash
# make test's pytest run: two pytest sessions side by side on this machine's cores.
#
#   the control plane's tests (`-m cluster`: tests/cluster and every test that asks for
#   `kube_cluster`; one control plane and its real nodes, one session) -- mostly waits on
#   pods and nodes -- in the background, its output kept in a file and printed after;
#   everything else (`-m "not cluster"`) in the foreground.
#
# Both must pass. The tests were written to be run alone or beside other work (each makes
# what it writes its own: docs/testing.md, "What the tests share"); SUITE_SERIAL=1 runs the
# whole suite in one session instead. Extra arguments go to both sessions.
set -uo pipefail
BIN=${BIN:-.venv/bin}

if [[ ${SUITE_SERIAL:-0} == 1 ]]; then
  exec "$BIN/pytest" "$@"
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/tfkube-suite-XXXXXX")
cluster_log="$out/cluster.log"
echo "suite: the control plane's tests run beside the rest; their output: $cluster_log (printed at the end)"
started=$(date +%s)
# -p no:cacheprovider: one session writes .pytest_cache, not two at once.
"$BIN/pytest" -m cluster -p no:cacheprovider "$@" >"$cluster_log" 2>&1 &
cluster_pid=$!
stop_cluster() {
  # Ctrl-C or a kill of this script: the background session stops too, by its PID, and
  # runs its teardown (the control plane, the real nodes) before this script exits.
  kill -INT "$cluster_pid" 2>/dev/null
  wait "$cluster_pid" 2>/dev/null
  exit 130
}
trap stop_cluster INT TERM

"$BIN/pytest" -m "not cluster" "$@"
rest=$?
rest_done=$(date +%s)
wait "$cluster_pid"
cluster=$?
trap - INT TERM
done_at=$(date +%s)

echo
echo "==================== the control plane's tests (pytest -m cluster) ===================="
cat "$cluster_log"
echo
echo "suite: the rest ended after $((rest_done - started)) s (exit $rest), the control plane's" \
  "tests after $((done_at - started)) s (exit $cluster)"
rm -rf "$out"
if [[ $rest -ne 0 ]]; then exit "$rest"; fi
exit "$cluster"
