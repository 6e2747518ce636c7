#!/usr/bin/env bash
# Runs every test of xcc on a fresh machine: installs what the tests need (Debian packages, the
# test-bed binaries built from their Go modules, cached outside the repo), then checks formatting
# and lints, then runs the unit, integration and e2e tests.
#
#   ./test.sh              everything
#   ./test.sh -p xcc-dns   extra arguments go to `cargo test`
#
# With CI=true a missing tool is a failure; elsewhere e2e tests without a test bed skip loudly.
set -euo pipefail
cd "$(dirname "$0")"

step() { printf '==> %s\n' "$*"; }

start=$(date +%s)

# Debian packages (dig, dnsperf) and the test bed's binaries, built from their Go modules and
# cached outside the repository ($XCC_TESTBED_DIR, default ~/.cache/xcc-testbed).
step "test bed"
tests/testbed/install.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo test"
cargo test --workspace "$@"

step "all tests passed in $(( $(date +%s) - start )) s"
