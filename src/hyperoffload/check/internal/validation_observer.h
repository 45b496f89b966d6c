// Internal: the validator as an observer of the one schedule walk
// (model/schedule_walk.h): the walk applies the residency rules, this
// observer words what they say as problems, faults, peaks and bytes moved.
// validate_schedule() runs it alone; simulate() runs it beside the step
// player on the same walk, so a simulation walks its schedule once.
//
//   ValidationObserver validation(trace, options);
//   const std::vector<ResolvedAction> actions = validation.resolve(schedule);
//   ScheduleWalk<ValidationObserver> walk(trace, actions);
//   validation.attach(walk.memory());
//   walk.run(validation);
//   ValidationReport report = validation.finish();
//
// Thread-safety: not shared.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/model/residency_rules.h"
#include "hyperoffload/ir/byte_format.h"
#include "hyperoffload/model/schedule_walk.h"

namespace hyperoffload::internal {

// What messages need to explain a problem, beside each storage's residency.
struct Explain {
  OpIndex last_write_op = -1;
  OpIndex released_after_op = -1;  // op whose action last released the device copy
};

class ValidationObserver : public WalkObserver<ValidationObserver, Explain> {
 public:
  ValidationObserver(const Trace& trace, const ValidatorOptions& options) : trace_(trace), options_(options) {
    if (options_.keep_profile == KeepProfile::kYes) {
      report_.resident_bytes.assign(static_cast<std::size_t>(trace_.op_count()), 0);
    }
  }

  // The schedule's actions as the walk runs them; each action dropped (op out
  // of range, unknown storage, bad recompute source) or out of order is a
  // problem.
  std::vector<ResolvedAction> resolve(const Schedule& schedule) {
    return resolve_actions(trace_, schedule, [this](std::string text) { problem(std::move(text)); });
  }
  // Before the walk runs: its memory model, read by the hooks.
  void attach(const WalkMemory& memory) { memory_ = &memory; }
  // After the walk has run.
  ValidationReport finish() {
    report_.resident_at_end_bytes = memory_->device_bytes;
    if (options_.host_budget_bytes && report_.peak_host_bytes > *options_.host_budget_bytes) {
      problem(fmt::format("peak host bytes {} ({} bytes) exceed the host budget of {} ({} bytes); plan with "
                          "--host-budget to keep within it",
                          format_bytes(report_.peak_host_bytes), report_.peak_host_bytes,
                          format_bytes(*options_.host_budget_bytes), *options_.host_budget_bytes));
    }
    return std::move(report_);
  }

  void access(OpIndex op, const Access& access, StorageIndex s, Storage state, AccessOutcome outcome) {
    switch (outcome) {
      case AccessOutcome::kResident:
      case AccessOutcome::kFirstAccess: break;
      case AccessOutcome::kFault:
        report_.faults.push_back(Fault{op, trace_.storage(s).id});
        report_.h2d_bytes += state.size_bytes;
        break;
      case AccessOutcome::kDataLoss:
        problem(fmt::format("op {} {} of storage {}: data lost (device copy released after op {} {})", op,
                            to_string(access.kind), trace_.storage(s).id, state.data.released_after_op,
                            state.residency.host_present
                                ? fmt::format("and the host copy is stale (written at op {})", state.data.last_write_op)
                                : std::string("without a host copy")));
        break;
    }
    if (access.kind == AccessKind::kWrite) state.data.last_write_op = op;
  }

  void run_op(OpIndex op) {
    if (options_.keep_profile == KeepProfile::kYes) {
      report_.resident_bytes[static_cast<std::size_t>(op)] = memory_->device_bytes;
    }
    note_peak(op, -1);
  }

