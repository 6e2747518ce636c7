#!/usr/bin/env bash
# One build: building the four binaries one at a time compiles each dependency once. Builds
# xcc-agent, then xcc-controller, kubectl-xcc and xcc-coredns-patcher, each with its own
# `cargo build -p`, in a scratch target directory (cold), and fails when cargo's output shows a
# crate at one version compiled twice (features unified differently for another selection: the
# cause that crate xcc-workspace-hack removes). Prints the crates compiled by each step and the
# time. Release profile by default; PROFILE=dev for the debug profile; MODE=check runs `cargo
# check` instead (same feature resolution, a fraction of the time and disk: a cold debug build of
# the agent alone takes several GB).
#
#   bench/one-build.sh               # release
#   MODE=check bench/one-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
mode="${MODE:-build}"
target="$(mktemp -d)"
trap 'rm -rf "$target"' EXIT
log="$target/compiled.txt"
: >"$log"
started=$SECONDS
for package in xcc-agent xcc-controller kubectl-xcc xcc-coredns-patcher; do
  step=$SECONDS
  # `Compiling name vX.Y.Z (...)` (`Checking` for cargo check): one line per crate compiled;
  # its build script and the crate itself count once together.
  CARGO_TARGET_DIR="$target" cargo "$mode" --locked --profile "$profile" -p "$package" 2>&1 |
    tee "$target/$package.out" | grep -E '^\s+(Compiling|Checking) ' | awk '{print $2" "$3}' | sort -u \
    >"$target/$package.compiled" || true
  if ! grep -q 'Finished' "$target/$package.out"; then
    cat "$target/$package.out" >&2
    echo "one-build: building $package failed" >&2
    exit 1
  fi
  count=$(wc -l <"$target/$package.compiled")
  echo "one-build: $package: $count crates compiled in $((SECONDS - step)) s"
  cat "$target/$package.compiled" >>"$log"
done
total=$(wc -l <"$log")
twice=$(sort "$log" | uniq -d)
echo "one-build: $total crates compiled in $((SECONDS - started)) s (cargo $mode, $profile profile)"
if [ -n "$twice" ]; then
  echo "one-build: compiled more than once:" >&2
  echo "$twice" >&2
  exit 1
fi
echo "one-build: every crate compiled once"
