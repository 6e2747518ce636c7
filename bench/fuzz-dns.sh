#!/usr/bin/env bash
# Hostile input: a release `xcc-agent --records` (one thread, pinned to CPU 0) gets at least a
# million malformed UDP datagrams of ten kinds and a few thousand garbage TCP connections, paced
# below what it can answer, while valid UDP and TCP probes check its answers
# (bench/fuzz_dns.py, pinned to CPU 1).
#
#   bench/fuzz-dns.sh                  1,000,000 datagrams at 40,000/s (about 30 s in all)
#   PACKETS=3000000 bench/fuzz-dns.sh  more
#
# Bars: the process stays alive; its RSS, at its peak and after, stays within 20% of the steady
# state measured after valid traffic; every probe during and after is answered correctly.
# Prints the figures and exits 1 when a bar is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKETS=${PACKETS:-1000000}
RATE=${RATE:-40000}
NAMES=${NAMES:-1000}

# shellcheck source=bench/lib.sh
. bench/lib.sh
require taskset python3 dig
build_agent

python3 bench/gen_dns_data.py "$work" "$NAMES" 10 >/dev/null
port=$(free_port)
taskset -c 0 "$agent" --records "$work/records.yaml" --listen "127.0.0.1:$port" \
  --admin-listen 127.0.0.1:0 --threads 1 --udp-sockets 1 --log warn 2>"$work/agent.log" &
agent_pid=$!; track "$agent_pid"
wait_dns "$port"

status=0
taskset -c 1 python3 bench/fuzz_dns.py "$port" "$agent_pid" "$NAMES" "$PACKETS" "$RATE" || status=$?
lines=$(wc -l <"$work/agent.log")
say "agent log: $lines lines (malformed-message warnings are limited to one per cause per 10 s)"
head -n 20 "$work/agent.log" >&2
exit $status
