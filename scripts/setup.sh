#!/usr/bin/env bash
# Installs everything Glassbox needs to build and test on Debian bookworm (idempotent).
# Usage: scripts/setup.sh            (apt packages + npm test tools)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  clang-16 libclang-rt-16-dev           # AMX kernels (GCC 12 mis-compiles tile configs), libFuzzer
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libspdlog-dev libfmt-dev libcpp-httplib-dev libssl-dev
  libyaml-cpp-dev libsqlite3-dev
  sqlite3                               # tests read the eval and audit stores independently of glassbox
  curl                                  # the README's HTTP examples (tests/readme)
  clang-format                          # tests/format: the sources stay formatted (scripts/format.sh)
  chromium                              # tests/ui: the dashboard in a real browser (driven by npm playwright-core)
  prometheus                            # tests/ui: promtool checks the alert rules, their unit tests and /metrics
  python3-jinja2                        # second Jinja implementation for chat-template cross-checks
)
# Node.js (>= 20) with npm: Debian's packages only where the machine has none.
command -v npm >/dev/null 2>&1 || APT_PACKAGES+=(nodejs npm)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node packages for end-to-end and cross-check tests (official OpenAI SDK, HF tokenizers, HF jinja,
# playwright-core for the browser tests) and the dashboard's charting library (uPlot, copied by the build).
if [ -f tools/node/package.json ]; then
  (cd tools/node && npm ci --no-audit --no-fund --silent 2>/dev/null || npm install --no-audit --no-fund --silent)
fi
