#!/usr/bin/env bash
# make test's builds and pytest run: the heavy builds (tools/test/builds.sh) in the
# background from the start -- the control plane's and the real node's first, at full
# speed, while no test runs; then the S3 and HDFS stores and the gang scheduler, niced,
# beside the tests -- and three pytest sessions side by side (the machine's two cores were
# ~70% busy with two: docs/testing.md, "Cost: the whole suite"):
#
#   background, from the start: the builds, one after the other, their output kept in a
#     file, printed at the end (at once when a build fails);
#   background, as soon as the control plane and the real node are built: the real-node
#     session (`-m nodesession`: every test that asks for `real_node`, plus any KWOK-only
#     file named to even the sessions out: tests/cluster/fixtures.py, BESIDE_THE_REAL_NODE)
#     on one control plane with its real nodes -- mostly waits on pods -- its output kept
#     in a file and printed at the end;
#   background, as soon as the control plane and the gang scheduler are built: the
#     KWOK-only session (`-m "cluster and not nodesession"`) on a control plane of its own
#     (loopback only, no real node), its output kept in a file and printed at the end;
#   foreground, once the control plane and the real node are built (SUITE_NODE_FIRST=0:
#     at once, beside those builds): everything without a control plane (`-m "not
#     cluster"`), which needs only the venv and the browser; its tests that need the S3 store or HDFS
#     wait for their build if it is still running (TFKUBE_BUILDS_BESIDE:
#     tests/s3store.py, tests/hdfsstore.py).
#
# All must pass: a failed build fails the run; the KWOK session runs even when the rest
# failed (one run reports everything). Ctrl-C or a kill of this script stops the builds and
# the background sessions by their PIDs (each runs its teardown). With a warm cache
# the builds are no-ops (seconds). The tests were written to be run alone or beside other
# work (each makes what it writes its own: docs/testing.md, "What the tests share");
# SUITE_SERIAL=1 runs the builds first, then the whole suite in one session;
# the real-node session is the long pole, so its builds have the cores to themselves
# (docs/testing.md, "Cost: the whole suite"); SUITE_KWOK_AFTER=1 runs the KWOK-only
# session after the rest, as before 2026-12-06. Extra arguments go to every session.
set -uo pipefail
BIN=${BIN:-.venv/bin}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ ${SUITE_SERIAL:-0} == 1 ]]; then
  make --no-print-directory kube-bins kube-node s3-bins hdfs-bins || exit
  exec "$BIN/pytest" "$@"
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/tfkube-suite-XXXXXX")
node_log="$out/realnode.log"
kwok_log="$out/kwok.log"
build_log="$out/builds.log"
started=$(date +%s)
echo "suite: the builds run first (the control plane's and the real node's), then beside the tests, niced; their output: $build_log (printed at the end)"
# A session of its own (setsid: its PID is its process group's), so that a stop reaches
# every build program by that one PID; fd 3: the terminal, for a failed build's log.
setsid bash "$HERE/builds.sh" "$out" "$build_log" 3>&2 >"$build_log" 2>&1 </dev/null &
builds_pid=$!

built() { # step... : wait until each has ended; fail when one failed
  local s
  for s in "$@"; do
    while [[ ! -f "$out/$s.rc" ]]; do
      kill -0 "$builds_pid" 2>/dev/null || [[ -f "$out/$s.rc" ]] || return 1
      sleep 1
    done
    [[ $(cat "$out/$s.rc") == 0 ]] || return 1
  done
}

# Every session: a test that needs the S3 store or HDFS waits for the store's build when it
# is still running (tests/s3store.py, tests/hdfsstore.py).
export TFKUBE_BUILDS_BESIDE=1
echo "suite: the real-node session starts when its builds are done; its output: $node_log (printed at the end)"
# -p no:cacheprovider: one session writes .pytest_cache, not two at once. `exec`: the
# session keeps this subshell's PID, which stop_all signals.
(
  built kube-core kube-node || { echo "suite: not run: the control plane's or the real node's build failed (or was stopped)"; exit 3; }
  echo "suite: the real-node session starts after $(($(date +%s) - started)) s"
  exec "$BIN/pytest" -m nodesession -p no:cacheprovider "$@"
) >"$node_log" 2>&1 &
node_pid=$!
kwok_pid=
start_kwok() { # the KWOK-only session, in the background, once its builds are done
  (
    built kube-core gang || { echo "suite: not run: the control plane's or the gang scheduler's build failed (or was stopped)"; exit 3; }
    echo "suite: the KWOK-only session starts after $(($(date +%s) - started)) s"
    exec "$BIN/pytest" -m "cluster and not nodesession" -p no:cacheprovider "$@"
  ) >"$kwok_log" 2>&1 </dev/null &
  kwok_pid=$!
}
if [[ ${SUITE_KWOK_AFTER:-0} != 1 ]]; then
  echo "suite: the KWOK-only session starts when its builds are done; its output: $kwok_log (printed at the end)"
  start_kwok "$@"
