#!/usr/bin/env bash
# Reloads of a large records file (NAMES names, about 10 MB at the default) while a UDP probe
# asks every millisecond (bench/reload_probe.py): a changed file, a file with an error in its
# last entry, an empty file. The agent runs with one thread, pinned to CPU 0 together with its
# loader thread, so a load competes with the answers for one core.
# Bars: no probe lost, wrong or slower than 50 ms; RSS after the failed load within 20% of
# before; the refused files leave the table as it was. Exits 1 when a bar is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
NAMES=${NAMES:-150000}
# shellcheck source=bench/lib.sh
. bench/lib.sh
require taskset python3 dig
build_agent
python3 bench/gen_dns_data.py "$work" "$NAMES" 10 >/dev/null
port=$(free_port)
admin=$(free_port)
taskset -c "${AGENT_CPUS:-0}" "$agent" --records "$work/records.yaml" --listen "127.0.0.1:$port" \
  --admin-listen "127.0.0.1:$admin" --threads 1 --udp-sockets 1 --log info 2>"$work/agent.log" &
agent_pid=$!; track "$agent_pid"
wait_dns "$port" 30
status=0
taskset -c 1 python3 bench/reload_probe.py "$port" "$agent_pid" "$admin" "$work/records.yaml" "$NAMES" || status=$?
say "agent log:"; cat "$work/agent.log" >&2
exit $status
