#!/usr/bin/env bash
# Per-peer isolation on the real test bed: a group of three, Secret replication and resource sync
# on every agent. 100 Secrets are synced from the second cluster to the first, five times, before
# and after the third cluster's API server is stopped (SIGSTOP: it accepts connections and never
# answers). Prints the median sync times and their ratio (bar <= 1.2), and how long the first
# cluster's Cluster and SecretImport took to show the silent peer (bar 15 s); fails when a bar is
# missed. Release build of the agent.
#
#   bench/isolation.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests/testbed/install.sh >/dev/null
cargo build --release --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher -p kubectl-xcc
cargo test --release --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
  isolation::isolation_benchmark 2>&1 | grep -E '^isolation:|panicked|FAILED|test result'
