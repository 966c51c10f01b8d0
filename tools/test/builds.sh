#!/usr/bin/env bash
# make test's builds, run by tools/test/suite.sh one after the other, in the order the
# sessions need them: the control plane's and the real node's first, before any session
# starts (they gate the longest); the rest niced, beside the sessions:
#
#   kube-core   etcd, kube-apiserver & co., kubectl, kwok        (tools/kube/build.sh)
#   kube-node   the real node's Debian packages, kubelet, kube-proxy, CoreDNS,
#               metrics-server, pause, the images                  (make kube-node)
#               -> with kube-core, the gate of the real-node session (the longest)
#   s3          SeaweedFS's weed                                   (tools/s3/build.sh)
#   hdfs        Hadoop's MiniDFSCluster                            (tools/hdfs/build.sh)
#   gang        the scheduler-plugins scheduler                    (tools/gang/build.sh)
#               -> with kube-core, the gate of the KWOK-only session
#
# Each step writes its exit status to DIR/<step>.rc when it ends (suite.sh waits for those
# files); a step whose input failed is not run (rc 1). The output goes to this script's
# stdout/stderr (suite.sh: a log file); a failed step prints that log at once on fd 3 (the
# terminal of make test) when fd 3 is open. Every build script is a no-op when its cache is
# current (~/.cache/tfkube, $TFKUBE_CACHE), so with a warm cache this takes seconds. The
# S3 and HDFS builds hold a lock in the cache while they build: a test that needs the
# store and calls the same script waits for it (tools/go-binary.sh, tools/hdfs/build.sh).
#
# Usage: tools/test/builds.sh DIR LOG      (LOG: the file stdout goes to, printed on failure)
set -uo pipefail
dir="$1"
log="$2"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1

step() { # name command... : run it, record its status
  local name="$1" start=$SECONDS rc
  shift
  echo "builds: $name: $*"
  "$@"
  rc=$?
  echo "builds: $name: exit $rc after $((SECONDS - start)) s"
  echo "$rc" >"$dir/$name.rc"
  if [[ $rc -ne 0 ]] && { true >&3; } 2>/dev/null; then
    {
      echo
      echo "==================== build $name FAILED (exit $rc): the build log so far ===================="
      cat "$log"
      echo "==================== end of the build log ===================="
    } >&3
  fi
  return "$rc"
}

skipped() { # name why
  echo "builds: $1: not run: $2"
  echo 1 >"$dir/$1.rc"
}

if step kube-core bash tools/kube/build.sh; then
  step kube-node make --no-print-directory kube-node
else
  skipped kube-node "the control plane's build failed"
fi
# The rest wait for none of the sessions' start: niced from here on (children inherit it).
renice -n 10 -p $$ >/dev/null
step s3 bash tools/s3/build.sh
step hdfs bash tools/hdfs/build.sh
step gang bash tools/gang/build.sh
true
