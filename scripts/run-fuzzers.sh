#!/usr/bin/env bash
# Runs the libFuzzer harnesses of fuzz/ (docs/FUZZING.md), one after another.
#
#   scripts/run-fuzzers.sh [--smoke] [--no-build] [NAME...]     (default: every harness)
#
# Fuzzing (`make fuzz`): each harness runs for FUZZ_SECONDS (default 60) with its
# working corpus in build-fuzz/corpus/NAME/, seeded from fuzz/corpus/NAME/ (which
# is only read); crashes, leaks, timeouts and out-of-memory inputs go to
# build-fuzz/artifacts/, the log to build-fuzz/logs/NAME.log.
#
# --smoke (`make test`, ctest fuzz.smoke.NAME): every seed of fuzz/corpus/NAME/,
# then SMOKE_SECONDS (default 5) of fuzzing into a scratch corpus that is thrown
# away. Bounded: a few seconds per harness.
#
# Every input runs under ASan + UBSan with a 30 s limit per input and an RSS
# limit (libFuzzer's -rss_limit_mb: 2 GiB; 1 GiB for the planners, whose
# traces have at most 24 ops — planning one needs a few MiB, ASan's shadow and
# quarantine a few hundred — so a planner whose work runs away on some input
# is caught as an out-of-memory there; Note [Planning bounds], plan/planner.h)
# and no single allocation above 1 GiB. Exit status 1 when any harness
# found something; its log says what, and the input that triggers it is in
# build-fuzz/artifacts/ (rerun with build-fuzz/bin/NAME_fuzzer FILE).
# Prints one line per harness: executions, coverage (libFuzzer's cov = edges,
# ft = features), seconds, corpus size.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
build=1
names=()
for arg in "$@"; do
  case "$arg" in
    --smoke) smoke=1 ;;
    --no-build) build=0 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run-fuzzers: unknown option $arg" >&2; exit 2 ;;
    *) names+=("$arg") ;;
  esac
done
if ((${#names[@]} == 0)); then
  for source in fuzz/*_fuzzer.cc; do
    name=$(basename "$source" .cc)
    names+=("${name%_fuzzer}")
  done
fi
if ((build)); then scripts/build-fuzzers.sh; fi

# Stack traces with file:line (llvm-19 from scripts/debian-packages.txt).
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-19/bin/llvm-symbolizer}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

seconds=${FUZZ_SECONDS:-60}
if ((smoke)); then seconds=${SMOKE_SECONDS:-5}; fi
mkdir -p build-fuzz/artifacts build-fuzz/logs
status=0
printf '%-18s %12s %8s %8s %8s %8s\n' harness executions cov ft seconds corpus
for name in "${names[@]}"; do
  binary=build-fuzz/bin/${name}_fuzzer
  seeds=fuzz/corpus/$name
  if [[ ! -x $binary ]]; then
    echo "run-fuzzers: $binary is missing (scripts/build-fuzzers.sh builds it)" >&2
    exit 2
  fi
  if ((smoke)); then
    corpus=build-fuzz/smoke/$name
    rm -rf "$corpus"
    log=build-fuzz/logs/$name.smoke.log
  else
    corpus=build-fuzz/corpus/$name
    log=build-fuzz/logs/$name.log
  fi
  mkdir -p "$corpus"
  rss_limit_mb=2048
  if [[ $name == planners ]]; then rss_limit_mb=1024; fi
  flags=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb="$rss_limit_mb" -malloc_limit_mb=1024
         -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name-")
  if [[ -f fuzz/$name.dict ]]; then flags+=(-dict="fuzz/$name.dict"); fi
  if ((!smoke)); then flags+=(-use_value_profile=1); fi
  start=$(date +%s)
  if ! "$binary" "${flags[@]}" "$corpus" "$seeds" >"$log" 2>&1; then
    status=1
    echo "run-fuzzers: $name FAILED; the end of $log:" >&2
    tail -n 40 "$log" >&2
  fi
  elapsed=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  # The last status line: "#123456  DONE   cov: 812 ft: 2301 corp: 97/12Kb ..."
  last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  files=$(find "$corpus" -type f | wc -l)
  printf '%-18s %12s %8s %8s %8s %8s\n' "$name" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$elapsed" "$files"
done
exit $status
