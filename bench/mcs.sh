#!/usr/bin/env bash
# Multi-Cluster Services on the real test bed (bare API servers, one xcc-agent each; the exporting
# cluster's EndpointSlices written as the EndpointSlice controller would):
# - speed, 3 clusters in one group: export → ServiceImport and clusterset.local answer in every
#   member (50 exports), an endpoint change → every member's MCS EndpointSlice (50 changes), then
#   1,000 more exports and 50 changes again: p50/p99/max, object writes, CPU per change and RSS
#   of each agent; fails when a p99 misses the 1 s bar. The per-agent figures go to
#   docs/bench-data/mcs.tsv and docs/bench-mcs.svg.
# - scale: a peer with 10,000 Services of which 100 are exported, a peer with only the 100: the
#   importing agent's RSS and the bytes it receives from each while the 9,900 are created.
# Release builds.
#
#   bench/mcs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tests/testbed/install.sh >/dev/null
cargo build --release --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher -p kubectl-xcc
echo "mcs: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
for bench in mcs_speed_benchmark mcs_scale_benchmark; do
  XCC_MCS_BENCH_TSV="$PWD/docs/bench-data/mcs.tsv" \
    cargo test --release --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
    "bench_mcs::$bench" 2>&1 | grep -E '^mcs|panicked|FAILED|test result' || true
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
echo "mcs: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
bench/plot.py docs/bench-data/mcs.tsv -o docs/bench-mcs.svg
exit $status
