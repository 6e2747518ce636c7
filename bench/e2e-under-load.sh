#!/usr/bin/env bash
# The e2e suite on a busy machine: runs the whole e2e test binary ROUNDS times in a row (default
# 3) with LOAD busy processes beside it (default 2: one per core of a 2-core machine), each a
# plain CPU spinner at normal priority, as other test beds or builds on a shared CI machine are.
# The e2e tests wait on progress, never on the machine being idle: every round must pass.
#
#   bench/e2e-under-load.sh                 # 3 rounds, 2 spinners
#   ROUNDS=1 LOAD=4 bench/e2e-under-load.sh -- failover   # extra arguments go to the test binary
#
# Prints one line per round (passed/failed, duration, the tests' summary) and exits 1 when any
# round failed. Needs the test bed (tests/testbed/install.sh) and the release binaries that the
# node tests pack (./test.sh builds both).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-3}
load=${LOAD:-2}
log_dir=$(mktemp -d)

spinners=()
stop_load() {
  local p
  for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap stop_load EXIT

# Built once before the load starts, so the rounds measure the tests and not the compiler.
cargo build --release --locked -p xcc-agent -p xcc-controller -p xcc-coredns-patcher >&2
cargo test --locked -p xcc-e2e --test e2e --no-run >&2

for _ in $(seq "$load"); do
  sh -c 'while :; do :; done' &
  spinners+=("$!")
done
printf 'load: %s busy processes (pids %s)\n' "$load" "${spinners[*]}"

failed=0
for round in $(seq "$rounds"); do
  log=$log_dir/round-$round.log
  start=$(date +%s)
  if CI=true cargo test --locked -p xcc-e2e --test e2e -- "$@" >"$log" 2>&1; then
    verdict=passed
  else
    verdict=FAILED
    failed=$((failed + 1))
  fi
  summary=$(grep -E '^test result:' "$log" | tail -1 || true)
  printf 'round %s/%s: %s in %s s (%s)\n' "$round" "$rounds" "$verdict" "$(($(date +%s) - start))" "$summary"
  if [ "$verdict" = FAILED ]; then
    grep -E '^(test .* FAILED|---- )' "$log" | sed 's/^/  /' || true
    printf '  log: %s\n' "$log"
  fi
done

stop_load
if [ "$failed" -gt 0 ]; then
  printf '%s of %s rounds failed under load\n' "$failed" "$rounds"
  exit 1
fi
printf 'all %s rounds passed with %s busy processes beside them\n' "$rounds" "$load"
