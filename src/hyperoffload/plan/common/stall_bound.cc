#include "hyperoffload/plan/common/stall_bound.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <vector>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"

namespace hyperoffload {
namespace {

constexpr double kNever = -std::numeric_limits<double>::infinity();

// A stretch in which a storage may be off the device: between its accesses at
// ops start_op < end_op with at least one op strictly between.
struct Gap {
  std::int64_t size_bytes = 0;
  OpIndex start_op = 0;
  OpIndex end_op = 0;
  OpIndex copy_op = 0;  // the last write at or before start_op (the first access when none): the copy to host follows it
};

std::vector<Gap> gaps_of(const Trace& trace, const StorageAccesses& accesses) {
  std::vector<Gap> gaps;
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    const std::int64_t size = trace.storage(s).size_bytes;
    if (size <= 0 || !accesses.accessed(s)) continue;
    const std::span<const StorageAccess> list = accesses.of(s);
    OpIndex copy_op = list.front().op;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].kind == AccessKind::kWrite) copy_op = list[i].op;
      // The gap after the last access of this op, to the next op accessing it.
      if (i + 1 == list.size() || list[i + 1].op == list[i].op) continue;
      if (list[i + 1].op - list[i].op >= 2) gaps.push_back({size, list[i].op, list[i + 1].op, copy_op});
    }
  }
  return gaps;
}

// One copy engine in the fluid relaxation: jobs in a fixed processing order,
// each available from some time and taking duration_ms for all its bytes; any
// subset is active. finish_ms(b) is when an engine free from time 0, running
// the active jobs in that order (each no earlier than it is available), has
// moved the first b bytes, the last job cut short in proportion. Taking the
// earliest-available bytes first this way is the fastest any engine can move b
// of them, even one allowed to split copies.
//
// A segment tree whose nodes hold the map "engine free at t -> free after the
// node's active jobs", t -> max(t + shift_ms, floor_ms), and their bytes.
class FluidEngine {
 public:
  struct Job {
    double available_ms;
    std::int64_t bytes;
    double duration_ms;
  };

  explicit FluidEngine(std::vector<Job> jobs) : jobs_(std::move(jobs)) {
    leaves_ = std::bit_ceil(std::max<std::size_t>(jobs_.size(), 1));
    nodes_.assign(2 * leaves_, Node{});
  }

  void activate(std::size_t job) {
    const Job& j = jobs_[job];
    set(job, Node{j.bytes, j.duration_ms, j.available_ms + j.duration_ms});
  }
  void deactivate(std::size_t job) { set(job, Node{}); }
  std::int64_t active_bytes() const { return nodes_[1].bytes; }

  // Precondition: 0 < bytes <= active_bytes().
  double finish_ms(std::int64_t bytes) const {
    std::size_t node = 1;
    double t = 0.0;
    while (node < leaves_) {
      const Node& left = nodes_[2 * node];
      if (left.bytes >= bytes) {
        node = 2 * node;
      } else {
        t = left.apply(t);
        bytes -= left.bytes;
        node = 2 * node + 1;
      }
    }
    const Job& j = jobs_[node - leaves_];
    const double fraction = static_cast<double>(bytes) / static_cast<double>(j.bytes);
    return std::max(t, j.available_ms) + fraction * j.duration_ms;
  }

 private:
  struct Node {
    std::int64_t bytes = 0;
    double shift_ms = 0.0;
    double floor_ms = kNever;
    double apply(double t) const { return std::max(t + shift_ms, floor_ms); }
  };

  void set(std::size_t job, Node leaf) {
    std::size_t node = leaves_ + job;
    nodes_[node] = leaf;
    for (node >>= 1; node >= 1; node >>= 1) {
      const Node& l = nodes_[2 * node];
      const Node& r = nodes_[2 * node + 1];
      nodes_[node] = Node{l.bytes + r.bytes, l.shift_ms + r.shift_ms, std::max(l.floor_ms + r.shift_ms, r.floor_ms)};
    }
  }

  std::vector<Job> jobs_;
  std::size_t leaves_ = 1;
  std::vector<Node> nodes_;
};

