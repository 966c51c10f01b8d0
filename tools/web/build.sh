#!/usr/bin/env bash
# The dashboard's front-end libraries (htmx, uPlot): installed from the npm registry with
# `npm ci` (the committed package-lock.json pins them) into a cache folder keyed by the
# lock file's hash, then the few files the pages load are copied into
# src/tfkube/server/web/static/vendor/ (gitignored: never committed as bundles).
# Machines are offline at run time, so the server serves these copies itself; no CDN.
# A warm run (same lock file, files in place) does nothing. Usage: tools/web/build.sh [--check]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WEB="$ROOT/src/tfkube/server/web"
VENDOR="$WEB/static/vendor"
CACHE="${TFKUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tfkube}"
LOCK_HASH="$(cat "$WEB/package.json" "$WEB/package-lock.json" "$0" | sha256sum | cut -c1-16)"
STAMP="$VENDOR/.stamp"

# node_modules path -> file name in static/vendor
FILES=(
  "htmx.org/dist/htmx.min.js:htmx.min.js"
  "htmx.org/LICENSE:htmx.LICENSE"
  "uplot/dist/uPlot.iife.min.js:uPlot.iife.min.js"
  "uplot/dist/uPlot.min.css:uPlot.min.css"
  "uplot/LICENSE:uPlot.LICENSE"
)

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$LOCK_HASH" ]]; then
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "the dashboard's front-end files are missing or out of date: run tools/web/build.sh (make web)" >&2
  exit 1
fi
command -v npm >/dev/null || { echo "npm is needed to install the dashboard's front-end libraries" >&2; exit 1; }

WORK="$CACHE/web-$LOCK_HASH"
mkdir -p "$WORK"
exec 9>"$CACHE/web.lock"
flock 9
if [[ ! -f "$WORK/.installed" ]]; then
  cp "$WEB/package.json" "$WEB/package-lock.json" "$WORK/"
  (cd "$WORK" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
     --cache "$CACHE/npm")
  touch "$WORK/.installed"
fi
mkdir -p "$VENDOR"
for pair in "${FILES[@]}"; do
  src="${pair%%:*}" dst="${pair##*:}"
  install -m 0644 "$WORK/node_modules/$src" "$VENDOR/$dst.tmp"
  mv "$VENDOR/$dst.tmp" "$VENDOR/$dst"
done
echo "$LOCK_HASH" > "$STAMP"
echo "dashboard assets: $(cd "$VENDOR" && ls | grep -v LICENSE | tr '\n' ' ')" >&2
