#!/usr/bin/env bash
# Lookup latency from a pod on a real node: a name of the zone (the pod's CoreDNS forwards it to
# xcc-agent) against a cluster-local Service name on the same CoreDNS, with the pod's own
# resolv.conf; prints p50/p99 of each. Needs root and the node test bed (tests/testbed/install.sh)
# and the release binaries the xcc image is made of.
#
#   bench/pods.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests/testbed/install.sh >/dev/null
cargo build --release --locked --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher
cargo test --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
  bench_pods::pod_lookup_latency 2>&1 | grep -E '^pod |panicked|FAILED|test result'