// The gaps covering each op in turn (start < op < end), as a list with O(1)
// insertion and removal.
class CoveringSweep {
 public:
  explicit CoveringSweep(std::span<const Gap> gaps, OpIndex ops)
      : gaps_(gaps), starting_(static_cast<std::size_t>(ops) + 1), ending_(static_cast<std::size_t>(ops) + 1),
        position_(gaps.size(), 0) {
    for (std::size_t g = 0; g < gaps.size(); ++g) {
      starting_[static_cast<std::size_t>(gaps[g].start_op) + 1].push_back(g);
      ending_[static_cast<std::size_t>(gaps[g].end_op)].push_back(g);
    }
  }
  // Moves to `op` (called for 0, 1, 2, ... in turn); `on_enter` / `on_leave`
  // see each gap as it starts / stops covering.
  template <typename Enter, typename Leave>
  void advance(OpIndex op, Enter on_enter, Leave on_leave) {
    for (const std::size_t g : ending_[static_cast<std::size_t>(op)]) {
      const std::size_t at = position_[g];
      position_[active_.back()] = at;
      active_[at] = active_.back();
      active_.pop_back();
      on_leave(g);
    }
    for (const std::size_t g : starting_[static_cast<std::size_t>(op)]) {
      position_[g] = active_.size();
      active_.push_back(g);
      on_enter(g);
    }
  }
  std::span<const std::size_t> active() const { return active_; }

 private:
  std::span<const Gap> gaps_;
  std::vector<std::vector<std::size_t>> starting_, ending_;
  std::vector<std::size_t> position_;
  std::vector<std::size_t> active_;
};

}  // namespace

