#!/usr/bin/env bash
# DNS over TCP under descriptor pressure (bench/tcp_limits.py against a release xcc-agent):
# 2,000 idle and 200 half-sent connections held open while fresh TCP and UDP queries are timed.
# Run twice:
#   soft  `ulimit -Sn 1024`: the agent raises its soft limit to the hard one at start;
#   hard  `ulimit -n 1024` (soft and hard): the agent cannot raise it and keeps its connection
#         cap below it.
# Bars: every fresh query answered correctly within 50 ms; half-sent connections closed within
# 5 s; the agent's log stays short (no line per failed accept). Exits 1 when a bar is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
NAMES=${NAMES:-1000}
# shellcheck source=bench/lib.sh
. bench/lib.sh
require taskset python3 dig
build_agent
python3 bench/gen_dns_data.py "$work" "$NAMES" 10 >/dev/null

status=0
for mode in soft hard; do
  port=$(free_port)
  limit="-Sn 1024"; [ $mode = hard ] && limit="-n 1024"
  # shellcheck disable=SC2086
  (ulimit $limit && exec taskset -c 0 "$agent" --records "$work/records.yaml" --listen "127.0.0.1:$port" \
    --admin-listen 127.0.0.1:0 --threads 1 --udp-sockets 1 --log info) 2>"$work/agent-$mode.log" &
  agent_pid=$!; track "$agent_pid"
  wait_dns "$port"
  say "== ulimit $limit: agent open-file limit $(awk '/Max open files/ {print $4 " soft, " $5 " hard"}' /proc/$agent_pid/limits)"
  taskset -c 1 python3 bench/tcp_limits.py "$port" "$agent_pid" "$NAMES" || status=1
  kill -0 "$agent_pid" 2>/dev/null || { say "FAIL the agent died"; status=1; }
  untrack "$agent_pid"
  lines=$(wc -l <"$work/agent-$mode.log")
  say "agent log: $lines lines"; cat "$work/agent-$mode.log" >&2
  if [ "$lines" -gt 50 ]; then say "FAIL the agent logged $lines lines"; status=1; fi
done
exit $status
