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

echo "== end to end: 1M ops, 1M storages — parse, plan (greedy), validate, write"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$bin/hyperoffload" generate random --ops 1000000 --storages 1000000 --seed 1 -o "$scratch/trace.json"
ls -l "$scratch/trace.json" | awk '{printf "trace file: %.0f MiB\n", $5 / 1048576}'
/usr/bin/time -f "wall %e s, max RSS %M KiB" "$bin/hyperoffload" plan "$scratch/trace.json" -o "$scratch/schedule.json"