std::optional<double> stall_lower_bound_ms(const Trace& trace, std::int64_t budget_bytes,
                                           const StallBoundOptions& options) {
  const OpIndex ops = trace.op_count();
  if (ops == 0) return 0.0;
  const auto n = static_cast<std::size_t>(ops);
  const StorageAccesses accesses(trace);
  const std::vector<std::int64_t> resident = unplanned_resident_bytes(trace, accesses);
  std::vector<std::int64_t> excess(n, 0);
  for (std::size_t q = 0; q < n; ++q) excess[q] = std::max<std::int64_t>(0, resident[q] - budget_bytes);
  if (*std::max_element(excess.begin(), excess.end()) == 0) return 0.0;

  std::vector<double> start_ms(n + 1, 0.0);  // C(q)
  for (std::size_t q = 0; q < n; ++q) start_ms[q + 1] = start_ms[q] + trace.op_duration_ms(static_cast<OpIndex>(q));
  const std::vector<Gap> gaps = gaps_of(trace, accesses);

  // 1. T_D(q): the D2H engine finishing E(q) bytes of the gaps covering q, in
  // the order their data can be copied (after the copy op ends).
  std::vector<double> to_host_ms(n, kNever);
  std::vector<std::size_t> covering(n, 0);
  {
    std::vector<std::size_t> by_release(gaps.size());
    std::iota(by_release.begin(), by_release.end(), std::size_t{0});
    auto release_ms = [&](std::size_t g) { return start_ms[static_cast<std::size_t>(gaps[g].copy_op) + 1]; };
    std::stable_sort(by_release.begin(), by_release.end(),
                     [&](std::size_t a, std::size_t b) { return release_ms(a) < release_ms(b); });
    std::vector<std::size_t> rank(gaps.size());
    std::vector<FluidEngine::Job> jobs(gaps.size());
    for (std::size_t i = 0; i < by_release.size(); ++i) {
      const Gap& gap = gaps[by_release[i]];
      rank[by_release[i]] = i;
      jobs[i] = {release_ms(by_release[i]), gap.size_bytes, trace.d2h_ms(gap.size_bytes)};
    }
    FluidEngine engine(std::move(jobs));
    CoveringSweep sweep(gaps, ops);
    for (std::size_t q = 0; q < n; ++q) {
      sweep.advance(
          static_cast<OpIndex>(q), [&](std::size_t g) { engine.activate(rank[g]); },
          [&](std::size_t g) { engine.deactivate(rank[g]); });
      covering[q] = sweep.active().size();
      if (excess[q] == 0) continue;
      if (engine.active_bytes() < excess[q]) return std::nullopt;  // the budget is below what fits
      to_host_ms[q] = engine.finish_ms(excess[q]);
    }
  }
  // Every copy to host issued after op q queues behind those of T_D(q') for q' <= q.
  std::vector<double> queued_ms(n, 0.0);
  for (std::size_t q = 0; q < n; ++q) queued_ms[q] = std::max(q > 0 ? queued_ms[q - 1] : 0.0, to_host_ms[q]);
  // The earliest each gap's data is on the host.
  std::vector<double> on_host_ms(gaps.size());
  for (std::size_t g = 0; g < gaps.size(); ++g) {
    const auto copy_op = static_cast<std::size_t>(gaps[g].copy_op);
    on_host_ms[g] = std::max(start_ms[copy_op + 1], queued_ms[copy_op]) + trace.d2h_ms(gaps[g].size_bytes);
  }

  // Which over-budget ops to evaluate in 2.: all, unless their covering gaps
  // add up to more than the work limit; then every stride-th, and the op with
  // the largest excess.
  std::size_t total_covering = 0;
  std::size_t largest = 0;
  for (std::size_t q = 0; q < n; ++q) {
    if (excess[q] > 0) total_covering += covering[q];
    if (excess[q] > excess[largest]) largest = q;
  }
  const std::size_t work_limit = std::max<std::size_t>(std::size_t{1} << 20, 4 * (n + gaps.size()));
  const std::size_t stride = std::max<std::size_t>(1, (total_covering + work_limit - 1) / work_limit);

  // 2.-4. in op order: S(q) is final when the sweep reaches q.
  std::vector<bool> allocates(n, false);
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (trace.storage(s).size_bytes > 0 && accesses.accessed(s)) allocates[static_cast<std::size_t>(accesses.first_op(s))] = true;
  }
  const bool capped = options.device_memory == DeviceMemory::kBudget;
  const bool shared_engine = options.copy_engines == CopyEngines::kOne;
  std::vector<double> earliest_start_ms(start_ms.begin(), start_ms.end() - 1);  // S(q), raised by 2. as it goes
  CoveringSweep sweep(gaps, ops);
  std::size_t over_seen = 0;
  std::vector<std::size_t> by_available, by_end;
  std::vector<FluidEngine::Job> jobs;
  for (std::size_t q = 0; q < n; ++q) {
    sweep.advance(static_cast<OpIndex>(q), [](std::size_t) {}, [](std::size_t) {});
    double& s = earliest_start_ms[q];
    if (q > 0) s = std::max(s, earliest_start_ms[q - 1] + trace.op_duration_ms(static_cast<OpIndex>(q - 1)));
    if (capped && allocates[q] && excess[q] > 0) s = std::max(s, to_host_ms[q]);
    if (excess[q] == 0) continue;
    if (over_seen++ % stride != 0 && q != largest) continue;

    // 2. Copies back of the data off during op q, from the end of op q.
    double from_ms = s + trace.op_duration_ms(static_cast<OpIndex>(q));
    if (shared_engine) from_ms = std::max(from_ms, queued_ms[q]);
    const std::span<const std::size_t> active = sweep.active();
    by_available.assign(active.begin(), active.end());
    auto available_ms = [&](std::size_t g) { return std::max(from_ms, on_host_ms[g]); };
    std::sort(by_available.begin(), by_available.end(), [&](std::size_t a, std::size_t b) {
      const double x = available_ms(a), y = available_ms(b);
      return x != y ? x < y : a < b;
    });
    jobs.clear();
    std::int64_t total = 0;
    for (const std::size_t g : by_available) {
      jobs.push_back({available_ms(g), gaps[g].size_bytes, trace.h2d_ms(gaps[g].size_bytes)});
      total += gaps[g].size_bytes;
    }
    by_end.resize(by_available.size());
    std::iota(by_end.begin(), by_end.end(), std::size_t{0});
    std::sort(by_end.begin(), by_end.end(), [&](std::size_t a, std::size_t b) {
      return gaps[by_available[a]].end_op < gaps[by_available[b]].end_op;
    });
    FluidEngine engine(jobs);
    for (std::size_t i = 0; i < by_end.size();) {
      const OpIndex end_op = gaps[by_available[by_end[i]]].end_op;
      for (; i < by_end.size() && gaps[by_available[by_end[i]]].end_op == end_op; ++i) engine.activate(by_end[i]);
      // Gaps ending after end_op may hold total - active bytes of the excess;
      // the rest is needed by end_op.
      const std::int64_t needed = excess[q] - (total - engine.active_bytes());
      if (needed <= 0) continue;
      double& later = earliest_start_ms[static_cast<std::size_t>(end_op)];
      later = std::max(later, engine.finish_ms(needed));
    }
  }
  return std::max(0.0, earliest_start_ms[n - 1] - start_ms[n - 1]);
}

}  // namespace hyperoffload
