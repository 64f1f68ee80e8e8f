#!/usr/bin/env bash
# Installs everything Glassbox needs to build and test on Debian bookworm (idempotent).
# Usage: scripts/setup.sh               apt packages + npm test tools (build, test, benchmark)
#        scripts/setup.sh --build-only  only what compiling the glassbox binary needs (deploy/Containerfile)
set -euo pipefail
cd "$(dirname "$0")/.."

# What `cmake --build build --target glassbox` needs.
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libcli11-dev libspdlog-dev libfmt-dev libcpp-httplib-dev libssl-dev
  libyaml-cpp-dev libsqlite3-dev
  libpq-dev                             # the PostgreSQL audit store (audit_db: postgresql://...)
)
# Tests, benchmarks and developer tools.
APT_PACKAGES=(
  git
  clang-16 libclang-rt-16-dev           # libFuzzer (fuzz/), a second compiler
  libgtest-dev libgmock-dev libbenchmark-dev
  postgresql                            # tests run the audit store on a throwaway server (tests/support/pg_cluster.sh)
  sqlite3                               # tests read the eval and audit stores independently of glassbox
  curl                                  # the README's HTTP examples (tests/readme)
  clang-format                          # tests/format: the sources stay formatted (scripts/format.sh)
  chromium                              # tests/ui: the dashboard in a real browser (driven by npm playwright-core)
  prometheus                            # tests/ui: promtool checks the alert rules, their unit tests and /metrics
  python3-jinja2                        # second Jinja implementation for chat-template cross-checks
  podman runc mmdebstrap                # tests/deploy: build and run deploy/Containerfile (base made from Debian's mirror)
)
# kubectl for `kubectl kustomize` (tests/deploy); Debian's kubernetes-client where none is installed.
command -v kubectl >/dev/null 2>&1 || APT_PACKAGES+=(kubernetes-client)
# Node.js (>= 20) with npm (the dashboard's library, the tests): Debian's packages only where the machine has none.
command -v npm >/dev/null 2>&1 || BUILD_PACKAGES+=(nodejs npm)

BUILD_ONLY=0
case "${1:-}" in
  "") ;;
  --build-only) BUILD_ONLY=1 ;;
  *) echo "usage: scripts/setup.sh [--build-only]" >&2; exit 2 ;;
esac
if [ "$BUILD_ONLY" = 1 ]; then APT_PACKAGES=("${BUILD_PACKAGES[@]}"); else APT_PACKAGES=("${BUILD_PACKAGES[@]}" "${APT_PACKAGES[@]}"); fi

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

# Node packages: the dashboard's charting library (uPlot, "dependencies", copied into the build by
# ui/CMakeLists.txt), and for tests the official OpenAI SDK, HF tokenizers, HF jinja, playwright-core,
# the Kubernetes schemas ("devDependencies"). --build-only installs the dashboard's alone.
if [ -f tools/node/package.json ]; then
  if [ "$BUILD_ONLY" = 1 ]; then NPM_FLAGS=(--omit=dev); else NPM_FLAGS=(); fi
  (cd tools/node && npm ci "${NPM_FLAGS[@]}" --no-audit --no-fund --silent 2>/dev/null ||
    npm install "${NPM_FLAGS[@]}" --no-audit --no-fund --loglevel=error)  # the second try says why it failed
fi
