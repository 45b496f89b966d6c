#include "hyperoffload/check/validator.h"

#include <algorithm>

#include <fmt/format.h>

#include "hyperoffload/check/residency_rules.h"

namespace hyperoffload {
namespace {

// ResidencyState plus what messages need to explain a problem.
struct StorageState {
  ResidencyState residency;
  OpIndex last_write_op = -1;
  OpIndex released_after_op = -1;  // op whose action last released the device copy
};

class Validation {
 public:
  Validation(const Trace& trace, const ValidatorOptions& options)
      : trace_(trace), options_(options), states_(static_cast<std::size_t>(trace.storage_count())) {}

  ValidationReport run(const Schedule& schedule) {
    const std::vector<ResolvedAction> actions =
        resolve_actions(trace_, schedule, [this](std::string text) { problem(std::move(text)); });
    if (options_.keep_profile == KeepProfile::kYes) {
      report_.resident_bytes.assign(static_cast<std::size_t>(trace_.op_count()), 0);
    }
    std::size_t next = 0;
    for (OpIndex op = 0; op < trace_.op_count(); ++op) {
      for (; next < actions.size() && actions[next].action.op == op && actions[next].action.phase == Phase::kPre;
           ++next) {
        apply(actions[next]);
      }
      run_op(op);
      for (; next < actions.size() && actions[next].action.op == op; ++next) apply(actions[next]);
    }
    report_.resident_at_end_bytes = device_bytes_;
    return std::move(report_);
  }

 private:
  void problem(std::string text) {
    ++report_.problem_count;
    if (report_.problems.size() < options_.max_described_problems) report_.problems.push_back(std::move(text));
  }

  std::int64_t size_of(StorageIndex s) const { return trace_.storage(s).size_bytes; }

  void run_op(OpIndex op) {
    for (const Access& access : trace_.accesses(op)) {
      StorageState& state = states_[static_cast<std::size_t>(access.storage)];
      switch (classify_access(state.residency)) {
        case AccessOutcome::kResident: break;
        case AccessOutcome::kFirstAccess: device_bytes_ += size_of(access.storage); break;
        case AccessOutcome::kFault:
          report_.faults.push_back(Fault{op, trace_.storage(access.storage).id});
          report_.h2d_bytes += size_of(access.storage);
          device_bytes_ += size_of(access.storage);
          break;
        case AccessOutcome::kDataLoss:
          problem(fmt::format("op {} {} of storage {}: data lost (device copy released after op {} {})", op,
                              to_string(access.kind), trace_.storage(access.storage).id, state.released_after_op,
                              state.residency.host_present
                                  ? fmt::format("and the host copy is stale (written at op {})", state.last_write_op)
                                  : std::string("without a host copy")));
          device_bytes_ += size_of(access.storage);
          break;
      }
      apply_access(state.residency, access.kind);
      if (access.kind == AccessKind::kWrite) state.last_write_op = op;
    }
    if (options_.keep_profile == KeepProfile::kYes) report_.resident_bytes[static_cast<std::size_t>(op)] = device_bytes_;
    if (report_.peak_op < 0 || device_bytes_ > report_.peak_bytes) {
      report_.peak_bytes = device_bytes_;
      report_.peak_op = op;
    }
  }

  void apply(const ResolvedAction& resolved) {
    const Action& action = resolved.action;
    StorageState& state = states_[static_cast<std::size_t>(resolved.storage)];
    ResidencyState& residency = state.residency;
    const std::int64_t size = size_of(resolved.storage);
    switch (action.kind) {
      case ActionKind::kCopyD2H:
        switch (classify_d2h(residency)) {
          case CopyOutcome::kNoOp: return;
          case CopyOutcome::kError:
            problem(fmt::format("{}: storage is not resident ({})", describe(action),
                                residency.seen ? fmt::format("released after op {}", state.released_after_op)
                                               : std::string("before its first access")));
            return;
          case CopyOutcome::kCopies:
            if (!residency.host_present) host_bytes_ += size;
            report_.peak_host_bytes = std::max(report_.peak_host_bytes, host_bytes_);
            residency.host_present = true;
            residency.host_version = residency.version;
            report_.d2h_bytes += size;
            ++report_.d2h_count;
            return;
        }
        return;
      case ActionKind::kCopyH2D:
        switch (classify_h2d(residency)) {
          case CopyOutcome::kNoOp: return;
          case CopyOutcome::kError:
            if (!residency.host_present) {
              problem(fmt::format("{}: no host copy to copy from", describe(action)));
            } else {
              problem(fmt::format("{}: host copy is stale (storage written at op {} after it was copied)",
                                  describe(action), state.last_write_op));
            }
            return;
          case CopyOutcome::kCopies:
            residency.resident = true;
            device_bytes_ += size;
            report_.h2d_bytes += size;
            ++report_.h2d_count;
            return;
        }
        return;
      case ActionKind::kReleaseDevice:
        if (!residency.resident) return;
        residency.resident = false;
        state.released_after_op = action.phase == Phase::kPost ? action.op : action.op - 1;
        device_bytes_ -= size;
        return;
      case ActionKind::kReleaseHost:
        if (!residency.host_present) return;
        residency.host_present = false;
        host_bytes_ -= size;
        return;
    }
  }

  const Trace& trace_;
  const ValidatorOptions& options_;
  std::vector<StorageState> states_;
  ValidationReport report_;
  std::int64_t device_bytes_ = 0;
  std::int64_t host_bytes_ = 0;
};

}  // namespace

ValidationReport validate_schedule(const Trace& trace, const Schedule& schedule, const ValidatorOptions& options) {
  return Validation(trace, options).run(schedule);
}

}  // namespace hyperoffload
