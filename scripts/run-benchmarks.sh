#!/usr/bin/env bash
# Runs every Google Benchmark program and the end-to-end scale check, printing
# what BENCHMARKS.md records. Usage: scripts/run-benchmarks.sh [benchmark filter]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
filter="${1:-.}"

echo "== machine"
echo "$(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo

for program in "$bin"/*_benchmark; do
  [[ -x "$program" ]] || continue
  echo "== $(basename "$program")"
  "$program" --benchmark_filter="$filter" --benchmark_min_time=0.5
  echo
done

echo "== end to end: 1M ops — parse, plan, validate, write; best of 3, planners interleaved"
# Two traces: the 1M-op, 1M-storage random trace and a 1,008,010-op
# transformer step (36k blocks of 28 ops: a chain of layers, 2.1M storages,
# 1M distinct op names), planned at 50% of its unplanned peak.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$bin/hyperoffload" generate random --ops 1000000 --storages 1000000 --seed 1 -o "$scratch/random.json"
"$bin/hyperoffload" generate transformer --layers 36000 --hidden 256 --heads 4 --seq 128 --batch 4 --vocab 1000 \
  --dropout -o "$scratch/chain.json" >/dev/null
for trace in random chain; do
  ls -l "$scratch/$trace.json" | awk -v t="$trace" '{printf "%s trace file: %.0f MiB\n", t, $5 / 1048576}'
done
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2 3; do
  for trace in random chain; do
    budget=()
    [[ "$trace" == chain ]] && budget=(--budget 50%)
    for planner in greedy peak hybrid recompute; do
      /usr/bin/time -f "wall %e s, max RSS %M KiB" -o "$scratch/time.txt" \
        "$bin/hyperoffload" plan "$scratch/$trace.json" "${budget[@]}" --planner "$planner" --timings \
        -o "$scratch/schedule.json" >"$scratch/out.txt"
      grep -q '^check     valid' "$scratch/out.txt" || echo "$trace $planner: INVALID"
      echo "round $round $trace $planner: $(sed -n 's/^timings   //p' "$scratch/out.txt"); $(cat "$scratch/time.txt")"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