fi
stop_all() { # INT|TERM
  # Ctrl-C or a kill of this script: the builds and the background sessions stop too, by
  # their PIDs, and each session runs its teardown (its control plane, the real nodes)
  # before this script exits. The builds first: a session still waiting for them sees
  # them gone and ends. The foreground session got a Ctrl-C from the terminal itself (a
  # second one could cut its teardown short); a SIGTERM of this script reaches it here
  # (tests/session_signals.py: torn down as after Ctrl-C).
  kill -TERM -- "-$builds_pid" 2>/dev/null
  wait "$builds_pid" 2>/dev/null
  kill -INT "$node_pid" ${kwok_pid:+"$kwok_pid"} 2>/dev/null
  if [[ $1 == TERM && -n $fg_pid ]]; then kill -TERM "$fg_pid" 2>/dev/null; fi
  wait "$node_pid" ${kwok_pid:+"$kwok_pid"} ${fg_pid:+"$fg_pid"} 2>/dev/null
  echo "suite: stopped; the logs so far: $out" >&2
  exit 130
}
trap 'stop_all INT' INT
trap 'stop_all TERM' TERM
fg_pid=
foreground() { # command...: run it in the background and wait for it, so that a kill of
  # this script runs stop_all at once (a trap waits for a foreground command to end); its
  # stdin stays this script's.
  "$@" <&0 &
  fg_pid=$!
  wait "$fg_pid"
  local rc=$?
  fg_pid=
  return "$rc"
}

if [[ ${SUITE_NODE_FIRST:-1} == 1 ]]; then
  # The real-node session is the long pole: the rest waits for its builds, which then have
  # both cores (docs/testing.md, "Cost: the whole suite"); with a warm cache they are
  # no-ops. SUITE_NODE_FIRST=0: the rest at once, beside them.
  echo "suite: the rest starts after the control plane's and the real node's builds"
  built kube-core kube-node
fi
foreground "$BIN/pytest" -m "not cluster" "$@"
rest=$?
rest_done=$(date +%s)
if [[ ${SUITE_KWOK_AFTER:-0} == 1 ]]; then start_kwok "$@"; fi
wait "$kwok_pid"
kwok=$?
kwok_done=$(stat -c %Y "$kwok_log") # its last line's time: the session may have ended long before
wait "$builds_pid"
builds_done=$(date +%s)
builds=0
for s in kube-core kube-node s3 hdfs gang; do
  [[ -f "$out/$s.rc" && $(cat "$out/$s.rc") == 0 ]] || builds=1
done
wait "$node_pid"
node=$?
trap - INT TERM
node_done=$(stat -c %Y "$node_log")
done_at=$(date +%s)

echo
echo "==================== the builds (tools/test/builds.sh) ===================="
cat "$build_log"
echo
echo "==================== the KWOK-only tests (pytest -m \"cluster and not nodesession\") ===================="
cat "$kwok_log"
echo
echo "==================== the real-node tests (pytest -m nodesession) ===================="
cat "$node_log"
echo
echo "suite: the builds ended after $((builds_done - started)) s or before (exit $builds), the" \
  "rest after $((rest_done - started)) s (exit $rest), the KWOK-only tests after" \
  "$((kwok_done - started)) s (exit $kwok), the real-node tests after" \
  "$((node_done - started)) s (exit $node); all after $((done_at - started)) s"
rm -rf "$out"
for rc in "$builds" "$rest" "$kwok" "$node"; do
  # 5: no test selected: fine when the arguments chose a few tests, never in a whole run.
  if [[ $rc -eq 5 && $# -gt 0 ]]; then continue; fi
  if [[ $rc -ne 0 ]]; then exit "$rc"; fi
done
exit 0
