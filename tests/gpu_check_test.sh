#!/usr/bin/env bash
# ctest gpu_check.* (docs/GPU.md): scripts/gpu-check.sh on a machine without a GPU.
#   without_a_gpu  exits 0 and its summary says that the GPU parts were skipped, each
#                  with its reason, and that the rest passed
#   deadline       with a 14 s deadline every part is skipped as out of time
#   timeout        a part that outlives its limit (a python3 that hangs) is TIMEOUT,
#                  the parts after it run out of time, and the exit status is 1
# On a machine with a GPU the check would run for real: skipped (exit 77).
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHECK=$REPO/scripts/gpu-check.sh

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "this machine has a GPU: run scripts/gpu-check.sh itself"
  exit 77
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0

# expect SUMMARY REGEX...: every extended regex matches a line of the summary.
expect() {
  local summary=$1 regex
  shift
  for regex in "$@"; do
    if ! grep -q -E "$regex" "$summary"; then
      echo "FAIL: $summary has no line matching: $regex"
      echo "----- the summary:"
      cat "$summary"
      echo "-----"
      failures=$((failures + 1))
    fi
  done
}

# run NAME EXPECTED_EXIT [VAR=VALUE...]: the check with its own OUT and build folder.
run() {
  local name=$1 expected=$2
  shift 2
  local out=$scratch/$name
  mkdir -p "$out"
  env "$@" OUT="$out" GPU_CHECK_BUILD_DIR="$out/build" "$CHECK" > "$out/stdout" 2>&1
  local rc=$?
  if ((rc != expected)); then
    echo "FAIL: $name: exit $rc, expected $expected"
    cat "$out/stdout"
    failures=$((failures + 1))
  fi
  [[ -f $out/gpu-check.txt ]] || { echo "FAIL: $name wrote no gpu-check.txt"; failures=$((failures + 1)); }
}

run without_a_gpu 0
summary=$scratch/without_a_gpu/gpu-check.txt
expect "$summary" \
  '^GPU: none on this machine: the GPU parts are skipped$' \
  '^machine +PASS ' \
  '^gpu +SKIP +[0-9]+ +no GPU on this machine' \
  '^cuda-tests +SKIP +[0-9]+ +(no carried binaries|0 passed, 0 failed, [0-9]+ skipped \(the tests skip themselves)' \
  '^build +SKIP +[0-9]+ +no GPU' \
  '^cuda-tests-device +SKIP +[0-9]+ +no GPU' \
  '^python +SKIP +[0-9]+ +no GPU' \
  '^frontier +SKIP +[0-9]+ +(no GPU|python/bench/frontier.py is not in this tree)' \
  '^verdict: no GPU on this machine: the GPU parts were skipped; the rest passed$'

run deadline 0 GPU_CHECK_DEADLINE_S=14
summary=$scratch/deadline/gpu-check.txt
for part in machine gpu cuda-tests build cuda-tests-device python frontier; do
  expect "$summary" "^$part +SKIP +0 +out of time"
done

# A python3 that hangs: the machine part asks it for its version and outlives its limit.
mkdir -p "$scratch/hang"
printf '#!/bin/sh\nexec sleep 600\n' > "$scratch/hang/python3"
chmod +x "$scratch/hang/python3"
run timeout 1 GPU_CHECK_DEADLINE_S=20 GPU_CHECK_PYTHON="$scratch/hang/python3"
summary=$scratch/timeout/gpu-check.txt
# Its limit is what the 20 s deadline leaves when it starts, less 5 s: 15 s when
# it starts at 0 s, less where the check's own start took a second or more on a
# loaded machine (a full parallel ctest once started it at 1 s: limit 14 s).
# Stopped there; `timeout -k 10` may take up to 10 s more to kill it.
started=$(sed -n 's/^===== machine (limit [0-9]* s, started at \([0-9]*\) s) =====$/\1/p' "$scratch/timeout/gpu-check.log")
if [[ -z $started ]]; then
  echo "FAIL: $scratch/timeout/gpu-check.log does not say when the machine part started"
  failures=$((failures + 1))
  started=0
fi
limit=$((20 - 5 - started))
elapsed="($(seq -s '|' "$limit" $((limit + 10))))"
expect "$summary" "^machine +TIMEOUT +$elapsed +stopped at its limit of $limit s" '^gpu +SKIP +0 +out of time' \
  '^verdict: FAILED: machine$'

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "gpu-check.sh without a GPU: exit 0 with the GPU parts skipped; deadline and timeout handled"
