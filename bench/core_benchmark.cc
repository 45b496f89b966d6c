// Core pipeline benchmarks: parse, plan (greedy), validate and write at 10k,
// 100k and 1M ops (as many storages as ops). Traces are generated once per size
// outside the timed loops.
//   build/bin/core_benchmark --benchmark_min_time=1
#include <map>

#include <benchmark/benchmark.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/io/schedule_json.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/plan/greedy_planner.h"

namespace hyperoffload {
namespace {

const Trace& trace_of_size(std::int64_t ops) {
  static std::map<std::int64_t, Trace> cache;
  auto it = cache.find(ops);
  if (it == cache.end()) {
    RandomTraceOptions options;
    options.op_count = static_cast<std::int32_t>(ops);
    options.storage_count = static_cast<std::int32_t>(ops);
    options.seed = 42;
    it = cache.emplace(ops, generate_random_trace(options)).first;
  }
  return it->second;
}

const std::string& json_of_size(std::int64_t ops) {
  static std::map<std::int64_t, std::string> cache;
  auto it = cache.find(ops);
  if (it == cache.end()) it = cache.emplace(ops, trace_to_json(trace_of_size(ops))).first;
  return it->second;
}

void BM_ParseTrace(benchmark::State& state) {
  const std::string& json = json_of_size(state.range(0));
  for (auto _ : state) {
    Result<Trace> trace = parse_trace_json(json);
    benchmark::DoNotOptimize(trace);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(json.size()));
  state.counters["ops"] = static_cast<double>(state.range(0));
}

void BM_PlanGreedy(benchmark::State& state) {
  const Trace& trace = trace_of_size(state.range(0));
  const GreedyPlanner planner;
  for (auto _ : state) {
    Result<PlanResult> plan = planner.plan(trace, trace.memory_limit_bytes());
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_Validate(benchmark::State& state) {
  const Trace& trace = trace_of_size(state.range(0));
  const Schedule schedule = GreedyPlanner().plan(trace, trace.memory_limit_bytes())->schedule;
  for (auto _ : state) {
    ValidationReport report = validate_schedule(trace, schedule);
    benchmark::DoNotOptimize(report);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_WriteScheduleJson(benchmark::State& state) {
  const Trace& trace = trace_of_size(state.range(0));
  const Schedule schedule = GreedyPlanner().plan(trace, trace.memory_limit_bytes())->schedule;
  for (auto _ : state) {
    std::string json = schedule_to_json(schedule);
    benchmark::DoNotOptimize(json);
  }
  state.counters["actions"] = static_cast<double>(schedule.actions.size());
}

void BM_WriteTraceJson(benchmark::State& state) {
  const Trace& trace = trace_of_size(state.range(0));
  for (auto _ : state) {
    std::string json = trace_to_json(trace);
    benchmark::DoNotOptimize(json);
  }
}

#define HO_SIZES ->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond)
BENCHMARK(BM_ParseTrace) HO_SIZES;
BENCHMARK(BM_PlanGreedy) HO_SIZES;
BENCHMARK(BM_Validate) HO_SIZES;
BENCHMARK(BM_WriteScheduleJson) HO_SIZES;
BENCHMARK(BM_WriteTraceJson) HO_SIZES;

}  // namespace
}  // namespace hyperoffload

BENCHMARK_MAIN();
