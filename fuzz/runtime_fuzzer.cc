// The runtime on structure-aware input: a small random trace and a schedule
// (a registered planner's, or random actions of the four storage kinds) are
// replayed through the residency manager on the HostBackend, with random
// device-arena and pinned-pool capacities, one or two copy engines, and at
// most one injected backend failure (an allocation, a copy, an event record or
// a host function that fails once; tests/testing/failing_backend.h). The step is the checksummed program of the
// stress tests (tests/exec/checksum_program.h): every storage access checks
// that the bytes are those last written, and the program re-runs ops for the
// schedule's recomputes (checking their inputs, rewriting their outputs).
//  - No read ever sees wrong bytes.
//  - A step fails only for a reason: the validator's problems, a capacity that
//    is too small, or the injected failure. A valid schedule with room enough
//    and nothing injected succeeds, with the validator's faults (and, for a
//    planner's schedule, its bytes moved).
//  - Whatever happened, resetting the manager and draining the pool leaves no
//    device memory, pinned block, host allocation, event or storage behind.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "exec/checksum_program.h"
#include "fuzz_support.h"
#include "testing/failing_backend.h"
#include "hyperoffload/check/validator.h"
#include "hyperoffload/exec/replay_executor.h"
#include "hyperoffload/io/schedule_json.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/runtime/host_backend.h"
#include "hyperoffload/runtime/residency_manager.h"

using namespace hyperoffload;

