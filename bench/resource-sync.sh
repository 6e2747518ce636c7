#!/usr/bin/env bash
# Resource sync on the real test bed: 1,000 Secrets under one ResourceSyncRule on one cluster of
# three; prints the time until both others hold every copy (bar < 10 s), the API requests per
# synced object, the agent's RSS, and the writes after a restart of the agents (bar 0); fails
# when a bar is missed. Release build of the agent.
#
#   bench/resource-sync.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests/testbed/install.sh >/dev/null
cargo build --release --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher -p kubectl-xcc
cargo test --release --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
  bench_resource_sync::resource_sync_benchmark 2>&1 | grep -E '^resource-sync:|panicked|FAILED|test result'
