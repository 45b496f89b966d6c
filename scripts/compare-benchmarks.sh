#!/usr/bin/env bash
# Planner comparison benchmark: greedy vs peak on GPT-style training steps from
# `hyperoffload generate transformer` — the GPT-3-sized presets gpt3-1.3b,
# gpt3-2.7b and gpt3-6.7b (seq 2048, batch 16, flash attention) and the GPT-2
# presets gpt2-small, gpt2-medium, gpt2-large (seq 1024, batch 8, materialized
# attention), all fp16 with A100 timing and 16 GiB/s each way — at budgets of
# 30%, 50% and 70% of the unplanned peak with two copy engines. Prints each
# `hyperoffload compare` table, then a summary that checks the targets: peak is
# feasible wherever greedy is, and its stall is at most half of greedy's
# wherever greedy stalls. Each case also shows the lower bound on stall for its
# budget (docs/PEAK_PLANNER.md, "How far from optimal"), and a missed target is
# marked unreachable when no plan could meet it.
#
#   scripts/compare-benchmarks.sh                       GPT presets
#   scripts/compare-benchmarks.sh --g10                 also the real G10 traces in examples/traces/g10
#   scripts/compare-benchmarks.sh --memory-cap unlimited   the reference system's unlimited device (default: budget)
#                                                       (docs/SIMULATOR.md); combines with --g10
#
# Needs build/bin/hyperoffload (built here if missing) and python3 for the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
cli=build/bin/hyperoffload
if [[ ! -x "$cli" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target hyperoffload_cli
fi
with_g10=0
memory_cap=budget  # the default device everywhere (model/device.h, kDefaultDeviceMemory)
usage() { echo "usage: $0 [--g10] [--memory-cap unlimited|budget]" >&2; exit 2; }
while (($#)); do
  case "$1" in
    --g10) with_g10=1 ;;
    --memory-cap)
      (($# >= 2)) || usage
      memory_cap=$2
      shift
      ;;
    --memory-cap=*) memory_cap=${1#--memory-cap=} ;;
    *) usage ;;
  esac
  shift
done
case "$memory_cap" in unlimited | budget) ;; *) usage ;; esac

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
traces=()
for preset in gpt3-1.3b gpt3-2.7b gpt3-6.7b gpt2-small gpt2-medium gpt2-large; do
  "$cli" generate transformer --preset "$preset" -o "$scratch/$preset.json" >/dev/null
  traces+=("$scratch/$preset.json")
done
if ((with_g10)); then
  for trace in examples/traces/g10/g10_*_[0-9]*.json; do traces+=("$trace"); done
fi

budgets=30%,50%,70%
for trace in "${traces[@]}"; do
  echo "== $(basename "$trace" .json)"
  "$cli" compare "$trace" --budgets "$budgets" --copy-engines 2 --memory-cap "$memory_cap"
  "$cli" compare "$trace" --budgets "$budgets" --copy-engines 2 --memory-cap "$memory_cap" --json >"$scratch/$(basename "$trace" .json).result.json"
  echo
done

if ! command -v python3 >/dev/null; then
  echo "(python3 not found: no summary)"
  exit 0
fi
echo "== summary (memory cap: $memory_cap): stall ratio = peak / greedy; targets: peak feasible where greedy is, ratio <= 0.5 where greedy stalls"
echo "   bound: the least stall any plan within the budget can have (report/stall_bound.h); 'unreachable': bound > 0.5 x greedy"
python3 - "$scratch"/*.result.json <<'PY'
import json, os, sys
print(f"{'trace':24s} {'budget':>6s}  {'greedy':>8s} {'stall ms':>10s}  {'peak':>8s} {'stall ms':>10s}  {'ratio':>6s}  {'bound ms':>10s}  targets")
met = total = unreachable = 0
for path in sys.argv[1:]:
    results = json.load(open(path))["results"]
    name = os.path.basename(path).removesuffix(".result.json")
    rows = {}
    for r in results:
        rows.setdefault(r["budget_bytes"], {})[r["planner"]] = r
    for budget, pair in rows.items():
        g, p = pair["greedy"], pair["peak"]
        bound = p.get("stall_lower_bound_ms")
        feasible_ok = p["feasible"] or not g["feasible"]
        stall_ok = g["stall_ms"] <= 0 or p["stall_ms"] <= 0.5 * g["stall_ms"]
        ratio = p["stall_ms"] / g["stall_ms"] if g["stall_ms"] > 0 else 0.0
        total += 1
        met += feasible_ok and stall_ok
        flag = "ok" if feasible_ok and stall_ok else ("stall" if feasible_ok else "FEASIBILITY")
        if not stall_ok and bound is not None and bound > 0.5 * g["stall_ms"]:
            flag += " (unreachable)"
            unreachable += 1
        bound_text = f"{bound:10.2f}" if bound is not None else f"{'-':>10s}"
        print(f"{name:24s} {g['budget_percent']:5.0f}%  {'yes' if g['feasible'] else 'no':>8s} {g['stall_ms']:10.2f}  "
              f"{'yes' if p['feasible'] else 'no':>8s} {p['stall_ms']:10.2f}  {ratio:6.2f}  {bound_text}  {flag}")
print(f"targets met in {met} of {total} cases; {unreachable} of the others cannot be met by any plan (bound > 0.5 x greedy)")
PY
