#!/usr/bin/env bash
# DNS serving benchmark: xcc-agent against Knot DNS and CoreDNS (`file` plugin) on the same names,
# same query file, same machine, same run, with a bare UDP reflector as the floor. Each server in
# turn is pinned to CPU 0 with one worker, dnsperf to CPU 1.
#
#   bench/dns.sh                 10,000 names; prints each figure and the ratios, checks the bars
#   FIXED_RATE=5000 bench/dns.sh the CPU rate chosen by hand instead of from the measured maxima
#
# Fair by construction:
#   - every server gets the kernel's default UDP receive buffer (net.core.rmem_default): the agent
#     runs with --udp-recv-buffer 0, as Knot and CoreDNS do not enlarge theirs; the script
#     changes no system setting;
#   - the same dnsperf load for all: CLIENTS sockets, at most OUTSTANDING queries in flight;
#   - CPU per query is measured at FIXED_RATE, a rate every server answers in full: unless set,
#     2/3 of the smallest zero-loss maximum measured first (CoreDNS's, in practice), rounded
#     down to 1,000 q/s, so that no server is charged for overload. At such rates most of the
#     cost is the wake-up per datagram that every server pays: the reflector shows how much.
#
# Measures, per server:
#   max q/s   the highest offered rate (5k, then steps of 5k and 10k q/s, STEP_SECONDS each)
#             answered in full with zero loss
#   CPU/query server CPU time (utime+stime of all its threads, from /proc) per answered query at
#             FIXED_RATE (the median of ROUNDS rounds, the servers taking turns in each round, so
#             that a slow moment of the machine falls on every server alike), and once at
#             HIGH_RATE for the servers whose maximum reaches it
# and for the agent alone: loss at PEAK_RATE (100k q/s), RSS with 100k names, and (cargo bench)
# update → visible time.
# Bars (issue #17): agent CPU/query <= Knot's and <= 1/3 of CoreDNS's at FIXED_RATE; the agent
# loses nothing at PEAK_RATE; agent max q/s >= CoreDNS's; no server loses a query at FIXED_RATE;
# RSS < 100 MB; update visible < 100 ms. A bar that the floor itself misses is reported as such.
# Exits 1 when a bar is missed.
set -euo pipefail
cd "$(dirname "$0")/.."

NAMES=${NAMES:-10000}
STEP_SECONDS=${STEP_SECONDS:-5}
FIXED_RATE=${FIXED_RATE:-}
CPU_SECONDS=${CPU_SECONDS:-20}
ROUNDS=${ROUNDS:-3}
# A second, high rate for the servers that answer it in full (CoreDNS saturates far below):
# there the cost of the DNS work shows, not only the wake-up per datagram.
HIGH_RATE=${HIGH_RATE:-50000}
PEAK_RATE=${PEAK_RATE:-100000}
CLIENTS=${CLIENTS:-20}
OUTSTANDING=${OUTSTANDING:-100}

# shellcheck source=bench/lib.sh
. bench/lib.sh
require dnsperf taskset python3 knotd cc dig
testbed_env=${XCC_TESTBED_DIR:-$HOME/.cache/xcc-testbed}/env
if [ -z "${XCC_COREDNS:-}" ] && [ -f "$testbed_env" ]; then
  # shellcheck disable=SC1090
  . "$testbed_env"
fi
[ -x "${XCC_COREDNS:-}" ] || { say "CoreDNS not found: run tests/testbed/install.sh (or set XCC_COREDNS)"; exit 2; }

build_agent
cc -O2 -o "$work/reflector" bench/reflector.c

say "generating $NAMES names and the query file"
python3 bench/gen_dns_data.py "$work" "$NAMES" 400000

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# dnsperf at a fixed rate; prints "completed lost qps"
perf_at() { # port rate seconds
  taskset -c 1 dnsperf -s 127.0.0.1 -p "$1" -d "$work/queries.txt" -l "$3" -Q "$2" \
    -c "$CLIENTS" -q "$OUTSTANDING" -t 2 2>&1 |
    awk '/Queries completed:/ {c=$3} /Queries lost:/ {l=$3} /Queries per second:/ {q=$4} END {print c, l, q}'
}

max_rate() { # label port: the highest step answered in full
  local label=$1 port=$2 best=0 rate ok try completed lost qps
  for rate in 5000 10000 15000 20000 25000 30000 $(seq 40000 10000 150000); do
    ok=no
    # A step passes with zero loss and the offered rate really delivered; one retry forgives a
    # one-off hiccup (dnsperf itself saturates near 110k q/s on 2 cores).
    for try in 1 2; do
      read -r completed lost qps < <(perf_at "$port" "$rate" "$STEP_SECONDS")
      if [ "$lost" = 0 ] && awk -v q="$qps" -v r="$rate" 'BEGIN {exit !(q >= 0.97 * r)}'; then
        ok=yes; break
      fi
    done
    [ $ok = yes ] || break
    best=$rate
  done
  say "$(printf '%-10s max_qps_zero_loss=%s' "$label" "$best")"
  echo "$best"
}

