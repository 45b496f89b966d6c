#include "hyperoffload/check/validator.h"

#include <algorithm>

#include <fmt/format.h>

namespace hyperoffload {
namespace {

struct StorageState {
  std::int32_t version = 0;        // number of writes so far
  std::int32_t host_version = -1;  // version held by the host copy
  OpIndex last_write_op = -1;
  OpIndex released_after_op = -1;  // op whose action last released the device copy
  bool seen = false;               // first access happened
  bool resident = false;
  bool host_present = false;
};

class Validation {
 public:
  Validation(const Trace& trace, const ValidatorOptions& options)
      : trace_(trace), options_(options), states_(static_cast<std::size_t>(trace.storage_count())) {}

  ValidationReport run(const Schedule& schedule) {
    std::vector<ResolvedAction> actions = resolve(schedule);
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
  struct ResolvedAction {
    Action action;
    StorageIndex storage;
  };

  void problem(std::string text) {
    ++report_.problem_count;
    if (report_.problems.size() < options_.max_described_problems) report_.problems.push_back(std::move(text));
  }

  // Drops actions on unknown storages or ops out of range (reporting them) and
  // puts the rest in execution order, keeping the order within an (op, phase).
  std::vector<ResolvedAction> resolve(const Schedule& schedule) {
    std::vector<ResolvedAction> resolved;
    resolved.reserve(schedule.actions.size());
    bool ordered = true;
    for (std::size_t i = 0; i < schedule.actions.size(); ++i) {
      const Action& action = schedule.actions[i];
      if (action.op < 0 || action.op >= trace_.op_count()) {
        problem(fmt::format("actions[{}] ({}): op {} is out of range (the trace has {} ops)", i,
                            describe(action), action.op, trace_.op_count()));
        continue;
      }
      std::optional<StorageIndex> storage = trace_.find_storage(action.storage);
      if (!storage) {
        problem(fmt::format("actions[{}] ({}): unknown storage {}", i, describe(action), action.storage));
        continue;
      }
      if (!resolved.empty() && slot(action) < slot(resolved.back().action) && ordered) {
        problem(fmt::format("actions[{}] ({}): out of execution order (after {})", i, describe(action),
                            describe(resolved.back().action)));
        ordered = false;
      }
      resolved.push_back({action, *storage});
    }
    if (!ordered) {
      std::stable_sort(resolved.begin(), resolved.end(),
                       [](const ResolvedAction& a, const ResolvedAction& b) { return slot(a.action) < slot(b.action); });
    }
    return resolved;
  }

  static std::size_t slot(const Action& action) {
    return 2 * static_cast<std::size_t>(action.op) + (action.phase == Phase::kPost ? 1 : 0);
  }

  std::int64_t size_of(StorageIndex s) const { return trace_.storage(s).size_bytes; }

  void make_resident(StorageIndex s) {
    StorageState& state = states_[static_cast<std::size_t>(s)];
    state.resident = true;
    device_bytes_ += size_of(s);
  }

  void run_op(OpIndex op) {
    for (const Access& access : trace_.accesses(op)) {
      StorageState& state = states_[static_cast<std::size_t>(access.storage)];
      if (!state.seen) {
        state.seen = true;
        make_resident(access.storage);
      } else if (!state.resident) {
        if (state.host_present && state.host_version == state.version) {
          report_.faults.push_back(Fault{op, trace_.storage(access.storage).id});
          report_.h2d_bytes += size_of(access.storage);
        } else {
          problem(fmt::format("op {} {} of storage {}: data lost (device copy released after op {} {})", op,
                              to_string(access.kind), trace_.storage(access.storage).id, state.released_after_op,
                              state.host_present ? fmt::format("and the host copy is stale (written at op {})",
                                                               state.last_write_op)
                                                 : std::string("without a host copy")));
        }
        make_resident(access.storage);
      }
      if (access.kind == AccessKind::kWrite) {
        ++state.version;
        state.last_write_op = op;
      }
    }
    if (options_.keep_profile == KeepProfile::kYes) report_.resident_bytes[static_cast<std::size_t>(op)] = device_bytes_;
    if (report_.peak_op < 0 || device_bytes_ > report_.peak_bytes) {
      report_.peak_bytes = device_bytes_;
      report_.peak_op = op;
    }
  }

  void apply(const ResolvedAction& resolved) {
    const Action& action = resolved.action;
    const StorageIndex s = resolved.storage;
    StorageState& state = states_[static_cast<std::size_t>(s)];
    const std::int64_t size = size_of(s);
    switch (action.kind) {
      case ActionKind::kCopyD2H:
        if (state.host_present && state.host_version == state.version) return;  // already current
        if (!state.resident) {
          problem(fmt::format("{}: storage is not resident ({})", describe(action),
                              state.seen ? fmt::format("released after op {}", state.released_after_op)
                                         : std::string("before its first access")));
          return;
        }
        if (!state.host_present) host_bytes_ += size;
        report_.peak_host_bytes = std::max(report_.peak_host_bytes, host_bytes_);
        state.host_present = true;
        state.host_version = state.version;
        report_.d2h_bytes += size;
        ++report_.d2h_count;
        return;
      case ActionKind::kCopyH2D:
        if (state.resident) return;
        if (!state.host_present) {
          problem(fmt::format("{}: no host copy to copy from", describe(action)));
          return;
        }
        if (state.host_version != state.version) {
          problem(fmt::format("{}: host copy is stale (storage written at op {} after it was copied)",
                              describe(action), state.last_write_op));
          return;
        }
        make_resident(s);
        report_.h2d_bytes += size;
        ++report_.h2d_count;
        return;
      case ActionKind::kReleaseDevice:
        if (!state.resident) return;
        state.resident = false;
        state.released_after_op = action.phase == Phase::kPost ? action.op : action.op - 1;
        device_bytes_ -= size;
        return;
      case ActionKind::kReleaseHost:
        if (!state.host_present) return;
        state.host_present = false;
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
