#!/usr/bin/env bash
# Runs the README's examples in order, as a new user following it would, in one shell, and fails
# on the first command that fails. (ctest: readme_examples; by hand: tests/readme/run_readme.sh.)
#
#   tests/readme/run_readme.sh [README.md] [BUILD_DIR] [SHARED_DIR]
#
# What runs:
#   ```sh blocks       every line, in order, with `set -euo pipefail` (curl gets --fail-with-body,
#                      so an HTTP error fails the example too).
#   ```console blocks  each `$ command` line runs, and its output must equal the lines that
#                      follow it in the README (up to the next `$ ` line or the end of the block).
#   other blocks       (synopses, YAML, output tables) are not run.
# A block is skipped only when the line before its opening fence is the marker
#   <!-- readme-test: skip (the reason) -->
# which the README uses for the set-up/build/test block (it is what runs this script) and for the
# benchmarks and fuzzing, which take many minutes.
#
# How the README's paths are mapped: `build/` -> BUILD_DIR/, `../shared` -> SHARED_DIR, `/tmp/` ->
# a fresh directory of this run, port 8000 -> a free port. The script runs in the repository root.
# A line that starts with `build/glassbox serve` starts that server in the background and waits
# until /ready answers; the previous server is stopped first (SIGTERM: it must exit 0, as the
# README says), and the last one when the README ends.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
readme=$(realpath "${1:-$here/README.md}")
build=$(realpath "${2:-$here/build}")
shared=$(realpath "${3:-${GLASSBOX_SHARED:-$here/../shared}}")
cd "$here"

work=$(mktemp -d "${TMPDIR:-/tmp}/glassbox-readme.XXXXXX")
script="$work/readme.sh"

# A free loopback port (no listener answers on it).
port=""
for _ in $(seq 1 200); do
  p=$((20000 + RANDOM % 40000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[ -n "$port" ] || { echo "run_readme: no free port found" >&2; exit 1; }

# The README's code blocks as one script: sh lines as they are, console commands as checks.
awk -v q="'" '
  function flush_console(   cmd) {
    if (have_cmd) {
      printf "readme_expect %s <<%sREADME_EXPECTED_%d%s\n", quote(cmd_text), q, n_expect, q
      printf "%s", expected
      printf "README_EXPECTED_%d\n", n_expect
      n_expect++
    }
    have_cmd = 0; expected = ""
  }
  function quote(s) { gsub(q, q "\\" q q, s); return q s q }
  /^<!-- readme-test: skip/ { skip_next = 1; next }
  /^```/ {
    if (!in_block) {
      in_block = 1; lang = substr($0, 4); skip = skip_next; skip_next = 0
      if (!skip && (lang == "sh" || lang == "console")) printf "readme_block %d %s\n", NR, lang
      next
    }
    if (lang == "console" && !skip) flush_console()
    in_block = 0; next
  }
  { if (!in_block && $0 !~ /^[[:space:]]*$/) skip_next = 0 }
  in_block && !skip && lang == "sh" { print; next }
  in_block && !skip && lang == "console" {
    if (substr($0, 1, 2) == "$ ") { flush_console(); have_cmd = 1; cmd_text = substr($0, 3) }
    else if (have_cmd) expected = expected $0 "\n"
    next
  }
' "$readme" > "$work/blocks.sh"

# Path and port mapping (commands and expected output alike).
# /tmp/ first: the build and shared paths substituted after it may themselves lie under /tmp.
sed -E \
  -e "s#(^|[[:space:]\"'(=@])/tmp/#\\1$work/tmp/#g" \
  -e "s#(^|[[:space:]\"'(=])build/#\\1$build/#g" \
  -e "s#\\.\\./shared#$shared#g" \
  -e "s#(localhost|127\\.0\\.0\\.1):8000#\\1:$port#g" \
  -e "s#^$build/glassbox serve( |\$)#readme_serve #" \
  "$work/blocks.sh" > "$work/mapped.sh"
mkdir -p "$work/tmp"

cat > "$script" <<PRELUDE
set -euo pipefail
readme_port=$port
readme_work=$work
readme_glassbox=$build/glassbox
PRELUDE
cat >> "$script" <<'PRELUDE'
server_pid=""
curl() { command curl --fail-with-body --max-time 120 "$@"; }
readme_block() { echo "--- README line $1 ($2)"; }
readme_stop_server() {
  [ -n "$server_pid" ] || return 0
  kill -TERM "$server_pid"
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  if [ "$rc" -ne 0 ]; then
    echo "run_readme: the server exited with $rc on SIGTERM; its log:" >&2
    cat "$readme_work/server.log" >&2
    return 1
  fi
}
readme_serve() {
  readme_stop_server
  echo "+ glassbox serve $* (in the background, port $readme_port)"
  "$readme_glassbox" serve "$@" --port "$readme_port" > "$readme_work/server.out" 2> "$readme_work/server.log" &
  server_pid=$!
  for _ in $(seq 1 1200); do
    if command curl -sf "http://127.0.0.1:$readme_port/ready" > /dev/null 2>&1; then return 0; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "run_readme: the server did not start; its log:" >&2
      cat "$readme_work/server.log" >&2
      server_pid=""
      return 1
    fi
    sleep 0.1
  done
  echo "run_readme: the server was not ready after 120 s; its log:" >&2
  cat "$readme_work/server.log" >&2
  return 1
}
readme_expect() {
  local want got
  want=$(cat)
  echo "+ $1"
  got=$(eval "$1")
  if [ "$got" != "$want" ]; then
    echo "run_readme: the output of '$1' differs from the README:" >&2
    diff <(echo "$want") <(echo "$got") >&2 || true
    return 1
  fi
}
trap 'rc=$?; readme_stop_server || true; exit $rc' EXIT
PRELUDE
cat "$work/mapped.sh" >> "$script"
echo 'readme_stop_server' >> "$script"

echo "run_readme: $readme (build $build, shared $shared, port $port, work dir $work)"
# READMETEST_DRYRUN=1: print the script that would run, and stop.
[ -n "${READMETEST_DRYRUN:-}" ] && { cat "$script"; rm -rf "$work"; exit 0; }
if bash "$script"; then
  echo "run_readme: every example ran"
  rm -rf "$work"
else
  rc=$?
  echo "run_readme: FAILED (exit $rc); the script is $script" >&2
  exit "$rc"
fi
