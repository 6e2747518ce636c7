#!/usr/bin/env bash
# Freshness of the Multi-Cluster Services names on the real test bed: one API server, one
# xcc-agent; 50 new ServiceImports (until their clusterset.local name answers) and 50 endpoint
# changes of an MCS EndpointSlice (until the endpoint's name answers its new address). Prints
# p50/p99/max of each, and fails when a p99 misses the 1 s bar. Release build of the agent.
#
#   bench/mcs-dns.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests/testbed/install.sh >/dev/null
cargo build --release --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher -p kubectl-xcc
cargo test --release --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
  bench_mcs_dns::clusterset_freshness_benchmark 2>&1 | grep -E '^mcs-dns|panicked|FAILED|test result'