  // A recompute of op k (model/residency_rules.h): every input must be resident
  // at the version op k read; every output not written since op k is resident
  // afterwards, allocated if it was released. Problems name the action.
  void recompute_input(const ResolvedAction& resolved, const RecomputeAccess& input, Storage state,
                       RecomputeInput outcome) {
    const OpIndex source = resolved.action().source_op;
    switch (outcome) {
      case RecomputeInput::kReady: break;
      case RecomputeInput::kMissing:
        problem(fmt::format("{}: input storage {} (ops[{}].accesses[{}]) is not resident (released after op {}); "
                            "copy_h2d or recompute it before the recompute",
                            where(resolved), trace_.storage(input.storage).id, input.op, input.access,
                            state.data.released_after_op));
        break;
      case RecomputeInput::kStale:
        problem(fmt::format("{}: input storage {} (ops[{}].accesses[{}]) is stale: op {} read it before op {} "
                            "wrote it again, so re-running op {} would not reproduce its outputs",
                            where(resolved), trace_.storage(input.storage).id, input.op, input.access, input.op,
                            state.data.last_write_op, source));
        break;
    }
  }
  void recompute_output(const ResolvedAction& resolved, const RecomputeAccess& output, Storage state,
                        RecomputeOutput outcome) {
    if (outcome != RecomputeOutput::kStale) return;
    problem(fmt::format("{}: output storage {} (ops[{}].accesses[{}]) is stale: op {} wrote it after op {}, "
                        "so a recompute would bring back an older version",
                        where(resolved), trace_.storage(output.storage).id, output.op, output.access,
                        state.data.last_write_op, output.op));
  }
  void recompute(const ResolvedAction& resolved, const RecomputeAccesses&, std::int64_t regenerated_bytes) {
    ++report_.recompute_count;
    report_.regenerated_bytes += regenerated_bytes;
    note_peak(resolved.action().op, resolved.action().source_op);
  }

  void copy_to_host(const ResolvedAction& resolved, Storage state, CopyOutcome outcome) {
    switch (outcome) {
      case CopyOutcome::kNoOp: return;
      case CopyOutcome::kError:
        problem(fmt::format("{}: storage is not resident ({})", describe(resolved.action()),
                            state.residency.seen ? fmt::format("released after op {}", state.data.released_after_op)
                                                 : std::string("before its first access")));
        return;
      case CopyOutcome::kCopies:
        report_.peak_host_bytes = std::max(report_.peak_host_bytes, memory_->host_bytes);
        report_.d2h_bytes += state.size_bytes;
        ++report_.d2h_count;
        return;
    }
  }
  void copy_to_device(const ResolvedAction& resolved, Storage state, CopyOutcome outcome) {
    switch (outcome) {
      case CopyOutcome::kNoOp: return;
      case CopyOutcome::kError:
        if (!state.residency.host_present) {
          problem(fmt::format("{}: no host copy to copy from", describe(resolved.action())));
        } else {
          problem(fmt::format("{}: host copy is stale (storage written at op {} after it was copied)",
                              describe(resolved.action()), state.data.last_write_op));
        }
        return;
      case CopyOutcome::kCopies:
        report_.h2d_bytes += state.size_bytes;
        ++report_.h2d_count;
        return;
    }
  }
  void release_device(const ResolvedAction& resolved, Storage state, bool released) {
    if (!released) return;
    const Action& action = resolved.action();
    state.data.released_after_op = action.phase == Phase::kPost ? action.op : action.op - 1;
  }

 private:
  void problem(std::string text) {
    ++report_.problem_count;
    if (report_.problems.size() < options_.max_described_problems) report_.problems.push_back(std::move(text));
  }
  static std::string where(const ResolvedAction& resolved) {
    return fmt::format("actions[{}] ({})", resolved.index, describe(resolved.action()));
  }
  void note_peak(OpIndex op, OpIndex recompute_source) {
    const std::int64_t bytes = memory_->device_bytes;
    if (report_.peak_op < 0 || bytes > report_.peak_bytes) {
      report_.peak_bytes = bytes;
      report_.peak_op = op;
      report_.peak_recompute_source = recompute_source;
    }
  }

  const Trace& trace_;
  const ValidatorOptions options_;
  ValidationReport report_;
  const WalkMemory* memory_ = nullptr;
};

}  // namespace hyperoffload::internal
