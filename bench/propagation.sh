#!/usr/bin/env bash
# Propagation on the real test bed: a load-balancer address change of cluster-a's gateway
# Service, until cluster-b's xcc-agent answers the new address; 50 changes, prints p50/p99/max
# and the controller's hop (until the address is in a slice on cluster-b), and fails when p99
# misses the 50 ms bar. Release builds of the agent and the controller.
#
#   bench/propagation.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests/testbed/install.sh >/dev/null
cargo build --release --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher -p kubectl-xcc
cargo test --release --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
  bench_propagation::propagation_benchmark 2>&1 | grep -E '^propagation|panicked|FAILED|test result'
