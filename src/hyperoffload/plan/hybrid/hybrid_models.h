// Internal: what the hybrid planner (hybrid_planner.h) knows about a trace at
// a budget before it makes any plan — the models its plans are made from and
// the facts about the unplanned peak that its decision sets are tuned by.
// Built once per budget; read-only afterwards.
//
// Bound, with W = ops + accesses, S storages and d the most accesses of one
// op: O(W + S) on the calling thread (the accesses, the peak model's O(ops +
// accesses + candidates), the compute before the peak op and
// offload_step_bound.h's O(ops + storages)), beside the recompute model on a
// thread of its own, O(W + 64 W + candidates × d) (kChainWorkFactor, Note
// [Chain work], recompute_model.h). Memory O(W + S): the accesses and the two
// models, held while the budget's plans are made.
//
// Thread-safety: after wait_for_recompute_model() returns, every member is
// read-only and may be read from any thread. Before it, only the members
// above `recompute` are.
#pragma once

#include <cstdint>
#include <future>
#include <optional>

#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/ir/trace.h"
#include "hyperoffload/model/device.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/recompute/recompute_model.h"

namespace hyperoffload::internal {

class HybridModels {
 public:
  // In this order: the trace's accesses; then the recompute model, on a
  // thread of its own, while this thread builds the peak model and the peak
  // facts below. The caller may start work that needs only those (the
  // offload-only plan) before wait_for_recompute_model().
  // Precondition: trace.op_count() > 0.
  HybridModels(const Trace& of_trace, DeviceMemory memory, std::int64_t budget);
  HybridModels(const HybridModels&) = delete;
  HybridModels& operator=(const HybridModels&) = delete;

  // Takes the recompute model from its thread. Call once, before reading
  // `recompute`.
  void wait_for_recompute_model() { recompute = recompute_build_.get(); }

  // The device memory's maximum in time, for the stall estimate: the budget
  // on a device that holds only the budget, none on an unlimited one.
  std::optional<std::int64_t> memory_cap() const {
    return device_memory == DeviceMemory::kBudget ? std::optional<std::int64_t>(budget_bytes) : std::nullopt;
  }

  const Trace& trace;
  const DeviceMemory device_memory;
  const std::int64_t budget_bytes;
  const StorageAccesses accesses;
  PeakModel peak;
  // The unplanned profile's peak op (the first, among equal peaks), the
  // compute before it, in ms, and the bytes the D2H engine can take off the
  // device in that time, at most the excess over the budget.
  OpIndex peak_op = 0;
  double compute_before_peak_ms = 0.0;
  std::int64_t offloadable_at_peak = 0;
  // The least step time of any offload-only plan (offload_step_bound.h).
  double offload_only_bound_ms = 0.0;
  RecomputeModel recompute;  // set by wait_for_recompute_model()

 private:
  // Taken into `recompute` by wait_for_recompute_model(). Declared last, so
  // destroyed first: it waits for its thread, which reads `accesses`.
  std::future<RecomputeModel> recompute_build_;
};

}  // namespace hyperoffload::internal
