#!/usr/bin/env bash
# `cmake --install` puts the glassbox binary in PREFIX/bin and the dashboard in
# PREFIX/share/glassbox/ui, and the installed server finds and serves it there.
#   tests/ui/install_test.sh BUILD_DIR SHARED_DIR
set -euo pipefail
build=$1 shared=$2
prefix=$(mktemp -d "${TMPDIR:-/tmp}/glassbox-install.XXXXXX")
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$prefix"' EXIT
pid=""
cmake --install "$build" --prefix "$prefix" > "$prefix/install.log" 2>&1 || { cat "$prefix/install.log"; exit 1; }
for f in bin/glassbox share/glassbox/ui/index.html share/glassbox/ui/js/app.js share/glassbox/ui/vendor/uplot/uPlot.iife.min.js \
         share/glassbox/ui/vendor/uplot/LICENSE; do
  [ -f "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
if find "$prefix/share/glassbox/ui" -name 'CMakeFiles' -o -name '*.cmake' | grep -q .; then
  echo "build files installed with the dashboard"; exit 1
fi
"$prefix/bin/glassbox" serve --model "$shared/models/stories260K" --threads 1 --allow-unauthenticated --port 0 \
  > /dev/null 2> "$prefix/server.log" &
pid=$!
port=""
for _ in $(seq 1 1200); do
  port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$prefix/server.log" | head -1)
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$prefix/server.log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "the installed server did not listen"; cat "$prefix/server.log"; exit 1; }
grep -q "dashboard at /ui/ (files in $prefix/share/glassbox/ui)" "$prefix/server.log" \
  || { echo "the installed server did not find its dashboard"; cat "$prefix/server.log"; exit 1; }
curl -sf "http://127.0.0.1:$port/ui/" | grep -q '<title>Glassbox</title>'
curl -sf "http://127.0.0.1:$port/ui/vendor/uplot/uPlot.iife.min.js" > /dev/null
echo "installed to $prefix: the server serves its dashboard"