cpu_at() { # label pid port rate: prints "µs-per-query lost"
  local label=$1 pid=$2 port=$3 rate=$4 before after completed lost qps us
  before=$(cpu_ticks "$pid")
  read -r completed lost qps < <(perf_at "$port" "$rate" "$CPU_SECONDS")
  after=$(cpu_ticks "$pid")
  us=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$completed" 'BEGIN {if (n == 0) print "-"; else printf "%.2f", t * 1e6 / hz / n}')
  say "$(printf '%-10s cpu_us_per_query@%s=%s (lost %s of %s)' "$label" "$rate" "$us" "$lost" "$completed")"
  echo "$us $lost"
}

# The servers answer the same way before we time them.
check_same() { # port
  for q in "gateway.cluster-7.team-7.clusters.xcc.test A" "gateway.cluster-7.team-7.clusters.xcc.test AAAA" "missing-1.clusters.xcc.test A"; do
    # shellcheck disable=SC2086
    dig @127.0.0.1 -p "$1" +noall +comments +answer $q | awk '/status:/ {print $6} /IN[[:space:]]+A/ {print $5}'
  done
}

mkdir -p "$work/knot"
knot_port=$(free_port)
cat > "$work/knot.conf" <<KNOT
server:
    rundir: "$work/knot"
    listen: 127.0.0.1@$knot_port
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: "$work/knot"
log:
  - target: stderr
    any: error
zone:
  - domain: xcc.test
    file: "$work/db.xcc.test"
    journal-content: none
    zonefile-sync: -1
KNOT
core_port=$(free_port)
cat > "$work/Corefile" <<COREFILE
xcc.test:$core_port {
    bind 127.0.0.1
    file $work/db.xcc.test
}
COREFILE
agent_port=$(free_port)
reflector_port=$(free_port)

# Starts one server on CPU 0 and waits until it answers; sets $pid and $port.
start() { # server
  case $1 in
    reflector)
      port=$reflector_port
      taskset -c 0 "$work/reflector" "$port" &
      pid=$!; track "$pid"; sleep 0.3 ;;
    agent)
      port=$agent_port
      taskset -c 0 "$agent" --records "$work/records.yaml" --listen "127.0.0.1:$port" \
        --admin-listen 127.0.0.1:0 --threads 1 --udp-sockets 1 --udp-recv-buffer 0 --log warn &
      pid=$!; track "$pid"; wait_dns "$port" ;;
    knot)
      port=$knot_port
      taskset -c 0 knotd -c "$work/knot.conf" &
      pid=$!; track "$pid"; wait_dns "$port" ;;
    coredns)
      port=$core_port
      GOMAXPROCS=1 taskset -c 0 "$XCC_COREDNS" -conf "$work/Corefile" -quiet >&2 &
      pid=$!; track "$pid"; wait_dns "$port" ;;
  esac
}

say "checking that the agent, Knot and CoreDNS answer alike"
start agent
expected=$(check_same "$port")
untrack "$pid"
for server in knot coredns; do
  start $server
  got=$(check_same "$port")
  untrack "$pid"
  if [ "$got" != "$expected" ]; then
    say "$server answers differently:"; say "$got"; say "-- agent:"; say "$expected"; exit 1
  fi
done
knot_version=$(knotd --version | awk '{print $NF}')

servers=(reflector agent knot coredns)
declare -A max us lost high high_lost
say "zero-loss maxima (each server on CPU 0 with one worker, dnsperf on CPU 1)"
for server in "${servers[@]}"; do
  start "$server"
  max[$server]=$(max_rate "$server" "$port")
  untrack "$pid"
done
smallest=$(printf '%s\n' "${max[@]}" | sort -n | head -1)
if [ -z "$FIXED_RATE" ]; then
  FIXED_RATE=$(( smallest * 2 / 3 / 1000 * 1000 ))
  [ "$FIXED_RATE" -ge 1000 ] || FIXED_RATE=1000
  say "fixed rate: $FIXED_RATE q/s (2/3 of the smallest zero-loss maximum, $smallest q/s)"
fi

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
say "CPU per query at $FIXED_RATE q/s ($ROUNDS rounds, servers in turn), and at $HIGH_RATE q/s where the maximum reaches it"
declare -A rounds
for round in $(seq "$ROUNDS"); do
  for server in "${servers[@]}"; do
    start "$server"
    read -r one one_lost < <(cpu_at "$server" "$pid" "$port" "$FIXED_RATE")
    rounds[$server]="${rounds[$server]:-} $one"
    lost[$server]=$(( ${lost[$server]:-0} + one_lost ))
    if [ "$round" = 1 ]; then
      high[$server]=-; high_lost[$server]=-
      if [ "${max[$server]}" -ge "$HIGH_RATE" ]; then
        read -r "high[$server]" "high_lost[$server]" < <(cpu_at "$server" "$pid" "$port" "$HIGH_RATE")
      fi
      if [ "$server" = agent ]; then
        read -r peak_us peak_lost < <(cpu_at agent "$pid" "$port" "$PEAK_RATE")
      fi
    fi
    untrack "$pid"
  done
