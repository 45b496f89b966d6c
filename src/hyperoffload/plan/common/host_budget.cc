#include "hyperoffload/plan/common/host_budget.h"

#include <algorithm>
#include <utility>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/plan/common/range_max_tree.h"

namespace hyperoffload::internal {
namespace {

// A storage's offloads: the host intervals (action positions from the copy
// that creates a host copy to the one before its release_host) and the ops it
// stays resident through when its offloads are dropped.
struct Offloads {
  std::int64_t size_bytes = 0;
  std::vector<std::pair<std::size_t, std::size_t>> host;  // [first, last] positions holding the copy
  std::vector<std::pair<OpIndex, OpIndex>> kept_ops;      // [first, last] ops newly resident
  bool faults = false;
  bool dropped = false;
};

}  // namespace

std::int64_t peak_host_bytes(const Trace& trace, std::span<const Action> actions) {
  std::vector<bool> present(static_cast<std::size_t>(trace.storage_count()), false);
  std::int64_t bytes = 0;
  std::int64_t peak = 0;
  for (const Action& action : actions) {
    if (action.kind != ActionKind::kCopyD2H && action.kind != ActionKind::kReleaseHost) continue;
    const std::optional<StorageIndex> s = trace.find_storage(action.storage);
    if (!s) continue;
    const auto index = static_cast<std::size_t>(*s);
    const std::int64_t size = trace.storage(*s).size_bytes;
    if (action.kind == ActionKind::kCopyD2H && !present[index]) {
      present[index] = true;
      bytes += size;
      peak = std::max(peak, bytes);
    } else if (action.kind == ActionKind::kReleaseHost && present[index]) {
      present[index] = false;
      bytes -= size;
    }
  }
  return peak;
}

HostTrim trim_to_host_budget(const Trace& trace, std::vector<Action> actions, std::int64_t host_budget_bytes) {
  ValidatorOptions options;
  options.keep_profile = KeepProfile::kYes;
  Schedule schedule;
  schedule.actions = std::move(actions);
  ValidationReport report = validate_schedule(trace, schedule, options);
  HostTrim trim;
  if (report.peak_host_bytes <= host_budget_bytes || trace.op_count() == 0 || schedule.actions.empty()) {
    trim.actions = std::move(schedule.actions);
    trim.peak_bytes = report.peak_bytes;
    trim.peak_host_bytes = report.peak_host_bytes;
    return trim;
  }

  // Each storage's host intervals and evictions, from one pass in execution
  // order (host bytes as the validator counts them: a copy_d2h adds them when
  // no host copy is held, a release_host removes them when one is).
  const std::vector<Action>& all = schedule.actions;
  std::vector<Offloads> offloads(static_cast<std::size_t>(trace.storage_count()));
  std::vector<std::int64_t> host_after(all.size(), 0);
  std::vector<std::size_t> host_since(offloads.size(), 0);
  std::vector<bool> present(offloads.size(), false);
  // The release_device a copy_h2d would bring the storage back from.
  std::vector<std::optional<Action>> released(offloads.size());
  std::int64_t host = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Action& action = all[i];
    const std::optional<StorageIndex> found =
        action.kind == ActionKind::kRecompute ? std::nullopt : trace.find_storage(action.storage);
    if (found) {
      const auto s = static_cast<std::size_t>(*found);
      Offloads& o = offloads[s];
      o.size_bytes = trace.storage(*found).size_bytes;
      switch (action.kind) {
        case ActionKind::kCopyD2H:
          if (!present[s]) {
            present[s] = true;
            host_since[s] = i;
            host += o.size_bytes;
          }
          break;
        case ActionKind::kReleaseHost:
          if (present[s]) {
            present[s] = false;
            o.host.push_back({host_since[s], i - 1});
            host -= o.size_bytes;
          }
          break;
        case ActionKind::kReleaseDevice: released[s] = action; break;
        case ActionKind::kCopyH2D:
          if (released[s]) {
            // Resident from the release's next op (post) or its op (pre) to
            // the op before the copy back (pre) or its op (post).
            const OpIndex first = released[s]->op + (released[s]->phase == Phase::kPost ? 1 : 0);
            const OpIndex last = action.op - (action.phase == Phase::kPre ? 1 : 0);
            if (first <= last) o.kept_ops.push_back({first, last});
            released[s].reset();
          }
          break;
        case ActionKind::kRecompute: break;
      }
    }
    host_after[i] = host;
  }
  for (std::size_t s = 0; s < offloads.size(); ++s) {
    if (present[s]) offloads[s].host.push_back({host_since[s], all.size() - 1});
  }
  for (const Fault& fault : report.faults) {
    if (const std::optional<StorageIndex> s = trace.find_storage(fault.storage)) {
      offloads[static_cast<std::size_t>(*s)].faults = true;
    }
  }

