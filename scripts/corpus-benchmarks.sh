#!/usr/bin/env bash
# Planning time and memory on the real-model corpus (examples/traces/corpus/,
# python/tools/capture_corpus.py; issue 34): every planner (greedy, peak,
# hybrid, recompute, dtr) on every trace at each budget (default 20%, 50% and
# 80% of the trace's unplanned peak). Per cell: the planning time the CLI's
# `plan` reports (planning alone, the budget policy's validation included),
# the whole process's wall time and max RSS (/usr/bin/time: parse, plan,
# validate, simulate for the summary, write), and whether the plan is valid.
# Prints a Markdown table, one row per trace and planner; --repeats N takes
# the best of N runs per cell, interleaving the planners (a noisy machine
# slows a run, never speeds it up).
#
#   scripts/corpus-benchmarks.sh [--budgets "20 50 80"] [--repeats 3] [trace.json ...]
#
# Needs build/bin/hyperoffload ($HYPEROFFLOAD_CLI overrides) and /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
budgets="20 50 80"
repeats=1
traces=()
while (($#)); do
  case "$1" in
    --budgets) budgets=$2; shift ;;
    --repeats) repeats=$2; shift ;;
    -*) echo "usage: $0 [--budgets \"20 50 80\"] [--repeats N] [trace.json ...]" >&2; exit 2 ;;
    *) traces+=("$1") ;;
  esac
  shift
done
((${#traces[@]})) || traces=(examples/traces/corpus/*.json)
cli=${HYPEROFFLOAD_CLI:-build/bin/hyperoffload}
planners=(greedy peak hybrid recompute dtr)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

printf '| trace | ops | accesses | planner |'
for b in $budgets; do printf ' %s%%: plan ms / wall s / RSS MiB |' "$b"; done
printf '\n|---|---|---|---|'
for _ in $budgets; do printf -- '---|'; done
printf '\n'
invalid=0
for trace in "${traces[@]}"; do
  size=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(len(t["ops"]), sum(len(o["accesses"]) for o in t["ops"]))' "$trace")
  declare -A best_plan=() best_wall=() best_rss=() valid=()
  for ((r = 0; r < repeats; ++r)); do
    for b in $budgets; do
      for p in "${planners[@]}"; do
        key="$p/$b"
        out="$scratch/out.txt"
        if ! /usr/bin/time -f "%e %M" -o "$scratch/time.txt" "$cli" plan "$trace" --budget "$b%" --planner "$p" \
            -o "$scratch/schedule.json" >"$out" 2>&1; then
          valid[$key]=no
        fi
        grep -q '^check     valid' "$out" || valid[$key]=no
        plan_ms=$(sed -n 's/^planner .* in \([0-9.]*\) ms.*/\1/p' "$out")
        read -r wall rss_kib <"$scratch/time.txt"
        rss_mib=$(awk -v k="$rss_kib" 'BEGIN {printf "%.0f", k / 1024}')
        if [[ -z "${best_plan[$key]:-}" ]] || awk -v a="$plan_ms" -v b="${best_plan[$key]}" 'BEGIN {exit !(a < b)}'; then
          best_plan[$key]=$plan_ms
        fi
        if [[ -z "${best_wall[$key]:-}" ]] || awk -v a="$wall" -v b="${best_wall[$key]}" 'BEGIN {exit !(a < b)}'; then
          best_wall[$key]=$wall
        fi
        if [[ -z "${best_rss[$key]:-}" ]] || ((rss_mib < best_rss[$key])); then best_rss[$key]=$rss_mib; fi
      done
    done
  done
  for p in "${planners[@]}"; do
    printf '| %s | %s | %s | %s |' "$(basename "$trace" .json)" "${size% *}" "${size#* }" "$p"
    for b in $budgets; do
      key="$p/$b"
      mark=""
      [[ "${valid[$key]:-yes}" == no ]] && { mark=" INVALID"; invalid=1; }
      printf ' %.1f / %.3f / %s%s |' "${best_plan[$key]}" "${best_wall[$key]}" "${best_rss[$key]}" "$mark"
    done
    printf '\n'
  done
  unset best_plan best_wall best_rss valid
done
exit $invalid
