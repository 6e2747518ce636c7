# Set-up shared by the DNS benchmarks (bench/dns.sh, dns-reload.sh, dns-tcp-limits.sh,
# fuzz-dns.sh). Sourced, after `set -euo pipefail` and `cd` to the repository root:
#
#   . bench/lib.sh
#   require taskset python3 dig      # exits 2 naming the first missing tool
#   build_agent                      # release build; sets $agent
#   port=$(free_port)
#   taskset -c 0 "$agent" ... & track $!
#   wait_dns "$port"
#
# It makes a scratch directory $work, and on exit kills every process given to `track` and
# removes $work.

root=$(pwd)
target=${CARGO_TARGET_DIR:-$root/target}
agent=$target/release/xcc-agent

say() { printf '%s\n' "$*" >&2; }

require() { # tool...
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { say "missing $tool: run ./test.sh or tests/testbed/install.sh first"; exit 2; }
  done
}

work=$(mktemp -d)
tracked=()
track() { tracked+=("$@"); } # pid...
untrack() { # pid: kills it, waits for it, and forgets it
  local p kept=()
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  for p in "${tracked[@]}"; do [ "$p" = "$1" ] || kept+=("$p"); done
  tracked=("${kept[@]}")
}
cleanup() {
  local p
  for p in "${tracked[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

build_agent() {
  say "building xcc-agent (release)"
  cargo build --release --quiet -p xcc-agent
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_dns() { # port [seconds]: until the server there answers an SOA query (10 s by default)
  local _
  for _ in $(seq 1 $((${2:-10} * 20))); do
    if dig @127.0.0.1 -p "$1" +time=1 +tries=1 xcc.test SOA >/dev/null 2>&1; then return 0; fi
    sleep 0.05
  done
  say "server on port $1 did not answer"
  exit 1
}
