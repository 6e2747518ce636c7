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

need_pkgs=()
command -v dig >/dev/null || need_pkgs+=(dnsutils)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  step "installing Debian packages: ${need_pkgs[*]}"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

if [ -x tests/testbed/install.sh ]; then
  step "test bed"
  tests/testbed/install.sh
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo test"
cargo test --workspace "$@"
