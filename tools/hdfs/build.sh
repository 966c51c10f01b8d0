#!/usr/bin/env bash
# Fetch (or reuse) Apache Hadoop's MiniDFSCluster and build MiniHdfs.java beside this
# script: the HDFS the data-source tests start (tools/hdfs/minihdfs.py; issue 19).
#
# The jars come from Maven Central through mvn (pom.xml beside this script:
# org.apache.hadoop:hadoop-client-minicluster 3.5.0 and what it needs, some 110 MB) into
#   ${TFKUBE_CACHE:-${XDG_CACHE_HOME:-~/.cache}/tfkube}/hadoop-3.5.0/{lib,classes}
# with a Maven repository of its own there (m2/); javac (Java 17) compiles the main. A stamp
# (pom.xml and MiniHdfs.java's hash, javac's version) makes a second run a no-op; builds
# are serialized with flock (a second caller waits, then reuses the first's). Nothing of
# Hadoop is committed.
#
# Usage: tools/hdfs/build.sh [--print-classpath|--check]
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="3.5.0"   # keep in step with pom.xml
CACHE="${TFKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfkube}"
DEST="$CACHE/hadoop-$VERSION"
STAMP="$DEST/stamp"
CLASSPATH_OUT="$DEST/classes:$DEST/lib/*"

wanted() {
  local javac_version
  javac_version="$(javac -version 2>&1 || echo none)"
  echo "$(cat "$HERE/pom.xml" "$HERE/MiniHdfs.java" | sha256sum | cut -d' ' -f1) $javac_version"
}

fresh() { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(wanted)" ]]; }

case "${1:-}" in
  --print-classpath) echo "$CLASSPATH_OUT"; exit 0 ;;
  --check)
    if ! fresh; then
      echo "MiniDFSCluster is missing or out of date: run tools/hdfs/build.sh" >&2
      exit 1
    fi
    exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--print-classpath|--check]" >&2; exit 2 ;;
esac

fresh && exit 0
# One build at a time (make test's background build and a test that needs HDFS may race):
# the second waits for the first's lock, then finds it built.
mkdir -p "$CACHE"
exec 9>"$CACHE/hadoop-$VERSION.lock"
if ! flock -n 9; then
  echo "hdfs-bins: waiting for the MiniDFSCluster build under way (it holds $CACHE/hadoop-$VERSION.lock) ..." >&2
  flock 9
fi
fresh && exit 0
for tool in mvn javac; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is needed (Java 17 and Maven)" >&2; exit 1; }
done
rm -rf "$DEST/lib" "$DEST/classes" "$STAMP"
mkdir -p "$DEST/classes"
mvn -B -q -f "$HERE/pom.xml" -Dmaven.repo.local="$CACHE/m2" \
  dependency:copy-dependencies -DoutputDirectory="$DEST/lib"
javac -d "$DEST/classes" -cp "$DEST/lib/*" "$HERE/MiniHdfs.java"
wanted > "$STAMP"
