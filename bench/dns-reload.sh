#!/usr/bin/env bash
# Reloads of a large records file (NAMES names, about 10 MB at the default) while a UDP probe
# asks every millisecond (bench/reload_probe.py): a changed file, a file with an error in its
# last entry, an empty file. The agent runs with one thread, pinned to CPU 0 together with its
# loader thread, so a load competes with the answers for one core.
# Bars: no probe lost, wrong or slower than 50 ms; RSS after the failed load within 20% of
# before; the refused files leave the table as it was. Exits 1 when a bar is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
NAMES=${NAMES:-150000}

say() { printf '%s\n' "$*" >&2; }
for tool in taskset python3 dig; do
  command -v "$tool" >/dev/null || { say "missing $tool: run tests/testbed/install.sh first"; exit 2; }
done
work=$(mktemp -d)
agent_pid=
cleanup() { [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

say "building xcc-agent (release)"
cargo build --release --quiet -p xcc-agent
agent=${CARGO_TARGET_DIR:-$root/target}/release/xcc-agent
python3 bench/gen_dns_data.py "$work" "$NAMES" 10 >/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
admin=$(free_port)
taskset -c "${AGENT_CPUS:-0}" "$agent" --records "$work/records.yaml" --listen "127.0.0.1:$port" \
  --admin-listen "127.0.0.1:$admin" --threads 1 --udp-sockets 1 --log info 2>"$work/agent.log" &
agent_pid=$!
for _ in $(seq 1 600); do
  dig @127.0.0.1 -p "$port" +time=1 +tries=1 xcc.test SOA >/dev/null 2>&1 && break
  sleep 0.05
done
status=0
taskset -c 1 python3 bench/reload_probe.py "$port" "$agent_pid" "$admin" "$work/records.yaml" "$NAMES" || status=$?
say "agent log:"; cat "$work/agent.log" >&2
exit $status
