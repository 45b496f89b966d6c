#!/usr/bin/env bash
# Recompute-only against DTR on DTR's model families (issue 26): the example
# traces examples/traces/dtr_*.json (python/tests/dtr_models.py: CIFAR
# ResNet-32, a DenseNet-121 layout, a U-Net, an Inception-v4 layout, a
# transformer encoder with dropout; captured on the CPU by
# python/tools/capture_example_traces.py) at budgets of 30%, 50% and 70% of the
# unplanned peak, on a device that holds only the budget, two copy engines. For
# each cell it prints the overhead (stall plus recompute over compute) of the
# recompute-only plan, the hybrid plan and DTR's heuristic (`--planner dtr`, the
# reference), recompute-only's true limit (what one op touches plus what cannot
# be recomputed), and then a sweep from the trace's floor to 100% of the peak in
# steps of 5% (the chart in BENCHMARKS.md).
#
#   scripts/dtr-benchmarks.sh                       30/50/70% table and the sweep
#   scripts/dtr-benchmarks.sh --targets             30/50/70% table, then issue 26's targets per cell:
#                                                   recompute-only feasible wherever its limit allows,
#                                                   its overhead at most 0.8x DTR's, hybrid no worse
#                                                   than either; lists the cells that miss (exit 1 if any)
#   scripts/dtr-benchmarks.sh --link 0.25 [...]     the same with both copy directions at 0.25 GiB/s
#                                                   instead of the captured bandwidths (a link as slow,
#                                                   relative to compute, as a GPU's)
#
# Needs build/bin/hyperoffload (built here if missing; $HYPEROFFLOAD_CLI
# overrides) and python3 for the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=0
link=""
while (($#)); do
  case "$1" in
    --targets) targets=1 ;;
    --link)
      [[ $# -ge 2 && "$2" =~ ^[0-9]*\.?[0-9]+$ && ! "$2" =~ ^0*\.?0*$ ]] \
        || { echo "--link needs a positive bandwidth in GiB/s" >&2; exit 2; }
      link=$2; shift ;;
    *) echo "usage: $0 [--targets] [--link GIB_PER_S]" >&2; exit 2 ;;
  esac
  shift
done

cli=${HYPEROFFLOAD_CLI:-build/bin/hyperoffload}
if [[ ! -x "$cli" ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target hyperoffload_cli
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
models=(dtr_resnet32 dtr_densenet dtr_unet dtr_inception dtr_transformer)
for model in "${models[@]}"; do
  trace=examples/traces/$model.json
  if [[ -n "$link" ]]; then
    python3 - "$trace" "$scratch/$model.json" "$link" <<'PY'
import json, sys
document = json.load(open(sys.argv[1]))
document["d2h_bandwidth_gbps"] = document["h2d_bandwidth_gbps"] = float(sys.argv[3])
json.dump(document, open(sys.argv[2], "w"))
PY
    trace=$scratch/$model.json
  fi
  "$cli" compare "$trace" --budgets 30%,50%,70% --planners recompute,hybrid,dtr --copy-engines 2 \
    --memory-cap budget --json >"$scratch/$model.cells.json"
  if ((!targets)); then
    "$cli" compare "$trace" --sweep --planners recompute,hybrid,dtr --copy-engines 2 --memory-cap budget \
      --json >"$scratch/$model.sweep.json"
  fi
done

python3 - "$targets" "${link:-captured}" "$scratch" "${models[@]}" <<'PY'
import json, os, sys
targets, link, scratch, models = sys.argv[1] == "1", sys.argv[2], sys.argv[3], sys.argv[4:]
MiB = 1 << 20
def shown(r):
    return f"{r['overhead_percent']:.1f}" if r["feasible"] else "infeas."
print(f"link: {link} (GiB/s each way); device holds only the budget; 2 copy engines; overhead = (stall + recompute) "
      "/ compute, %")
print(f"{'trace':16s} {'budget':>6s} {'MiB':>8s} {'limit MiB':>9s}  {'recompute %':>11s} {'hybrid %':>9s} {'dtr %':>8s} "
      f"{'rc/dtr':>6s}")
misses, checked = [], 0
for model in models:
    comparison = json.load(open(os.path.join(scratch, f"{model}.cells.json")))
    limit = comparison["recompute_only_limit"]
    cells = {}
    for r in comparison["results"]:
        cells.setdefault(round(r["budget_percent"]), {})[r["planner"]] = r
    for percent, plans in sorted(cells.items()):
        rc, h, d = plans["recompute"], plans["hybrid"], plans["dtr"]
        ratio = rc["overhead_percent"] / d["overhead_percent"] if rc["feasible"] and d["feasible"] and \
            d["overhead_percent"] > 0 else None
        print(f"{model:16s} {percent:5d}% {rc['budget_bytes'] / MiB:8.2f} {limit['bytes'] / MiB:9.2f}  "
              f"{shown(rc):>11s} {shown(h):>9s} {shown(d):>8s} {f'{ratio:.2f}' if ratio is not None else '-':>6s}")
        if not targets:
            continue
        where = f"{model} at {percent}%"
        allowed = rc["budget_bytes"] >= limit["bytes"]
        # 1. Recompute-only feasible wherever the true limit allows.
        checked += 1
        if allowed and not rc["feasible"]:
            misses.append(f"{where}: recompute-only infeasible although its limit ({limit['bytes'] / MiB:.2f} MiB at "
                          f"op {limit['op']}) is within the budget; its floor is {rc['floor']['bytes'] / MiB:.2f} MiB "
                          f"at op {rc['floor']['op']}")
        # 2. Its overhead at most 0.8x DTR's (where both fit; where only recompute-only fits it beats DTR).
        if rc["feasible"] and d["feasible"]:
            checked += 1
            if rc["overhead_percent"] > 0.8 * d["overhead_percent"] + 1e-9:
                same = rc["recompute_count"] == d["recompute_count"] and abs(rc["recompute_ms"] - d["recompute_ms"]) < 1e-6
                why = ("the recompute-only plan is DTR's own eviction walk: of the plans it weighs, the quickest "
                       "that fits" if same else "recompute-only's own plan beats DTR's walk by less than 20%")
                misses.append(f"{where}: recompute-only {rc['overhead_percent']:.2f}% is {ratio:.2f}x DTR's "
                              f"{d['overhead_percent']:.2f}% ({why})")
        # 3. Hybrid no worse than either.
        checked += 1
        worse = [r["planner"] for r in (rc, d) if r["feasible"] and
                 (not h["feasible"] or h["overhead_percent"] > r["overhead_percent"] + 1e-9)]
        if worse:
            misses.append(f"{where}: hybrid {shown(h)}% is worse than {', '.join(worse)}")

if targets:
    below = []
    for model in models:
        comparison = json.load(open(os.path.join(scratch, f"{model}.cells.json")))
        limit = comparison["recompute_only_limit"]["bytes"]
        below += [f"{model} at {round(r['budget_percent'])}%" for r in comparison["results"]
                  if r["planner"] == "recompute" and r["budget_bytes"] < limit]
    print()
    print("below recompute-only's true limit (no recompute-only plan can fit; not a target): " +
          (", ".join(below) if below else "none"))
    print(f"targets: {checked - len(misses)} of {checked} checks met")
    for miss in misses:
        print(f"MISS {miss}")
    sys.exit(1 if misses else 0)

for model in models:
    sweep = json.load(open(os.path.join(scratch, f"{model}.sweep.json")))
    limit = sweep["recompute_only_limit"]["bytes"]
    print()
    print(f"{model}: overhead % against the budget, from the floor ({sweep['floor_bytes'] / MiB:.2f} MiB) to the "
          f"unplanned peak ({sweep['trace']['unplanned_peak_bytes'] / MiB:.2f} MiB); recompute-only limit "
          f"{limit / MiB:.2f} MiB; {len(sweep['violations'])} monotonicity violation(s)")
    print(f"  {'budget %':>8s} {'MiB':>8s}  {'recompute':>9s} {'hybrid':>7s} {'dtr':>7s}")
    for point in sweep["budgets"]:
        plans = {r["planner"]: r for r in point["results"]}
        print(f"  {point['budget_percent']:7.1f}% {point['budget_bytes'] / MiB:8.2f}  {shown(plans['recompute']):>9s} "
              f"{shown(plans['hybrid']):>7s} {shown(plans['dtr']):>7s}")
PY
