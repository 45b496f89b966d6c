// Peak planner scaling on random traces (gen/random_trace.h): 10k, 100k and 1M
// ops with half as many storages (the generator's default ratio), and 1M ops
// with 1M storages; budget 50% of the unplanned peak. The 1M-op cases are the
// issue's "< 5 s" target. The greedy planner runs on the same traces for
// reference.
//
//   build/bin/peak_planner_benchmark --benchmark_counters_tabular=true
//
// Counters: ops, candidates (interior gaps), actions, planned peak / budget.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/ir/status.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload {
namespace {

// storages_per_op_percent: 50 is the generator's default ratio, 100 one
// storage per op (as in scripts/run-benchmarks.sh's end-to-end check).
const Trace& trace_with_ops(std::int32_t ops, std::int32_t storages_per_op_percent) {
  static std::map<std::pair<std::int32_t, std::int32_t>, std::unique_ptr<Trace>> cache;
  std::unique_ptr<Trace>& slot = cache[{ops, storages_per_op_percent}];
  if (!slot) {
    RandomTraceOptions options;
    options.op_count = ops;
    options.storage_count = static_cast<std::int32_t>(std::int64_t{ops} * storages_per_op_percent / 100);
    options.seed = 1;
    options.limit_fraction = 0.5;
    slot = std::make_unique<Trace>(generate_random_trace(options));
  }
  return *slot;
}

void plan_random(benchmark::State& state, const char* planner_name) {
  const Trace& trace =
      trace_with_ops(static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)));
  const std::unique_ptr<Planner> planner = value_or_throw(make_planner(planner_name));
  PlanResult last;
  for (auto _ : state) {
    Result<PlanResult> result = planner->plan(trace, trace.memory_limit_bytes());
    if (!result) {
      state.SkipWithError(result.error().message.c_str());
      return;
    }
    last = std::move(*result);
    benchmark::DoNotOptimize(last.schedule.actions.data());
  }
  const StorageAccesses accesses(trace);
  state.counters["ops"] = static_cast<double>(trace.op_count());
  state.counters["candidates"] = static_cast<double>(internal::build_peak_model(trace, accesses).interior.size());
  state.counters["actions"] = static_cast<double>(last.schedule.actions.size());
  state.counters["peak/budget"] =
      static_cast<double>(last.planned_peak_bytes) / static_cast<double>(*trace.memory_limit_bytes());
}

void BM_PeakPlanner(benchmark::State& state) { plan_random(state, "peak"); }
void BM_GreedyPlanner(benchmark::State& state) { plan_random(state, "greedy"); }

// Arguments: ops, storages per 100 ops.
BENCHMARK(BM_PeakPlanner)
    ->Args({10'000, 50})
    ->Args({100'000, 50})
    ->Args({1'000'000, 50})
    ->Args({1'000'000, 100})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);
BENCHMARK(BM_GreedyPlanner)
    ->Args({10'000, 50})
    ->Args({100'000, 50})
    ->Args({1'000'000, 50})
    ->Args({1'000'000, 100})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);

}  // namespace
}  // namespace hyperoffload

BENCHMARK_MAIN();
