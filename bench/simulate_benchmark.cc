// Event simulator benchmarks at 10k, 100k and 1M ops (as many storages as
// ops), on random traces planned by greedy. Traces and schedules are built once
// per size outside the timed loops.
//   build/bin/simulate_benchmark --benchmark_min_time=1
#include <map>
#include <utility>

#include <benchmark/benchmark.h>

#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/io/timeline_json.h"
#include "hyperoffload/plan/greedy_planner.h"
#include "hyperoffload/sim/simulator.h"

namespace hyperoffload {
namespace {

struct Planned {
  Trace trace;
  Schedule schedule;
};

const Planned& planned_of_size(std::int64_t ops) {
  static std::map<std::int64_t, Planned> cache;
  auto it = cache.find(ops);
  if (it == cache.end()) {
    RandomTraceOptions options;
    options.op_count = static_cast<std::int32_t>(ops);
    options.storage_count = static_cast<std::int32_t>(ops);
    options.seed = 42;
    Trace trace = generate_random_trace(options);
    Schedule schedule = GreedyPlanner().plan(trace, trace.memory_limit_bytes())->schedule;
    it = cache.emplace(ops, Planned{std::move(trace), std::move(schedule)}).first;
  }
  return it->second;
}

void run_simulation(benchmark::State& state, CopyEngines engines, RecordTimeline record) {
  const Planned& planned = planned_of_size(state.range(0));
  SimulatorOptions options;
  options.copy_engines = engines;
  options.record_timeline = record;
  double stall_ms = 0.0;
  for (auto _ : state) {
    SimulationResult result = simulate(planned.trace, planned.schedule, options);
    stall_ms = result.stall_ms;
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  state.counters["actions"] = static_cast<double>(planned.schedule.actions.size());
  state.counters["stall_ms"] = stall_ms;
}

void BM_Simulate(benchmark::State& state) { run_simulation(state, CopyEngines::kTwo, RecordTimeline::kNo); }

void BM_SimulateOneEngine(benchmark::State& state) { run_simulation(state, CopyEngines::kOne, RecordTimeline::kNo); }

void BM_SimulateWithTimeline(benchmark::State& state) {
  run_simulation(state, CopyEngines::kTwo, RecordTimeline::kYes);
}

void BM_WriteTimelineJson(benchmark::State& state) {
  const Planned& planned = planned_of_size(state.range(0));
  SimulatorOptions options;
  options.record_timeline = RecordTimeline::kYes;
  const SimulationResult result = simulate(planned.trace, planned.schedule, options);
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string json = timeline_to_chrome_json(planned.trace, result.timeline);
    bytes = json.size();
    benchmark::DoNotOptimize(json);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  state.counters["events"] = static_cast<double>(result.timeline.spans.size() + result.timeline.memory.size());
}

BENCHMARK(BM_Simulate)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateOneEngine)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateWithTimeline)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WriteTimelineJson)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hyperoffload

BENCHMARK_MAIN();