namespace {

// Mostly plausible offloads (copy out after an access, release, copy back
// before a later one), plus actions of any storage kind anywhere.
Schedule random_schedule(FuzzedDataProvider& in, const Trace& trace) {
  Schedule schedule;
  schedule.planner = "fuzz";
  if (trace.storage_count() == 0 || trace.op_count() == 0) return schedule;
  const StorageAccesses accesses(trace);
  const int offloads = in.ConsumeIntegralInRange<int>(0, 6);
  for (int k = 0; k < offloads; ++k) {
    const auto s = in.ConsumeIntegralInRange<StorageIndex>(0, trace.storage_count() - 1);
    if (!accesses.accessed(s)) continue;
    const OpIndex first = accesses.first_op(s), last = accesses.last_op(s);
    const OpIndex a = in.ConsumeIntegralInRange<OpIndex>(first, last);
    const StorageId id = trace.storage(s).id;
    schedule.add(a, Phase::kPost, ActionKind::kCopyD2H, id);
    schedule.add(a, Phase::kPost, ActionKind::kReleaseDevice, id);
    if (a < last && in.ConsumeBool()) schedule.add(in.ConsumeIntegralInRange<OpIndex>(a + 1, last), Phase::kPre,
                                                   ActionKind::kCopyH2D, id);
    if (in.ConsumeBool()) schedule.add(last, Phase::kPost, ActionKind::kReleaseHost, id);
  }
  const int noise = in.ConsumeIntegralInRange<int>(0, 4);
  for (int k = 0; k < noise; ++k) {
    schedule.add(in.ConsumeIntegralInRange<OpIndex>(0, trace.op_count() - 1), in.ConsumeBool() ? Phase::kPost : Phase::kPre,
                 static_cast<ActionKind>(in.ConsumeIntegralInRange<int>(0, 3)),
                 trace.storage(in.ConsumeIntegralInRange<StorageIndex>(0, trace.storage_count() - 1)).id);
  }
  std::stable_sort(schedule.actions.begin(), schedule.actions.end(), [](const Action& x, const Action& y) {
    return std::pair(x.op, x.phase) < std::pair(y.op, y.phase);
  });
  return schedule;
}

Result<StepStats> replay(ResidencyManager& residency, const std::shared_ptr<const ReplayPlan>& plan,
                         StorageId id_offset) {
  testing::ChecksumProgram program(plan->trace());
  ReplayOptions options;
  options.recompute = [&program](RecomputeCall& call) { return program.recompute(call); };
  HO_ASSIGN_OR_RETURN(std::unique_ptr<ReplayExecutor> executor, ReplayExecutor::start(residency, plan, options));
  HO_RETURN_IF_ERROR(program.run(*executor, id_offset));
  HO_ASSIGN_OR_RETURN(ReplayResult result, executor->finish());
  HO_RETURN_IF_ERROR(program.verify_retained(*executor, id_offset));
  return result.stats;
}

std::int64_t round_up(std::int64_t bytes, std::int64_t alignment) { return (bytes + alignment - 1) / alignment * alignment; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  fuzz::TraceShape shape;
  shape.max_ops = 16;
  shape.max_storages = 10;
  shape.max_size_bytes = 4096;
  shape.extreme_times = false;
  shape.replayable = true;
  std::optional<Trace> trace = fuzz::decode_trace(in, shape);
  if (!trace) return 0;

  Schedule schedule;
  bool planned = false;  // a planner's schedule (else random actions)
  const auto names = planner_names();
  const std::size_t choice = in.ConsumeIntegralInRange<std::size_t>(0, names.size());
  if (choice < names.size() && names[choice] != "optimal") {
    Result<PlanResult> plan = (*make_planner(names[choice]))->plan(*trace, fuzz::decode_budget(in, *trace));
    FUZZ_CHECK(plan.has_value(), "{} failed: {}", names[choice], plan ? "" : plan.error().message);
    schedule = std::move(plan->schedule);
    planned = true;
  } else {
    schedule = random_schedule(in, *trace);
  }
  const ValidationReport report = validate_schedule(*trace, schedule);

  // Capacities: ample (far more than every storage at once, so neither
  // fragmentation nor deferred frees can exhaust them) or drawn up to about
  // what every storage at once needs.
  constexpr std::int64_t kAlignment = 64;
  constexpr std::int64_t kAmpleBytes = std::int64_t{1} << 24;  // the arena only costs the pages it touches
  std::int64_t all_bytes = 0;
  for (const StorageInfo& s : trace->storages()) all_bytes += round_up(s.size_bytes, kAlignment) + kAlignment;
  const bool ample_device = in.ConsumeIntegralInRange<int>(0, 3) != 0;
  const bool ample_host = in.ConsumeIntegralInRange<int>(0, 3) != 0;
  const std::int64_t device_capacity = ample_device ? kAmpleBytes : in.ConsumeIntegralInRange<std::int64_t>(0, all_bytes);
  const std::int64_t host_capacity = ample_host ? kAmpleBytes : in.ConsumeIntegralInRange<std::int64_t>(0, 2 * all_bytes);
  const CopyEngines engines = in.ConsumeBool() ? CopyEngines::kOne : CopyEngines::kTwo;
  const std::int64_t fail_at = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::int64_t>(1, 400);

  // HYPEROFFLOAD_FUZZ_VERBOSE=1 prints the case (to rerun a finding by hand).
  static const bool verbose = std::getenv("HYPEROFFLOAD_FUZZ_VERBOSE") != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%s\n%s\ndevice capacity %lld, host capacity %lld, %d engines, fail at call %lld\n",
                 trace_to_json(*trace).c_str(), schedule_to_json(schedule).c_str(),
                 static_cast<long long>(device_capacity), static_cast<long long>(host_capacity),
                 static_cast<int>(engines), static_cast<long long>(fail_at));
  }
  Result<std::unique_ptr<HostBackend>> host = HostBackend::create({.device_capacity_bytes = device_capacity,
                                                                   .device_alignment_bytes = kAlignment,
                                                                   .copy_engines = engines,
                                                                   .spin_before_sleep_us = 0,
                                                                   .stream_queue_capacity = 16});
  FUZZ_CHECK(host.has_value(), "HostBackend::create: {}", host ? "" : host.error().message);
  {
    testing::FailingBackend backend(**host);
    backend.fail_call(testing::BackendCall::kAny, fail_at);
    EventPool events(backend);
    PinnedHostPool pool(backend, {.capacity_bytes = host_capacity});
    ResidencyManager residency(backend, pool, events);

    Result<std::shared_ptr<const ReplayPlan>> plan = ReplayPlan::create(*trace, schedule);
    if (plan) {
      // Two steps with different caller ids, as a training loop runs them.
      for (StorageId offset : {StorageId{1} << 20, StorageId{3} << 20}) {
        Result<StepStats> stats = replay(residency, *plan, offset);
        if (verbose) {
          std::fprintf(stderr, "step: %s; injected failure: %s\n", stats ? "ok" : stats.error().message.c_str(),
                       backend.failed() ? "yes" : "no");
        }
        if (stats) {
          // The runtime skips actions on storages the program has freed (after
          // their last access; random schedules have such actions, a planner's
          // do not) and finish() pages back held storages a schedule left on
          // the host; the validator does neither.
          if (report.valid()) {
            FUZZ_CHECK(stats->faults == static_cast<std::int64_t>(report.faults.size()), "replayed {} faults, validated {}",
                       stats->faults, report.faults.size());
          }
          if (report.valid() && planned) {
            FUZZ_CHECK(stats->d2h_bytes == report.d2h_bytes &&
                           (stats->end_restores == 0 ? stats->h2d_bytes == report.h2d_bytes
                                                     : stats->h2d_bytes >= report.h2d_bytes),
                       "replayed d2h {} h2d {} ({} restored at the end), validated d2h {} h2d {}", stats->d2h_bytes,
                       stats->h2d_bytes, stats->end_restores, report.d2h_bytes, report.h2d_bytes);
          }
        } else {
          const Error& error = stats.error();
          FUZZ_CHECK(error.message.find("does not hold version") == std::string::npos, "corrupted data: {}",
                     error.message);
          // A retained storage whose data the schedule dropped cannot be handed
          // back at the end; the validator does not check the end of the step.
          // (ReplayExecutor::finish names it: "ends holding ... dropped").
          const bool unrestorable = error.message.find("restoring held storage") != std::string::npos ||
                                    error.message.find("whose data the plan dropped") != std::string::npos;
          FUZZ_CHECK(!report.valid() || !ample_device || !ample_host || backend.failed() || unrestorable,
                     "a valid schedule failed with room enough and nothing injected: {}", error.message);
        }
        // Leave no storage behind, whatever happened (a second reset retries
        // what an injected failure interrupted).
        if (!residency.reset()) {
          Status again = residency.reset();
          FUZZ_CHECK(again.has_value(), "reset failed twice: {}", again ? "" : again.error().message);
        }
      }
    } else {
      FUZZ_CHECK(!report.valid(), "ReplayPlan rejected a valid schedule: {}", plan.error().message);
    }
    FUZZ_CHECK(residency.stats().storages == 0, "{} storages still tracked", residency.stats().storages);
    Status drained = pool.drain();
    FUZZ_CHECK(drained.has_value(), "pool drain: {}", drained ? "" : drained.error().message);
    FUZZ_CHECK(pool.stats().current_bytes == 0 && pool.stats().pending_bytes == 0,
               "pinned blocks left: {} in use, {} pending", pool.stats().current_bytes, pool.stats().pending_bytes);
    FUZZ_CHECK((*host)->device_memory_stats().in_use_bytes == 0, "{} device bytes left",
               (*host)->device_memory_stats().in_use_bytes);
    Status trimmed = pool.trim();
    FUZZ_CHECK(trimmed.has_value(), "pool trim: {}", trimmed ? "" : trimmed.error().message);
    FUZZ_CHECK((*host)->host_bytes_in_use() == 0, "{} pinned host bytes left", (*host)->host_bytes_in_use());
  }
  return 0;
}
