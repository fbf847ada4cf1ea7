#!/usr/bin/env bash
# Fuzzes each target (or the ones named) with cargo-fuzz on the stable toolchain
# (RUSTC_BOOTSTRAP=1 lets stable accept the -Z flags cargo-fuzz passes). Two modes:
#
#   fuzz/run.sh [SECONDS] [TARGET...]          campaign: SECONDS per target (default 15),
#                                              random seed; run before resolving engine or
#                                              parser work, e.g. `fuzz/run.sh 600`
#   fuzz/run.sh --ci [TARGET...]               what CI runs: a fixed seed and a fixed number
#                                              of executions per target (table below), so the
#                                              same commit gets the same verdict
#
# New inputs go to a scratch corpus (the checked-in fuzz/corpus/<target>/ is only read);
# crash, timeout and OOM reproducers go to fuzz/artifacts/<target>/.
# Exit status: 0 no findings; 1 a target found a crash, hang or OOM; 2 cargo-fuzz could not
# build or run (toolchain problem, not a finding). Env: FUZZ_TARGET_DIR (cargo target dir,
# default fuzz/target), FUZZ_WORK (scratch corpus dir, default a temporary directory).
set -uo pipefail
cd "$(dirname "$0")"

ci=0
if [ "${1:-}" = "--ci" ]; then
  ci=1
  shift
  secs=0
else
  secs="${1:-15}"
  shift || true
fi
targets=("$@")
# --ci: executions per target, chosen so each takes well under a minute on CI's 2-core machine
# (an execution of open_segment or ops_model builds and reopens a small database, so they get
# fewer). The seed is fixed; libFuzzer then mutates the same way each run.
ci_runs() {
  case "$1" in
    record_decode | hint_decode) echo 1000000 ;;
    json_validation) echo 50000 ;;
    query_parse) echo 100000 ;;
    open_segment) echo 3000 ;;
    ops_model) echo 2000 ;;
    *) echo 5000 ;;
  esac
}
CI_SEED=20261123
if [ ${#targets[@]} -eq 0 ]; then
  targets=(record_decode hint_decode open_segment json_validation ops_model query_parse)
fi
target_dir="${FUZZ_TARGET_DIR:-$PWD/target}"
work="${FUZZ_WORK:-$(mktemp -d)}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)"
  exit 2
fi
if ! cargo fuzz build --target-dir "$target_dir"; then
  echo "fuzz: cargo fuzz build failed (toolchain cannot build the targets)"
  exit 2
fi

status=0
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  log="$work/$t.log"
  if [ $ci -eq 1 ]; then
    limit=(-runs="$(ci_runs "$t")" -seed="$CI_SEED")
    backstop=900
    echo "== fuzz $t: ${limit[*]}"
  else
    limit=(-max_total_time="$secs")
    backstop=$((secs + 120))
    echo "== fuzz $t for ${secs}s"
  fi
  # libFuzzer stops itself after -runs / -max_total_time; the outer timeout is only a backstop.
  timeout --kill-after=10 "$backstop" \
    cargo fuzz run "$t" --target-dir "$target_dir" "$work/$t" "corpus/$t" -- \
    "${limit[@]}" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1
  rc=$?
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" || true
  if [ $rc -eq 0 ]; then
    continue
  fi
  if grep -q 'Test unit written to' "$log"; then
    echo "fuzz: $t FOUND A FAILURE (exit $rc):"
    grep -E -B2 -A25 'panicked|ERROR: libFuzzer|Test unit written to' "$log" | head -80
    status=1
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "fuzz: $t did not stop within its time limit (machine overloaded?); log: $log"
    tail -20 "$log"
    [ $status -eq 0 ] && status=2
  else
    echo "fuzz: $t could not run (exit $rc, no reproducer written); log: $log"
    tail -20 "$log"
    [ $status -eq 0 ] && status=2
  fi
done
exit $status
