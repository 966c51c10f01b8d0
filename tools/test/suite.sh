#!/usr/bin/env bash
# make test's pytest run: three pytest sessions, two at a time on this machine's cores.
#
#   background, from the start: the real-node session (`-m nodesession`: every test that
#     asks for `real_node`, plus a few KWOK-only files that even the two sides out:
#     tests/cluster/fixtures.py, BESIDE_THE_REAL_NODE) on one control plane with its real
#     nodes -- mostly waits on pods -- its output kept in a file and printed at the end;
#   foreground: everything without a control plane (`-m "not cluster"`), then the
#     KWOK-only session (`-m "cluster and not nodesession"`) on a control plane of its own
#     (loopback only, no real node), while the real-node session still runs.
#
# All three must pass; the KWOK session runs even when the rest failed (one run reports
# everything). The tests were written to be run alone or beside other work (each makes
# what it writes its own: docs/testing.md, "What the tests share"); SUITE_SERIAL=1 runs the
# whole suite in one session instead. Extra arguments go to every session.
set -uo pipefail
BIN=${BIN:-.venv/bin}

if [[ ${SUITE_SERIAL:-0} == 1 ]]; then
  exec "$BIN/pytest" "$@"
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/tfkube-suite-XXXXXX")
node_log="$out/realnode.log"
echo "suite: the real-node session runs beside the rest; its output: $node_log (printed at the end)"
started=$(date +%s)
# -p no:cacheprovider: one session writes .pytest_cache, not two at once.
"$BIN/pytest" -m nodesession -p no:cacheprovider "$@" >"$node_log" 2>&1 &
node_pid=$!
stop_node() {
  # Ctrl-C or a kill of this script: the background session stops too, by its PID, and
  # runs its teardown (the control plane, the real nodes) before this script exits.
  kill -INT "$node_pid" 2>/dev/null
  wait "$node_pid" 2>/dev/null
  exit 130
}
trap stop_node INT TERM

"$BIN/pytest" -m "not cluster" "$@"
rest=$?
rest_done=$(date +%s)
echo
echo "==================== the KWOK-only tests (pytest -m \"cluster and not nodesession\") ===================="
"$BIN/pytest" -m "cluster and not nodesession" -p no:cacheprovider "$@"
kwok=$?
kwok_done=$(date +%s)
wait "$node_pid"
node=$?
trap - INT TERM
done_at=$(date +%s)

echo
echo "==================== the real-node tests (pytest -m nodesession) ===================="
cat "$node_log"
echo
echo "suite: the rest ended after $((rest_done - started)) s (exit $rest), the KWOK-only" \
  "tests after $((kwok_done - started)) s (exit $kwok), the real-node tests after" \
  "$((done_at - started)) s (exit $node)"
rm -rf "$out"
for rc in "$rest" "$kwok" "$node"; do
  # 5: no test selected: fine when the arguments chose a few tests, never in a whole run.
  if [[ $rc -eq 5 && $# -gt 0 ]]; then continue; fi
  if [[ $rc -ne 0 ]]; then exit "$rc"; fi
done
exit 0