done
for server in "${servers[@]}"; do
  us[$server]=$(echo "${rounds[$server]}" | median)
done

say "RSS with 100,000 names"
python3 bench/gen_dns_data.py "$work/big" 100000 1000
big_port=$(free_port)
"$agent" --records "$work/big/records.yaml" --listen "127.0.0.1:$big_port" --admin-listen 127.0.0.1:0 --log warn &
big_pid=$!; track "$big_pid"
wait_dns "$big_port" 30
dig @127.0.0.1 -p "$big_port" +short gateway.cluster-99999.team-89.clusters.xcc.test | grep -q 10.1.134.159
rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$big_pid/status")
untrack "$big_pid"

say "update → first query that sees it (100,000 names)"
update_out=$(cargo bench --quiet -p xcc-dns --bench table 2>/dev/null)
printf '%s\n' "$update_out" >&2

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a + 0 == 0 || b + 0 == 0) print "-"; else printf "%.2f", a / b}'; }
echo
echo "names: $NAMES; queries: 90% A hits, 5% AAAA NODATA, 5% NXDOMAIN; server on CPU 0 with one worker, dnsperf on CPU 1"
echo "dnsperf -c $CLIENTS -q $OUTSTANDING; default UDP receive buffer ($(cat /proc/sys/net/core/rmem_default) bytes) for every server"
echo "fixed rate: $FIXED_RATE q/s (smallest zero-loss maximum: $smallest q/s)"
printf '%-12s %18s %24s %8s %24s %8s  %s\n' server "max q/s (0 loss)" "CPU µs/query @${FIXED_RATE}" "lost" "CPU µs/query @${HIGH_RATE}" "lost" "rounds @${FIXED_RATE}"
for server in "${servers[@]}"; do
  label=$server; [ "$server" = knot ] && label="knot $knot_version"; [ "$server" = agent ] && label=xcc-agent
  printf '%-12s %18s %24s %8s %24s %8s  %s\n' "$label" "${max[$server]}" "${us[$server]}" "${lost[$server]}" "${high[$server]}" "${high_lost[$server]}" "${rounds[$server]# }"
done
echo "xcc-agent at ${PEAK_RATE} q/s offered: CPU µs/query $peak_us, lost $peak_lost"
ratio_knot=$(ratio "${us[agent]}" "${us[knot]}")
ratio_core=$(ratio "${us[agent]}" "${us[coredns]}")
ratio_floor=$(ratio "${us[reflector]}" "${us[coredns]}")
ratio_knot_high=$(ratio "${high[agent]}" "${high[knot]}")
echo "ratios at ${FIXED_RATE} q/s (medians of $ROUNDS rounds): CPU per query agent/knot = $ratio_knot, agent/coredns = $ratio_core (floor: reflector/coredns = $ratio_floor)"
echo "ratio at ${HIGH_RATE} q/s: CPU per query agent/knot = $ratio_knot_high"
echo "agent RSS with 100k names: $((rss_kb / 1024)) MB"
echo "update visible (worst of 50, 100k names): $(printf '%s\n' "$update_out" | awk '/^PASS|^FAIL/ {print $5, $6}')"

fail=0
bar() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1${3:+ — $3}"; fail=1; fi; }
below() { awk -v r="$1" -v m="$2" 'BEGIN {exit !(r != "-" && r <= m)}'; }
bar "agent CPU/query <= Knot's at ${FIXED_RATE} q/s ($ratio_knot)" "below '$ratio_knot' 1"
unreachable=
if ! below "$ratio_floor" 0.3334; then
  unreachable="unreachable on this machine at this rate: the reflector, which does no DNS work, already costs $ratio_floor of CoreDNS's CPU per query"
fi
bar "agent CPU/query <= 1/3 CoreDNS's at ${FIXED_RATE} q/s ($ratio_core)" "below '$ratio_core' 0.3334" "$unreachable"
bar "agent loses nothing at ${PEAK_RATE} q/s offered (lost $peak_lost)" "[ '$peak_lost' = 0 ]"
bar "agent max q/s >= CoreDNS's (${max[agent]} vs ${max[coredns]})" "[ ${max[agent]} -ge ${max[coredns]} ] && [ ${max[agent]} -gt 0 ]"
bar "no server lost a query at ${FIXED_RATE} q/s (agent ${lost[agent]}, knot ${lost[knot]}, coredns ${lost[coredns]})" \
  "[ '${lost[agent]}' = 0 ] && [ '${lost[knot]}' = 0 ] && [ '${lost[coredns]}' = 0 ]"
bar "agent RSS < 100 MB ($((rss_kb / 1024)) MB)" "[ $rss_kb -lt 102400 ]"
bar "update visible < 100 ms" "printf '%s\n' \"\$update_out\" | grep -q '^PASS'"
exit $fail
