#!/usr/bin/env bash
# The GatewayDNS controller at fleet scale on the real test bed: N workload API servers with an
# agent each and one GatewayDNS selecting them all, plus optional "virtual" clusters (Cluster
# objects whose kubeconfigs point round robin at the N servers; every one is sent every slice).
# Prints, per size: apply → every agent answers, one LB change → all answer (p50/p99), slice
# writes per change, controller CPU per change and per no-op reconcile, controller RSS.
#
#   bench/fleet.sh                 # N=6, 12, 24 real servers, then 6 servers + 100 and 1000 virtual
#   bench/fleet.sh 6:0 12:0        # chosen sizes, each N:VIRTUAL
#   PROFILE=debug bench/fleet.sh   # without the release build
#   XCC_FLEET_RESOLUTION=nodePort bench/fleet.sh 24:0   # a nodePort GatewayDNS, each change a node's address
#
# Check `free -g` first: each API server of the bed takes a few hundred MB.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(6:0 12:0 24:0 6:100 6:1000)
profile=(--release)
[ "${PROFILE:-release}" = release ] || profile=()
tests/testbed/install.sh >/dev/null
cargo build "${profile[@]}" --quiet -p xcc-agent -p xcc-controller -p xcc-coredns-patcher -p kubectl-xcc
for size in "${sizes[@]}"; do
  # Other work on the machine skews CPU and latency: say how busy it was.
  echo "fleet $size: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  XCC_FLEET_N="${size%%:*}" XCC_FLEET_VIRTUAL="${size##*:}" \
    cargo test "${profile[@]}" --quiet -p xcc-e2e --test e2e -- --ignored --exact --nocapture \
    bench_fleet::fleet_benchmark 2>&1 | grep -E '^fleet|panicked|FAILED' || true
  echo "fleet $size: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
