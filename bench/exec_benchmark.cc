// Executor benchmarks: the runtime's per-op cost in a replayed step with an
// empty schedule (nothing to copy: pure hook overhead), and in a warmup step,
// for outputs adopted from the caller (the PyTorch path) and outputs
// allocated by the runtime; and the cost of recompute bookkeeping in a
// replay (BM_ReplayRecomputeOverheadPerOp: every op re-run once by the plan,
// through a RecomputeFn that only allocates what it must regenerate).
//
//   build/bin/exec_benchmark
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "hyperoffload/exec/replay_executor.h"
#include "hyperoffload/exec/warmup_executor.h"
#include "hyperoffload/runtime/host_backend.h"

namespace hyperoffload {
namespace {

constexpr int kOps = 1000;
constexpr std::int64_t kBytes = 256;

// op k reads storage k-1 (and k-2) and writes storage k: a chain like a
// forward pass. Each storage is dropped after its last reader.
Trace chain_trace(Recomputable recomputable = Recomputable::kNo) {
  TraceBuilder builder;
  for (int k = 0; k < kOps; ++k) (void)builder.add_storage(k, kBytes);
  for (int k = 0; k < kOps; ++k) {
    (void)builder.add_op("aten::add", 0.01, k >= 2 ? recomputable : Recomputable::kNo);
    if (k >= 2) builder.add_access(k - 2, AccessKind::kRead);
    if (k >= 1) builder.add_access(k - 1, AccessKind::kRead);
    builder.add_access(k, AccessKind::kWrite);
  }
  return *std::move(builder).build();
}

struct Runtime {
  Runtime()
      : backend(std::move(*HostBackend::create({.device_capacity_bytes = 64 << 20}))),
        events(*backend),
        pool(*backend),
        residency(*backend, pool, events) {}
  std::unique_ptr<HostBackend> backend;
  EventPool events;
  PinnedHostPool pool;
  ResidencyManager residency;
};

enum class Outputs { kAdopted, kAllocated };

// One step of the chain through `hooks`; ids start at `base`.
void run_chain(StepHooks& hooks, StorageId base, Outputs outputs, std::vector<unsigned char>& buffer) {
  StorageId inputs[2];
  for (int k = 0; k < kOps; ++k) {
    std::size_t n = 0;
    if (k >= 2) inputs[n++] = base + k - 2;
    if (k >= 1) inputs[n++] = base + k - 1;
    (void)hooks.on_op_begin("aten::add", std::span<const StorageId>(inputs, n), {});
    OpOutput out{base + k, kBytes, nullptr, {}};
    if (outputs == Outputs::kAdopted) {
      out.device_ptr = buffer.data() + static_cast<std::size_t>(k % 64) * kBytes;
    } else {
      (void)hooks.allocate_output(base + k, kBytes);
    }
    (void)hooks.on_op_end({&out, 1}, {});
    if (k >= 2) (void)hooks.on_storage_freed(base + k - 2);
  }
  (void)hooks.on_storage_freed(base + kOps - 2);
  (void)hooks.on_storage_freed(base + kOps - 1);
}

void BM_ReplayOverheadPerOp(benchmark::State& state) {
  const auto outputs = static_cast<Outputs>(state.range(0));
  Runtime rt;
  auto plan = *ReplayPlan::create(chain_trace(), Schedule{"empty", {}});
  std::vector<unsigned char> buffer(64 * kBytes);
  StorageId base = 0;
  for (auto _ : state) {
    auto replay = *ReplayExecutor::start(rt.residency, plan);
    base += kOps;
    run_chain(*replay, base, outputs, buffer);
    benchmark::DoNotOptimize(replay->finish());
  }
  state.SetItemsProcessed(state.iterations() * kOps);
  state.SetLabel(outputs == Outputs::kAdopted ? "adopted outputs" : "runtime-allocated outputs");
}
BENCHMARK(BM_ReplayOverheadPerOp)->Arg(0)->Arg(1);

// Op k (k >= 2) is dropped after op k+1 and recomputed before op k+2, its
// last reader: one recompute per op, and storage k-2 (freed by the program
// after op k, its last traced reader) kept by the runtime for it.
void BM_ReplayRecomputeOverheadPerOp(benchmark::State& state) {
  Runtime rt;
  std::vector<Action> actions;
  for (int k = 2; k + 2 < kOps; ++k) {
    actions.push_back({k + 1, Phase::kPost, ActionKind::kReleaseDevice, k});
    actions.push_back({k + 2, Phase::kPre, ActionKind::kRecompute, 0, k});
  }
  std::stable_sort(actions.begin(), actions.end(), [](const Action& a, const Action& b) {
    return std::pair(a.op, a.phase) < std::pair(b.op, b.phase);
  });
  auto plan = *ReplayPlan::create(chain_trace(Recomputable::kYes), Schedule{"recompute", std::move(actions)});
  std::vector<unsigned char> buffer(64 * kBytes);
  ReplayOptions options;
  options.recompute = [](RecomputeCall& call) -> Status {
    for (std::size_t j = 0; j < call.output_count(); ++j) {
      if (call.output_needed(j)) HO_RETURN_IF_ERROR(call.allocate_output(j));
    }
    return ok_status();
  };
  StorageId base = 0;
  for (auto _ : state) {
    auto replay = *ReplayExecutor::start(rt.residency, plan, options);
    base += kOps;
    run_chain(*replay, base, Outputs::kAllocated, buffer);
    benchmark::DoNotOptimize(replay->finish());
  }
  state.SetItemsProcessed(state.iterations() * kOps);
  state.SetLabel("runtime-allocated outputs, one recompute per op");
}
BENCHMARK(BM_ReplayRecomputeOverheadPerOp);

void BM_WarmupOverheadPerOp(benchmark::State& state) {
  const auto outputs = static_cast<Outputs>(state.range(0));
  Runtime rt;
  std::vector<unsigned char> buffer(64 * kBytes);
  StorageId base = 0;
  for (auto _ : state) {
    auto warmup = *WarmupExecutor::start(rt.residency, {std::nullopt, 0, std::nullopt});
    base += kOps;
    run_chain(*warmup, base, outputs, buffer);
    benchmark::DoNotOptimize(warmup->finish());
  }
  state.SetItemsProcessed(state.iterations() * kOps);
  state.SetLabel(outputs == Outputs::kAdopted ? "adopted outputs" : "runtime-allocated outputs");
}
BENCHMARK(BM_WarmupOverheadPerOp)->Arg(0)->Arg(1);

}  // namespace
}  // namespace hyperoffload

BENCHMARK_MAIN();
