#!/usr/bin/env bash
# Formats the C++ sources with the checked-in .clang-format (Google, 120 columns).
# Usage: scripts/format.sh          rewrite the files in place
#        scripts/format.sh --check  list the files that are not formatted; exit 1 if any
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    "$CLANG_FORMAT" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'not formatted (run scripts/format.sh): %s\n' "${bad[@]}"
    exit 1
  fi
  echo "${#files[@]} files formatted"
else
  "$CLANG_FORMAT" -i "${files[@]}"
fi
