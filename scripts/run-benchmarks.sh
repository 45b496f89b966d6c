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

echo "== end to end: 1M ops, 1M storages — parse, plan, validate, write; best of 3, planners interleaved"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$bin/hyperoffload" generate random --ops 1000000 --storages 1000000 --seed 1 -o "$scratch/trace.json"
ls -l "$scratch/trace.json" | awk '{printf "trace file: %.0f MiB\n", $5 / 1048576}'
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in 1 2 3; do
  for planner in greedy peak hybrid recompute; do
    /usr/bin/time -f "wall %e s, max RSS %M KiB" -o "$scratch/time.txt" \
      "$bin/hyperoffload" plan "$scratch/trace.json" --planner "$planner" --timings -o "$scratch/schedule.json" \
      >"$scratch/out.txt"
    grep -q '^check     valid' "$scratch/out.txt" || echo "$planner: INVALID"
    echo "round $round $planner: $(sed -n 's/^timings   //p' "$scratch/out.txt"); $(cat "$scratch/time.txt")"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
