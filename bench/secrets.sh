#!/usr/bin/env bash
# Secret replication on the real test bed: 1,000 SecretExports on a service cluster and 1,000
# SecretImports on a workload cluster; prints the time until every copy exists (bar < 3 s, over at most 12 connections), the
# p50/p99/max of 100 updates from the service cluster to the copy (bar p99 < 20 ms) and the
# workload agent's RSS (bar ≤ 71 MiB), and fails when a bar is missed. Release build of the agent.
#
#   bench/secrets.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests/testbed/install.sh >/dev/null
cargo build --release --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher -p kubectl-xcc
cargo test --release --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
  bench_secrets::secret_replication_benchmark 2>&1 | grep -E '^secrets:|panicked|FAILED|test result'
