#include "hyperoffload/check/validator.h"

#include <algorithm>

#include <fmt/format.h>

#include "hyperoffload/model/residency_rules.h"

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
    if (std::any_of(actions.begin(), actions.end(),
                    [](const ResolvedAction& a) { return a.action.kind == ActionKind::kRecompute; })) {
      versions_ = AccessVersions(trace_);
    }
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

  void note_peak(OpIndex op, OpIndex recompute_source) {
    if (report_.peak_op < 0 || device_bytes_ > report_.peak_bytes) {
      report_.peak_bytes = device_bytes_;
      report_.peak_op = op;
      report_.peak_recompute_source = recompute_source;
    }
  }

  void run_op(OpIndex op) {
    std::size_t position = trace_.access_offset(op);  // of the access in AccessVersions
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
      versions_.record(position++, state.residency.version);
      if (access.kind == AccessKind::kWrite) state.last_write_op = op;
    }
    if (options_.keep_profile == KeepProfile::kYes) report_.resident_bytes[static_cast<std::size_t>(op)] = device_bytes_;
    note_peak(op, -1);
  }

  // A recompute of op k (model/residency_rules.h): every input must be resident
  // at the version op k read; every output not written since op k is resident
  // afterwards, allocated if it was released. Problems name the action.
  void recompute(const ResolvedAction& resolved) {
    const Action& action = resolved.action;
    const OpIndex source = action.source_op;
    ++report_.recompute_count;
    recompute_accesses(trace_, versions_, source, recompute_);
    auto where = [&] { return fmt::format("actions[{}] ({})", resolved.index, describe(action)); };
    for (const RecomputeAccess& input : recompute_.inputs) {
      const StorageState& state = states_[static_cast<std::size_t>(input.storage)];
      const StorageId id = trace_.storage(input.storage).id;
      switch (classify_recompute_input(state.residency, input.version)) {
        case RecomputeInput::kReady: break;
        case RecomputeInput::kMissing:
          problem(fmt::format("{}: input storage {} (ops[{}].accesses[{}]) is not resident (released after op {}); "
                              "copy_h2d or recompute it before the recompute",
                              where(), id, source, input.access, state.released_after_op));
          break;
        case RecomputeInput::kStale:
          problem(fmt::format("{}: input storage {} (ops[{}].accesses[{}]) is stale: op {} read it before op {} "
                              "wrote it again, so re-running op {} would not reproduce its outputs",
                              where(), id, source, input.access, source, state.last_write_op, source));
          break;
      }
    }
    for (const RecomputeAccess& output : recompute_.outputs) {
      StorageState& state = states_[static_cast<std::size_t>(output.storage)];
      switch (classify_recompute_output(state.residency, output.version)) {
        case RecomputeOutput::kResident: break;
        case RecomputeOutput::kStale:
          problem(fmt::format("{}: output storage {} (ops[{}].accesses[{}]) is stale: op {} wrote it after op {}, "
                              "so a recompute would bring back an older version",
                              where(), trace_.storage(output.storage).id, source, output.access,
                              state.last_write_op, source));
          break;
        case RecomputeOutput::kRegenerates:
          apply_recompute_output(state.residency);
          device_bytes_ += size_of(output.storage);
          report_.regenerated_bytes += size_of(output.storage);
          break;
      }
    }
    note_peak(action.op, source);
  }

  void apply(const ResolvedAction& resolved) {
    const Action& action = resolved.action;
    if (action.kind == ActionKind::kRecompute) {
      recompute(resolved);
      return;
    }
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
            apply_d2h(residency);
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
            apply_h2d(residency);
            device_bytes_ += size;
            report_.h2d_bytes += size;
            ++report_.h2d_count;
            return;
        }
        return;
      case ActionKind::kReleaseDevice:
        if (!apply_release_device(residency)) return;
        state.released_after_op = action.phase == Phase::kPost ? action.op : action.op - 1;
        device_bytes_ -= size;
        return;
      case ActionKind::kReleaseHost:
        if (!apply_release_host(residency)) return;
        host_bytes_ -= size;
        return;
      case ActionKind::kRecompute: return;  // handled above
    }
  }

  const Trace& trace_;
  const ValidatorOptions& options_;
  std::vector<StorageState> states_;
  ValidationReport report_;
  AccessVersions versions_;      // enabled when the schedule recomputes
  RecomputeAccesses recompute_;  // scratch
  std::int64_t device_bytes_ = 0;
  std::int64_t host_bytes_ = 0;
};

}  // namespace

ValidationReport validate_schedule(const Trace& trace, const Schedule& schedule, const ValidatorOptions& options) {
  return Validation(trace, options).run(schedule);
}

}  // namespace hyperoffload