  RangeMaxTree host_tree(host_after);
  RangeMaxTree device_tree(report.resident_bytes);
  while (host_tree.max() > host_budget_bytes) {
    const std::size_t at = host_tree.argmax();
    std::optional<std::size_t> best;
    std::int64_t best_peak = 0;
    for (std::size_t s = 0; s < offloads.size(); ++s) {
      const Offloads& o = offloads[s];
      if (o.dropped || o.faults || o.size_bytes == 0) continue;
      const bool holds = std::any_of(o.host.begin(), o.host.end(),
                                     [&](const auto& interval) { return interval.first <= at && at <= interval.second; });
      if (!holds) continue;
      std::int64_t peak = 0;
      for (const auto& [first, last] : o.kept_ops) {
        peak = std::max(peak, device_tree.max(static_cast<std::size_t>(first), static_cast<std::size_t>(last)) + o.size_bytes);
      }
      const bool better = !best || peak < best_peak ||
                          (peak == best_peak && o.size_bytes > offloads[*best].size_bytes);
      if (better) {
        best = s;
        best_peak = peak;
      }
    }
    if (!best) break;  // only faulting storages hold host copies here
    Offloads& o = offloads[*best];
    o.dropped = true;
    ++trim.storages_kept;
    for (const auto& [first, last] : o.host) host_tree.add(first, last, -o.size_bytes);
    for (const auto& [first, last] : o.kept_ops) {
      device_tree.add(static_cast<std::size_t>(first), static_cast<std::size_t>(last), o.size_bytes);
    }
  }

  // The schedule without the dropped storages' copies, host releases and the
  // releases a copy_h2d brings them back from.
  std::vector<std::optional<std::size_t>> pending_release(offloads.size());
  std::vector<bool> keep(all.size(), true);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Action& action = all[i];
    if (action.kind == ActionKind::kRecompute) continue;
    const std::optional<StorageIndex> found = trace.find_storage(action.storage);
    if (!found || !offloads[static_cast<std::size_t>(*found)].dropped) continue;
    const auto s = static_cast<std::size_t>(*found);
    switch (action.kind) {
      case ActionKind::kCopyD2H:
      case ActionKind::kReleaseHost: keep[i] = false; break;
      case ActionKind::kReleaseDevice: pending_release[s] = i; break;
      case ActionKind::kCopyH2D:
        keep[i] = false;
        if (pending_release[s]) keep[*pending_release[s]] = false;
        pending_release[s].reset();
        break;
      case ActionKind::kRecompute: break;
    }
  }
  Schedule trimmed;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (keep[i]) trimmed.actions.push_back(all[i]);
  }
  const ValidationReport after = validate_schedule(trace, trimmed);
  if (!after.valid()) {
    // Not expected (see the header); the untrimmed schedule is still valid.
    trim.actions = std::move(schedule.actions);
    trim.peak_bytes = report.peak_bytes;
    trim.peak_host_bytes = report.peak_host_bytes;
    trim.storages_kept = 0;
    return trim;
  }
  trim.actions = std::move(trimmed.actions);
  trim.peak_bytes = after.peak_bytes;
  trim.peak_host_bytes = after.peak_host_bytes;
  return trim;
}

}  // namespace hyperoffload::internal
