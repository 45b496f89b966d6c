#!/usr/bin/env bash
# Hybrid planner benchmark (issue 10 targets): the GPT presets of
# `hyperoffload generate transformer` (gpt3-1.3b, gpt3-2.7b, gpt3-6.7b with
# flash attention, gpt2-small, gpt2-medium, gpt2-large with materialized
# attention; fp16, A100 timing, 16 GiB/s each way) and the PyTorch captures in
# examples/traces/*.json, at budgets of 30%, 50% and 70% of the unplanned peak,
# two copy engines, on a device with unlimited memory and on one that holds only
# the budget. For each case it prints the overhead (makespan / compute - 1) of
# the offload-only (peak), recompute-only and hybrid plans and the least any
# plan can have (report/overhead_bound.h), and checks the targets: hybrid
# within 25% / 8% / 2% at 30% / 50% / 70%, and never above peak or recompute.
#
#   scripts/hybrid-benchmarks.sh              GPT presets and captures, both memory caps
#   scripts/hybrid-benchmarks.sh --presets    GPT presets only
#
# Needs build/bin/hyperoffload (built here if missing) and python3 for the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
cli=build/bin/hyperoffload
if [[ ! -x "$cli" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target hyperoffload_cli
fi
with_captures=1
case "${1:-}" in
  "") ;;
  --presets) with_captures=0 ;;
  *) echo "usage: $0 [--presets]" >&2; exit 2 ;;
esac

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
traces=()
for preset in gpt3-1.3b gpt3-2.7b gpt3-6.7b gpt2-small gpt2-medium gpt2-large; do
  "$cli" generate transformer --preset "$preset" -o "$scratch/$preset.json" >/dev/null
  traces+=("$scratch/$preset.json")
done
if ((with_captures)); then
  for trace in examples/traces/*.json; do traces+=("$trace"); done
fi

for cap in unlimited budget; do
  for trace in "${traces[@]}"; do
    "$cli" compare "$trace" --budgets 30%,50%,70% --planners peak,recompute,hybrid --copy-engines 2 \
      --memory-cap "$cap" --json >"$scratch/$(basename "$trace" .json).$cap.result.json"
  done
done

python3 - "$scratch"/*.result.json <<'PY'
import json, os, sys
targets = {30: 25.0, 50: 8.0, 70: 2.0}
print(f"{'memory cap':10s} {'trace':16s} {'budget':>6s}  {'peak %':>8s} {'recompute %':>11s} {'hybrid %':>9s}  "
      f"{'bound %':>7s} {'recomputes':>10s} {'target':>6s}  result")
met = total = unreachable = 0
rows = []
for path in sys.argv[1:]:
    name, cap = os.path.basename(path).removesuffix(".result.json").rsplit(".", 1)
    by_budget = {}
    comparison = json.load(open(path))
    for r in comparison["results"]:
        r["compute_ms"] = comparison["trace"]["compute_ms"]
        by_budget.setdefault(round(r["budget_percent"]), {})[r["planner"]] = r
    for percent, plans in sorted(by_budget.items()):
        rows.append((cap, name, percent, plans))
for cap, name, percent, plans in sorted(rows, key=lambda r: (r[0] != "unlimited", r[1], r[2])):
    p, rc, h = plans["peak"], plans["recompute"], plans["hybrid"]
    def shown(r):
        return f"{r['overhead_percent']:.1f}" if r["feasible"] else "infeas."
    target = targets.get(percent)
    total += 1
    # The least overhead any plan can have (report/overhead_bound.h): a target
    # below it cannot be met.
    bound_ms = h.get("overhead_lower_bound_ms")
    compute_ms = h["compute_ms"]
    bound = 100.0 * bound_ms / compute_ms if bound_ms is not None and compute_ms > 0 else None
    if not h["feasible"]:
        # Below every planner's floor, or worse than a plan that fits.
        result = "WORSE: infeasible" if p["feasible"] or rc["feasible"] else "no plan fits (below the floor)"
    else:
        ok_target = target is not None and h["overhead_percent"] <= target
        met += ok_target
        above = [r["planner"] for r in (p, rc) if r["feasible"] and h["overhead_percent"] > r["overhead_percent"] + 1e-6]
        result = ("ok" if ok_target else "missed") + (" ABOVE " + ",".join(above) if above else "")
        if not ok_target and bound is not None and bound > target:
            unreachable += 1
            result += " (no plan can: the bound is above the target)"
    shown_bound = f"{bound:.1f}" if bound is not None else "-"
    print(f"{cap:10s} {name:16s} {percent:5d}%  {shown(p):>8s} {shown(rc):>11s} {shown(h):>9s}  "
          f"{shown_bound:>7s} {h['recompute_count']:10d} {target:5.0f}%  {result}")
print(f"hybrid within target in {met} of {total} cases; {unreachable} of the others have a target below what any "
      "plan can reach")
PY
