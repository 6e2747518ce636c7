#!/usr/bin/env bash
# API projection on the real test bed: a service cluster's RabbitMQ-like API served on a workload
# cluster through the agent's aggregated API server. Prints the latency a get gains through the
# workload cluster (p50/p99, bar: p50 added ≤ 2 ms), the relay latency of watch events (bar: p99
# ≤ 20 ms) and the agent's RSS growth with 100 concurrent watches (bar ≤ 30 MB), and fails when a
# bar is missed. Release build of the agent.
#
#   bench/projection.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests/testbed/install.sh >/dev/null
cargo build --release --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher -p kubectl-xcc
cargo test --release --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
  bench_projection::projection_benchmark 2>&1 | grep -E '^projection:|panicked|bars missed|FAILED|test result'
