#!/usr/bin/env bash
# Overhead against host budget (issue 28): for each trace, the hybrid,
# peak and recompute planners at a 50% device budget, with the host budget at
# 0, 10%, 25%, 50%, 100% of the host bytes the hybrid plan holds with no host
# budget, and unlimited. Each point is planned and simulated by `compare`
# (capped device, two copy engines); the rounds are repeated and interleaved
# (every trace and budget once per round) and the table takes each point's
# last round (the overhead is deterministic; planning time is not reported).
#
#   scripts/host-budget-benchmarks.sh [ROUNDS] > host-budget.tsv
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin/hyperoffload
ROUNDS=${1:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
traces=()
for preset in gpt2-small gpt2-medium; do
  "$BIN" generate transformer --preset "$preset" -o "$TMP/$preset.json" >/dev/null
  traces+=("$TMP/$preset.json")
done
traces+=(examples/traces/hf_gpt2.json examples/traces/resnet18.json examples/traces/vit.json)
shares=(0 0.1 0.25 0.5 1.0 unlimited)
printf 'trace\thost_share\thost_budget_bytes\tplanner\tfeasible\top_peak_bytes\tpeak_host_bytes\toverhead_percent\n'
for round in $(seq "$ROUNDS"); do
  for trace in "${traces[@]}"; do
    # The hybrid plan's host bytes with no host budget.
    full=$("$BIN" compare "$trace" --budget 50% --planners hybrid --json --host-budget 1TiB |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["peak_host_bytes"])')
    for share in "${shares[@]}"; do
      if [ "$share" = unlimited ]; then host=1TiB; hb=unlimited; else hb=$(python3 -c "print(int($share*$full))"); host=$hb; fi
      "$BIN" compare "$trace" --budget 50% --planners hybrid,peak,recompute --json --host-budget "$host" |
        python3 -c '
import json, sys
doc = json.load(sys.stdin)
for r in doc["results"]:
    if sys.argv[4] != sys.argv[5]: continue
    print("\t".join(str(x) for x in (sys.argv[1], sys.argv[2], sys.argv[3], r["planner"], r["feasible"],
                                       r["op_peak_bytes"], r["peak_host_bytes"], round(r["overhead_percent"], 2))))
' "$(basename "$trace" .json)" "$share" "$hb" "$round" "$ROUNDS"
    done
  done
done
