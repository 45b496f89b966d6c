#include "hyperoffload/plan/peak_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <latch>
#include <limits>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/budget.h"
#include "hyperoffload/plan/internal/covering_index.h"
#include "hyperoffload/plan/internal/peak_model.h"
#include "hyperoffload/plan/internal/profile_tree.h"
#include "hyperoffload/plan/internal/stall_estimate.h"
#include "hyperoffload/plan/internal/transfer_load.h"

namespace hyperoffload {

std::span<const std::string_view> peak_score_weight_names() {
  static constexpr std::array<std::string_view, 4> kNames = {"peak_reduction", "hiding", "coverage", "neighbor_impact"};
  return kNames;
}

Result<PeakPlannerOptions> peak_planner_options(std::span<const std::pair<std::string, double>> score_weights) {
  PeakPlannerOptions options;
  PeakScoreWeights& w = options.weights;
  for (const auto& [name, value] : score_weights) {
    double* field = name == "peak_reduction"    ? &w.peak_reduction
                    : name == "hiding"          ? &w.hiding
                    : name == "coverage"        ? &w.coverage
                    : name == "neighbor_impact" ? &w.neighbor_impact
                                                : nullptr;
    if (field == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, fmt::format("unknown score weight \"{}\" (valid: {})", name,
                                                                 fmt::join(peak_score_weight_names(), ", ")));
    }
    if (!std::isfinite(value) || value < 0.0) {
      return make_error(ErrorCode::kInvalidArgument,
                        fmt::format("score weight {}={}: must be a finite number >= 0", name, value));
    }
    *field = value;
  }
  return options;
}

namespace {

using internal::CoveringIndex;
using internal::IndexGroup;
using internal::PeakCandidate;
using internal::PeakModel;
using internal::ProfileTree;

constexpr std::int32_t kNone = CoveringIndex::kNoEntry;

// Peak-driven selection (docs/PEAK_PLANNER.md, "Selection"). Candidates sit in
// a CoveringIndex keyed by an upper bound of their score. Every selection only
// lowers the profile (coverage shrinks), queues another copy to host (hiding
// shrinks) and commits more copy-engine time (the neighbour penalty grows), so
// a cached factor stays an upper bound; re-evaluating the current leader until
// it is fresh gives the exact best (lazy evaluation).
//
// Scores scale with min(size, E): candidates known to be at least as large as
// the excess E (the "large" group) all remove E and are keyed by their factor F
// alone; the others are keyed by size * F, an upper bound of their value once E
// drops below their size. Such a candidate is moved to the large group when it
// leads a query; E only decreases, so it moves at most once.
class Selection {
 public:
  Selection(const Trace& trace, const PeakModel& model, const PeakScoreWeights& weights, std::int64_t limit,
            ProfileTree& profile)
      : model_(model),
        weights_(weights),
        limit_(limit),
        profile_(profile),
        index_(trace.op_count(), intervals(model)),
        compute_before_(compute_prefix(trace)),
        load_(compute_before_),
        d2h_queue_(static_cast<std::size_t>(trace.op_count()) + 1, 0.0) {
    const std::size_t count = model.interior.size();
    factor_.resize(count);
    d2h_ms_.resize(count);
    h2d_ms_.resize(count);
    fresh_at_.assign(count, -1);
    version_queued_.assign(model.versions.size(), false);

    // Prefix sums make "ops over budget inside the gap" O(1) for the initial
    // bounds.
    const auto ops = static_cast<std::size_t>(trace.op_count());
    std::vector<std::int32_t> over_before(ops + 1, 0);
    for (std::size_t op = 0; op < ops; ++op) {
      over_before[op + 1] = over_before[op] + (model.resident_bytes[op] > limit ? 1 : 0);
    }
    initial_over_ = over_before[ops];
    for (std::size_t k = 0; k < count; ++k) {
      const PeakCandidate& c = model.interior[k];
      d2h_ms_[k] = trace.d2h_ms(c.size_bytes);
      h2d_ms_[k] = trace.h2d_ms(c.size_bytes);
      // Nothing is selected yet: no queue, no contention. The peak op is always
      // among the covered over-budget ops, hence the -1 in the coverage; the
      // bound uses the initial count, which can only shrink.
      const auto first = static_cast<std::size_t>(c.interior_first());
      const auto end = static_cast<std::size_t>(c.end_op);
      factor_[k] = combine(hiding(k), coverage_fraction(over_before[end] - over_before[first]), 0.0);
    }
    std::vector<double> keys(count);
    for (std::size_t k = 0; k < count; ++k) keys[k] = key(k, IndexGroup::kSmall);
    index_.activate_all(IndexGroup::kSmall, keys);
  }

  // Runs to completion; returns the selected interior candidates in order.
  std::vector<std::int32_t> run() {
    std::vector<std::int32_t> selected;
    for (std::int32_t step = 0;; ++step) {
      const std::int64_t peak = profile_.max();
      if (peak <= limit_) break;
      const auto peak_op = static_cast<OpIndex>(profile_.argmax());
      const std::int64_t excess = peak - limit_;
      const std::int32_t pick = best_at(peak_op, excess, step);
      if (pick == kNone) break;  // nothing covers the peak: it sits at the floor
      const PeakCandidate& c = model_.interior[static_cast<std::size_t>(pick)];
      profile_.add(static_cast<std::size_t>(c.interior_first()), static_cast<std::size_t>(c.interior_last()),
                   -c.size_bytes);
      const auto [first, last] = window(c);
      load_.add(first, last, d2h_ms_[static_cast<std::size_t>(pick)] + h2d_ms_[static_cast<std::size_t>(pick)]);
      if (!version_queued_[static_cast<std::size_t>(c.version)]) {
        version_queued_[static_cast<std::size_t>(c.version)] = true;
        queue_d2h(model_.versions[static_cast<std::size_t>(c.version)].copy_op,
                  d2h_ms_[static_cast<std::size_t>(pick)]);
      }
      index_.set(pick, IndexGroup::kNone, 0.0);
      selected.push_back(pick);
    }
    return selected;
  }

 private:
  static std::vector<double> compute_prefix(const Trace& trace) {
    std::vector<double> before(static_cast<std::size_t>(trace.op_count()) + 1, 0.0);
    for (OpIndex op = 0; op < trace.op_count(); ++op) {
      before[static_cast<std::size_t>(op) + 1] = before[static_cast<std::size_t>(op)] + trace.op_duration_ms(op);
    }
    return before;
  }

  static std::vector<internal::OpInterval> intervals(const PeakModel& model) {
    std::vector<internal::OpInterval> out;
    out.reserve(model.interior.size());
    for (const PeakCandidate& c : model.interior) out.push_back({c.interior_first(), c.interior_last()});
    return out;
  }

  // The ops whose compute can hide a candidate's round trip: from after its
  // version's copy op (when the copy to host can start) to before its end op.
  std::pair<std::size_t, std::size_t> window(const PeakCandidate& c) const {
    return {static_cast<std::size_t>(model_.versions[static_cast<std::size_t>(c.version)].copy_op) + 1,
            static_cast<std::size_t>(c.interior_last())};
  }

  // Hiding: how much of the copy back fits between the data reaching the host
  // and its use. The copy to host starts after the version's copy op, behind
  // the copies of selected candidates issued no later (the engine is FIFO; the
  // queue is estimated as busy from time 0); the fraction of the copy back that
  // fits before the end op starts is clamped to [0, 1]. With nothing selected
  // this is (window - D2H) / H2D: 1 when the compute from the copy op to the
  // use covers both transfers.
  double hiding(std::size_t k) const {
    const PeakCandidate& c = model_.interior[k];
    const OpIndex copy_op = model_.versions[static_cast<std::size_t>(c.version)].copy_op;
    const double own_ms = version_queued_[static_cast<std::size_t>(c.version)] ? 0.0 : d2h_ms_[k];
    const double on_host_ms =
        std::max(compute_before_[static_cast<std::size_t>(copy_op) + 1] + d2h_ms_[k], queued_d2h_ms(copy_op) + own_ms);
    const double slack_ms = compute_before_[static_cast<std::size_t>(c.end_op)] - on_host_ms;
    if (h2d_ms_[k] <= 0.0) return slack_ms >= 0.0 ? 1.0 : 0.0;
    return std::clamp(slack_ms / h2d_ms_[k], 0.0, 1.0);
  }

  // D2H ms of the selected versions copied after ops [0, op] (a Fenwick tree).
  double queued_d2h_ms(OpIndex op) const {
    double total = 0.0;
    for (std::size_t i = static_cast<std::size_t>(op) + 1; i > 0; i -= i & (~i + 1)) total += d2h_queue_[i];
    return total;
  }
  void queue_d2h(OpIndex op, double ms) {
    for (std::size_t i = static_cast<std::size_t>(op) + 1; i < d2h_queue_.size(); i += i & (~i + 1))
      d2h_queue_[i] += ms;
  }

  double coverage_fraction(std::int64_t over_inside) const {
    if (initial_over_ <= 1) return 0.0;
    return std::clamp(static_cast<double>(over_inside - 1) / static_cast<double>(initial_over_ - 1), 0.0, 1.0);
  }

  double combine(double hiding, double coverage, double neighbor) const {
    return std::max(0.0, weights_.peak_reduction + weights_.hiding * hiding + weights_.coverage * coverage -
                             weights_.neighbor_impact * neighbor);
  }

  double key(std::size_t k, IndexGroup group) const {
    return group == IndexGroup::kLarge ? factor_[k] : static_cast<double>(model_.interior[k].size_bytes) * factor_[k];
  }

  // The value a candidate's key stands for at excess E: what it removes times
  // its factor (the score without the common 1/E).
  double value(std::int32_t k, std::int64_t excess) const {
    const double key = index_.key(k);
    return index_.group(k) == IndexGroup::kLarge ? static_cast<double>(excess) * key : key;
  }

  std::int32_t best_at(OpIndex peak_op, std::int64_t excess, std::int32_t step) {
    for (;;) {
      const CoveringIndex::Best best = index_.query_cached(peak_op);
      std::int32_t pick = best.small;
      if (best.large != kNone) {
        if (pick == kNone) {
          pick = best.large;
        } else {
          const double small_value = value(best.small, excess);
          const double large_value = value(best.large, excess);
          if (large_value > small_value || (large_value == small_value && best.large < best.small)) {
            pick = best.large;
          }
        }
      }
      if (pick == kNone) return pick;
      const auto index = static_cast<std::size_t>(pick);
      if (index_.group(pick) == IndexGroup::kSmall && model_.interior[index].size_bytes >= excess) {
        // Its key size * F overstates what it can remove now: move it to the
        // large group, keyed by F, and look again.
        index_.set(pick, IndexGroup::kLarge, key(index, IndexGroup::kLarge));
        continue;
      }
      if (fresh_at_[index] == step) return pick;
      refresh(pick);
      fresh_at_[static_cast<std::size_t>(pick)] = step;
    }
  }

  static constexpr double kMaxNeighbor = 2.0;

  void refresh(std::int32_t k) {
    const auto index = static_cast<std::size_t>(k);
    const PeakCandidate& c = model_.interior[index];
    const auto over_inside = static_cast<std::int64_t>(
        profile_.count_over(static_cast<std::size_t>(c.interior_first()), static_cast<std::size_t>(c.interior_last())));
    // Neighbour impact: the copy-engine time that selected candidates already
    // claim inside this candidate's window per unit of compute there, capped at
    // 2 so that a twice-oversubscribed window weighs more than a merely busy one.
    const auto [first, last] = window(c);
    const double committed_ms = load_.load(first, last);
    const double window_ms = compute_before_[last + 1] - compute_before_[first];
    const double neighbor =
        window_ms > 0.0 ? std::min(kMaxNeighbor, committed_ms / window_ms) : (committed_ms > 0.0 ? kMaxNeighbor : 0.0);
    const double hiding = this->hiding(index);
    factor_[index] = combine(hiding, coverage_fraction(over_inside), neighbor);
    const IndexGroup group = index_.group(k);
    index_.set(k, group, key(index, group));
  }

  const PeakModel& model_;
  const PeakScoreWeights& weights_;
  std::int64_t limit_;
  ProfileTree& profile_;
  CoveringIndex index_;
  std::vector<double> compute_before_;  // compute ms of ops [0, x)
  internal::TransferLoad load_;
  std::int64_t initial_over_ = 0;
  std::vector<double> factor_;  // cached F: an upper bound of the current one
  std::vector<double> d2h_ms_;  // per candidate
  std::vector<double> h2d_ms_;
  std::vector<bool> version_queued_;    // a selected candidate already copies this version
  std::vector<double> d2h_queue_;       // Fenwick tree over copy ops, see queued_d2h_ms
  std::vector<std::int32_t> fresh_at_;  // step at which factor_ was last made exact
};

// Where a selected interior candidate's transfers go: release_device after op
// `release_op`, copy_h2d before op `prefetch_op`; the storage is off the device
// during ops release_op+1 .. prefetch_op-1.
struct Placement {
  std::int32_t candidate;
  OpIndex release_op;
  OpIndex prefetch_op;
  std::int32_t engine_rank;  // position of its copy_h2d in the engine order
};

// start_ms[x] = compute ms of ops [0, x), x in [0, ops]: when op x starts in a
// run without stalls. The planner's timing estimates are all in these units.
std::vector<double> op_start_ms(const Trace& trace) {
  std::vector<double> start_ms(static_cast<std::size_t>(trace.op_count()) + 1, 0.0);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    start_ms[static_cast<std::size_t>(op) + 1] = start_ms[static_cast<std::size_t>(op)] + trace.op_duration_ms(op);
  }
  return start_ms;
}

// One copy for a FIFO copy engine to run, over estimated times.
struct EngineJob {
  double available_ms;  // it can start: its data is there (and, for a prefetch, room on the device)
  double deadline_ms;   // when it is needed: the sequencing key
  std::int64_t tie;     // breaks deadline ties; unique per job (see tie_key)
  double duration_ms;
};

// A unique tie key from an op and an index: by op, then index.
std::int64_t tie_key(OpIndex op, std::int32_t index) {
  return (static_cast<std::int64_t>(op) << 32) | static_cast<std::int64_t>(static_cast<std::uint32_t>(index));
}

// How a sequence treats the soonest-needed job when it cannot start yet.
enum class EngineRule : std::uint8_t {
  // Wait for it: the order is the deadline order.
  kSoonestNeeded,
  // Run a job needed later in the idle time, if it can start now and finish
  // before the soonest-needed one can start.
  kFillIdleEngine,
  // Run the soonest-needed job that can start now, if any (the engine never
  // idles while a copy could run).
  kWorkConserving,
};

// Sequences `jobs` on one engine (non-preemptive, soonest deadline first, with
// `rule` for jobs that cannot start yet). Returns job indices in run order;
// `finish_ms`, when given, receives each job's estimated completion
// (max(engine free, available) + duration, in run order).
// O(jobs log jobs).
std::vector<std::size_t> sequence_jobs(std::span<const EngineJob> jobs, EngineRule rule,
                                       std::vector<double>* finish_ms = nullptr) {
  auto sooner = [&](std::size_t a, std::size_t b) {
    return std::tie(jobs[a].deadline_ms, jobs[a].tie) < std::tie(jobs[b].deadline_ms, jobs[b].tie);
  };
  std::vector<std::size_t> by_deadline(jobs.size()), by_availability(jobs.size());
  std::iota(by_deadline.begin(), by_deadline.end(), std::size_t{0});
  std::iota(by_availability.begin(), by_availability.end(), std::size_t{0});
  std::sort(by_deadline.begin(), by_deadline.end(), sooner);
  std::stable_sort(by_availability.begin(), by_availability.end(),
                   [&](std::size_t a, std::size_t b) { return jobs[a].available_ms < jobs[b].available_ms; });
  auto later = [&](std::size_t a, std::size_t b) { return sooner(b, a); };
  std::vector<std::size_t> startable;  // heap, soonest-needed on top; may hold done jobs
  std::vector<bool> done(jobs.size(), false);
  std::vector<std::size_t> order;
  order.reserve(jobs.size());
  if (finish_ms != nullptr) finish_ms->assign(jobs.size(), 0.0);
  double now_ms = 0.0;          // the sequencing clock
  double engine_free_ms = 0.0;  // the engine's estimated clock, which also waits for availability
  std::size_t next_available = 0, next_due = 0;
  while (order.size() < jobs.size()) {
    for (; next_available < jobs.size() && jobs[by_availability[next_available]].available_ms <= now_ms;
         ++next_available) {
      startable.push_back(by_availability[next_available]);
      std::push_heap(startable.begin(), startable.end(), later);
    }
    while (done[by_deadline[next_due]]) ++next_due;
    const std::size_t due = by_deadline[next_due];
    std::size_t run = due;
    if (rule != EngineRule::kSoonestNeeded && jobs[due].available_ms > now_ms) {
      while (!startable.empty() && done[startable.front()]) {
        std::pop_heap(startable.begin(), startable.end(), later);
        startable.pop_back();
      }
      const bool fills_gap =
          !startable.empty() && (rule == EngineRule::kWorkConserving ||
                                 now_ms + jobs[startable.front()].duration_ms <= jobs[due].available_ms);
      if (!fills_gap) {
        // Idle until the due copy, or an earlier one that might fill the gap,
        // can start.
        double wake_ms = jobs[due].available_ms;
        if (startable.empty() && next_available < jobs.size()) {
          wake_ms = std::min(wake_ms, jobs[by_availability[next_available]].available_ms);
        }
        now_ms = wake_ms;
        continue;
      }
      run = startable.front();
    }
    done[run] = true;
    order.push_back(run);
    now_ms += jobs[run].duration_ms;
    engine_free_ms = std::max(engine_free_ms, jobs[run].available_ms) + jobs[run].duration_ms;
    if (finish_ms != nullptr) (*finish_ms)[run] = engine_free_ms;
  }
  return order;
}

// Where a used version's copy_d2h goes: after op `issue_op`; `rank` orders the
// copies to host issued after the same op. issue_op -1: right after its copy
// op, ahead of the others — a version the copy order does not list, used only
// by boundary candidates (whose copies back are needed by the very next op) or
// by candidates the first placement dropped.
struct HostCopy {
  OpIndex issue_op = -1;
  std::int64_t rank = -1;
};

constexpr OpIndex kNoRelease = std::numeric_limits<OpIndex>::max();

// Issues the copies to host of `versions` in that order, each after its copy
// op and no earlier than the one before (the engine is FIFO), but no later
// than latest[v] — the version's first release, which needs the host copy —
// where it then overtakes the copies ordered before it. A version with no
// release (kNoRelease) is not copied.
std::vector<HostCopy> issue_host_copies(const PeakModel& model, std::span<const std::int32_t> versions,
                                        std::span<const OpIndex> latest) {
  std::vector<HostCopy> copies(model.versions.size());
  OpIndex issued_up_to = 0;
  std::int64_t rank = 0;
  for (const std::int32_t v : versions) {
    const OpIndex last = latest[static_cast<std::size_t>(v)];
    if (last == kNoRelease) continue;
    const OpIndex copy_op = model.versions[static_cast<std::size_t>(v)].copy_op;
    OpIndex issue = std::max(copy_op, issued_up_to);
    if (issue > last) {
      issue = last;
    } else {
      issued_up_to = issue;
    }
    copies[static_cast<std::size_t>(v)] = {issue, rank++};
  }
  return copies;
}

// When each version's copy to host completes on the FIFO engine, over
// estimated times, for copies issued as in `copies` (0 when not copied).
std::vector<double> host_copy_ready_ms(const Trace& trace, const PeakModel& model, std::span<const HostCopy> copies,
                                       std::span<const double> start_ms) {
  std::vector<std::size_t> issued;
  for (std::size_t v = 0; v < copies.size(); ++v) {
    if (copies[v].issue_op >= 0) issued.push_back(v);
  }
  std::sort(issued.begin(), issued.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(copies[a].issue_op, copies[a].rank) < std::tie(copies[b].issue_op, copies[b].rank);
  });
  std::vector<double> ready_ms(model.versions.size(), 0.0);
  double engine_free_ms = 0.0;
  for (const std::size_t v : issued) {
    engine_free_ms = std::max(engine_free_ms, start_ms[static_cast<std::size_t>(copies[v].issue_op) + 1]) +
                     trace.d2h_ms(trace.storage(model.versions[v].storage).size_bytes);
    ready_ms[v] = engine_free_ms;
  }
  return ready_ms;
}

// The first placement's estimate: every copy to host issued right after its
// version's copy op, in op order (ties by version).
std::vector<double> copy_op_ready_ms(const Trace& trace, const PeakModel& model, std::span<const std::int32_t> selected,
                                     std::span<const double> start_ms) {
  std::vector<HostCopy> copies(model.versions.size());
  for (const std::int32_t k : selected) {
    const auto v = static_cast<std::size_t>(model.interior[static_cast<std::size_t>(k)].version);
    copies[v] = {model.versions[v].copy_op, static_cast<std::int64_t>(v)};
  }
  return host_copy_ready_ms(trace, model, copies, start_ms);
}

// Copies to host (docs/PEAK_PLANNER.md, "Copies to host"): one per version
// that a placed candidate evicts, run on the FIFO D2H engine in the order
// their data is needed rather than in the order it was written, sequenced
// work-conserving from when each version's copy op ends. When a version is
// needed depends on the device:
//  - unlimited memory: by the latest start of each of its copies back that
//    keeps the H2D engine on time for every later use (nothing waits for the
//    release);
//  - a device that holds only the budget: by each copy back's own latest start
//    (its use minus its copy time; copies back wait for room there, not for the
//    engine) and by the op after each release, which frees memory only once the
//    copy to host has completed.
// ready_ms follows from issuing the copies by the releases of `placements`.
struct HostCopyOrder {
  std::vector<std::int32_t> versions;  // in engine order
  std::vector<double> ready_ms;        // per model version: estimated completion (0 when not copied)
};

// The latest op after which each version's copy to host can be issued: its
// first release or boundary eviction (kNoRelease when it has neither).
std::vector<OpIndex> first_releases(const PeakModel& model, std::span<const Placement> placements,
                                    std::span<const std::int32_t> boundary_picks) {
  std::vector<OpIndex> latest(model.versions.size(), kNoRelease);
  for (const Placement& p : placements) {
    OpIndex& at = latest[static_cast<std::size_t>(model.interior[static_cast<std::size_t>(p.candidate)].version)];
    at = std::min(at, p.release_op);
  }
  for (const std::int32_t k : boundary_picks) {
    const PeakCandidate& c = model.boundary[static_cast<std::size_t>(k)];
    OpIndex& at = latest[static_cast<std::size_t>(c.version)];
    at = std::min(at, c.start_op);
  }
  return latest;
}

HostCopyOrder order_host_copies(const Trace& trace, const PeakModel& model, std::span<const Placement> placements,
                                std::span<const double> start_ms, DeviceMemory device) {
  // Unlimited memory: when each copy back must start at the latest so that it
  // and every copy back needed after it still make their uses on the FIFO H2D
  // engine (scheduled backwards from the last use). In a transfer-bound stretch
  // that is well before its own use minus its own copy time.
  std::vector<double> latest_start_ms;
  if (device == DeviceMemory::kUnlimited) {
    latest_start_ms.resize(placements.size());
    std::vector<std::size_t> by_use(placements.size());
    std::iota(by_use.begin(), by_use.end(), std::size_t{0});
    auto use_op = [&](std::size_t i) {
      return model.interior[static_cast<std::size_t>(placements[i].candidate)].end_op;
    };
    std::stable_sort(by_use.begin(), by_use.end(), [&](std::size_t a, std::size_t b) { return use_op(a) > use_op(b); });
    double next_ms = std::numeric_limits<double>::infinity();
    for (const std::size_t i : by_use) {
      const PeakCandidate& c = model.interior[static_cast<std::size_t>(placements[i].candidate)];
      next_ms = std::min(next_ms, start_ms[static_cast<std::size_t>(c.end_op)]) - trace.h2d_ms(c.size_bytes);
      latest_start_ms[i] = next_ms;
    }
  }
  std::vector<std::int32_t> job_of(model.versions.size(), -1);
  std::vector<std::int32_t> version_of_job;
  std::vector<EngineJob> jobs;
  for (std::size_t pi = 0; pi < placements.size(); ++pi) {
    const Placement& p = placements[pi];
    const PeakCandidate& c = model.interior[static_cast<std::size_t>(p.candidate)];
    std::int32_t& job = job_of[static_cast<std::size_t>(c.version)];
    if (job < 0) {
      const OpIndex copy_op = model.versions[static_cast<std::size_t>(c.version)].copy_op;
      job = static_cast<std::int32_t>(jobs.size());
      version_of_job.push_back(c.version);
      jobs.push_back({start_ms[static_cast<std::size_t>(copy_op) + 1], std::numeric_limits<double>::infinity(),
                      tie_key(copy_op, c.version), trace.d2h_ms(c.size_bytes)});
    }
    // On a capped device the copies back wait for room rather than for the
    // engine; there a version is needed by its first copy back's own latest
    // start, and by the op after each release.
    const double needed_ms =
        device == DeviceMemory::kUnlimited
            ? latest_start_ms[pi]
            : std::min(start_ms[static_cast<std::size_t>(c.end_op)] - trace.h2d_ms(c.size_bytes),
                       start_ms[static_cast<std::size_t>(p.release_op) + 1]);
    EngineJob& entry = jobs[static_cast<std::size_t>(job)];
    entry.deadline_ms = std::min(entry.deadline_ms, needed_ms);
  }
  HostCopyOrder result;
  result.versions.reserve(jobs.size());
  for (const std::size_t j : sequence_jobs(jobs, EngineRule::kWorkConserving)) {
    result.versions.push_back(version_of_job[j]);
  }
  // Boundary candidates only matter below the floor: the estimate leaves them out.
  const std::vector<OpIndex> latest = first_releases(model, placements, {});
  result.ready_ms = host_copy_ready_ms(trace, model, issue_host_copies(model, result.versions, latest), start_ms);
  return result;
}

// The order in which the H2D engine should run the prefetches: a sequence over
// estimated times, where a prefetch can start once its version's copy to host
// is done (`ready_ms`, per version) and the budget has room for it, and is
// needed when its end op starts.
std::vector<std::int32_t> engine_order(const PeakModel& model, std::span<const std::int32_t> selected,
                                       std::span<const double> start_ms, std::span<const double> ready_ms,
                                       std::int64_t limit, const ProfileTree& profile, const Trace& trace,
                                       EngineRule rule) {
  std::vector<EngineJob> jobs;
  jobs.reserve(selected.size());
  for (const std::int32_t k : selected) {
    const PeakCandidate& c = model.interior[static_cast<std::size_t>(k)];
    const std::size_t blocked_last =
        profile.find_last_above(static_cast<std::size_t>(c.interior_first()),
                                static_cast<std::size_t>(c.interior_last()), limit - c.size_bytes);
    const OpIndex room_from =
        blocked_last == ProfileTree::kNotFound ? c.interior_first() : static_cast<OpIndex>(blocked_last) + 1;
    jobs.push_back({std::max(ready_ms[static_cast<std::size_t>(c.version)], start_ms[static_cast<std::size_t>(room_from)]),
                    start_ms[static_cast<std::size_t>(c.end_op)], tie_key(c.end_op, k), trace.h2d_ms(c.size_bytes)});
  }
  std::vector<std::int32_t> order;
  order.reserve(jobs.size());
  for (const std::size_t j : sequence_jobs(jobs, rule)) order.push_back(selected[j]);
  return order;
}

// Placement (docs/PEAK_PLANNER.md, "Placement"): selection subtracted each
// candidate over its whole interior; now give back the ops where the memory
// stays within the limit — a suffix (the prefetch moves as early as possible)
// and a prefix (the release moves as late as possible). A candidate that fits
// back entirely was made redundant by later selections and is dropped.
//
// Prefetches are placed first, in engine_order, each no earlier than the one
// before: the engine is FIFO, so a copy issued out of that order would hold up
// the copies queued behind it. Releases follow, latest first for the storage
// whose copy to host can wait the longest (below). Placements come out in that
// order.
std::vector<Placement> place(const Trace& trace, const PeakModel& model, std::span<const std::int32_t> selected,
                             std::span<const double> start_ms, std::span<const double> ready_ms, std::int64_t limit,
                             ProfileTree& profile, EngineRule rule, DeviceMemory device) {
  auto interior = [&](std::int32_t k) -> const PeakCandidate& { return model.interior[static_cast<std::size_t>(k)]; };
  const std::vector<std::int32_t> by_need =
      engine_order(model, selected, start_ms, ready_ms, limit, profile, trace, rule);
  std::vector<std::int32_t> engine_rank(model.interior.size(), 0);
  for (std::size_t i = 0; i < by_need.size(); ++i)
    engine_rank[static_cast<std::size_t>(by_need[i])] = static_cast<std::int32_t>(i);
  std::vector<OpIndex> prefetch_op(model.interior.size(), -1);
  std::set<OpIndex> issued_at;  // ops of the prefetches placed so far
  for (const std::int32_t k : by_need) {
    const PeakCandidate& c = interior(k);
    const auto first = static_cast<std::size_t>(c.interior_first());
    const auto last = static_cast<std::size_t>(c.interior_last());
    const std::int64_t threshold = limit - c.size_bytes;  // ops above it cannot hold the storage
    const std::size_t blocked_last = profile.find_last_above(first, last, threshold);
    if (blocked_last == ProfileTree::kNotFound) {
      profile.add(first, last, c.size_bytes);
      continue;
    }
    // Keep the engine order: no earlier than the copies queued before it. One
    // of those placed after this copy's use cannot be waited for; then it
    // follows the latest one placed no later than its use — never later than
    // the order and the budget require (blocked_last + 1 <= end_op).
    OpIndex queued_before = 0;
    if (auto after = issued_at.upper_bound(c.end_op); after != issued_at.begin()) queued_before = *std::prev(after);
    const OpIndex prefetch = std::max(static_cast<OpIndex>(blocked_last) + 1, queued_before);
    if (prefetch <= c.interior_last()) profile.add(static_cast<std::size_t>(prefetch), last, c.size_bytes);
    prefetch_op[static_cast<std::size_t>(k)] = prefetch;
    issued_at.insert(prefetch);
  }

  std::vector<Placement> placements;
  placements.reserve(selected.size());
  // Releases go as late as the budget allows, one candidate after the other:
  // the earlier a candidate is placed, the later its release. First goes the
  // one whose copy to host can wait the longest — on a capped device the one
  // whose copy to host completes last (its release frees memory only then), on
  // unlimited memory the one copied back last (a release only bounds when its
  // copy to host may be issued) — then the others; ties in selection order.
  std::vector<std::int32_t> release_order(selected.begin(), selected.end());
  if (device == DeviceMemory::kBudget) {
    std::stable_sort(release_order.begin(), release_order.end(), [&](std::int32_t a, std::int32_t b) {
      return ready_ms[static_cast<std::size_t>(interior(a).version)] >
             ready_ms[static_cast<std::size_t>(interior(b).version)];
    });
  } else {
    std::stable_sort(release_order.begin(), release_order.end(),
                     [&](std::int32_t a, std::int32_t b) { return interior(a).end_op > interior(b).end_op; });
  }
  for (const std::int32_t k : release_order) {
    const OpIndex prefetch = prefetch_op[static_cast<std::size_t>(k)];
    if (prefetch < 0) continue;  // dropped
    const PeakCandidate& c = interior(k);
    const auto first = static_cast<std::size_t>(c.interior_first());
    // Memory only grew since the prefetch was placed, so the op that blocked it
    // still blocks: there is a first blocked op before the prefetch.
    const std::size_t blocked_first =
        profile.find_first_above(first, static_cast<std::size_t>(prefetch) - 1, limit - c.size_bytes);
    if (blocked_first > first) profile.add(first, blocked_first - 1, c.size_bytes);
    placements.push_back(
        Placement{k, static_cast<OpIndex>(blocked_first) - 1, prefetch, engine_rank[static_cast<std::size_t>(k)]});
  }
  return placements;
}

// Boundary candidates grouped by boundary, smallest first: the order in which
// select_boundaries considers them. Independent of the placements, so built once.
std::vector<std::int32_t> boundaries_by_edge(const PeakModel& model) {
  std::vector<std::int32_t> order(model.boundary.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const PeakCandidate& x = model.boundary[static_cast<std::size_t>(a)];
    const PeakCandidate& y = model.boundary[static_cast<std::size_t>(b)];
    return std::tie(x.start_op, x.size_bytes) < std::tie(y.start_op, y.size_bytes);
  });
  return order;
}

// Boundary candidates (docs/PEAK_PLANNER.md, "Boundaries"): for each boundary
// whose edge memory is still over the limit after placement, and whose boundary
// candidates together can bring it within the limit, take them by the edge
// reduction max(0, before - max(after, limit)) — the smallest candidate that
// clears the excess, else the largest — until it fits. `by_edge` is
// boundaries_by_edge(model).
std::vector<std::int32_t> select_boundaries(const PeakModel& model, std::span<const Placement> placements,
                                            std::int64_t limit, std::span<const std::int32_t> by_edge) {
  std::vector<std::int32_t> chosen;
  const std::size_t boundaries = model.edge_bytes.size();
  if (boundaries == 0 || model.boundary.empty()) return chosen;
  std::vector<std::int64_t> freed_delta(boundaries + 1, 0);
  for (const Placement& p : placements) {
    const std::int64_t size = model.interior[static_cast<std::size_t>(p.candidate)].size_bytes;
    freed_delta[static_cast<std::size_t>(p.release_op)] += size;
    freed_delta[static_cast<std::size_t>(p.prefetch_op)] -= size;
  }
  auto size_of = [&](std::int32_t k) { return model.boundary[static_cast<std::size_t>(k)].size_bytes; };
  std::vector<std::int32_t> unused;  // the candidates of one boundary not taken yet, smallest first
  std::int64_t freed = 0;
  std::size_t at = 0;
  for (std::size_t boundary = 0; boundary < boundaries; ++boundary) {
    freed += freed_delta[boundary];
    std::size_t group_end = at;
    while (group_end < by_edge.size() &&
           model.boundary[static_cast<std::size_t>(by_edge[group_end])].start_op == static_cast<OpIndex>(boundary)) {
      ++group_end;
    }
    std::int64_t edge = model.edge_bytes[boundary] - freed;
    // Only when the boundary candidates here can bring the edge within the
    // limit: a partial reduction would add round trips and leave it over.
    std::int64_t available = 0;
    for (std::size_t i = at; i < group_end; ++i) available += size_of(by_edge[i]);
    if (edge <= limit || edge - available > limit) {
      at = group_end;
      continue;
    }
    unused.assign(by_edge.begin() + static_cast<std::ptrdiff_t>(at),
                  by_edge.begin() + static_cast<std::ptrdiff_t>(group_end));
    while (edge > limit && !unused.empty()) {
      const std::int64_t excess = edge - limit;
      // The smallest that clears the excess (same reduction, fewest bytes
      // moved), else the largest (removes the most).
      auto pick = std::partition_point(unused.begin(), unused.end(),
                                       [&](std::int32_t k) { return size_of(k) < excess; });
      if (pick == unused.end()) --pick;
      chosen.push_back(*pick);
      edge -= size_of(*pick);
      unused.erase(pick);
    }
    at = group_end;
  }
  return chosen;
}

struct PendingAction {
  Action action;
  // Orders copies within one (op, phase) by engine order: prefetches (those of
  // boundary candidates, needed by the very next op, first) and copies to host
  // (those of versions only boundary candidates use first).
  std::int64_t order_key;
};

int kind_rank(ActionKind kind) {
  switch (kind) {
    case ActionKind::kCopyD2H:
      return 0;
    case ActionKind::kCopyH2D:
      return 1;
    case ActionKind::kReleaseDevice:
      return 2;
    case ActionKind::kReleaseHost:
      return 3;
  }
  return 4;
}

// Turns placements into actions: one copy_d2h per used version, the eviction
// pairs, one release_host per used version after its last prefetch, and the
// end-of-life releases; then the fixed order and de-duplication.
std::vector<Action> emit_actions(const Trace& trace, const PeakModel& model, std::span<const Placement> placements,
                                 std::span<const std::int32_t> boundary_picks, std::span<const HostCopy> host_copies) {
  struct VersionUse {
    OpIndex last_end = -1;
    bool last_end_writes = false;
  };
  std::vector<VersionUse> uses(model.versions.size());
  std::vector<PendingAction> pending;
  auto evict = [&](const PeakCandidate& c, OpIndex release_op, OpIndex prefetch_op, std::int64_t engine_rank) {
    const StorageId id = trace.storage(c.storage).id;
    pending.push_back({Action{release_op, Phase::kPost, ActionKind::kReleaseDevice, id}, 0});
    pending.push_back({Action{prefetch_op, Phase::kPre, ActionKind::kCopyH2D, id}, engine_rank});
    VersionUse& use = uses[static_cast<std::size_t>(c.version)];
    if (c.end_op > use.last_end) {
      use.last_end = c.end_op;
      use.last_end_writes = c.end_op_writes;
    }
  };
  for (const Placement& p : placements) {
    evict(model.interior[static_cast<std::size_t>(p.candidate)], p.release_op, p.prefetch_op, p.engine_rank);
  }
  for (const std::int32_t k : boundary_picks) {
    const PeakCandidate& c = model.boundary[static_cast<std::size_t>(k)];
    evict(c, c.start_op, c.end_op, -1);
  }
  for (std::size_t v = 0; v < uses.size(); ++v) {
    const VersionUse& use = uses[v];
    if (use.last_end < 0) continue;
    const StorageId id = trace.storage(model.versions[v].storage).id;
    const HostCopy& copy = host_copies[v];
    pending.push_back(
        {Action{copy.issue_op >= 0 ? copy.issue_op : model.versions[v].copy_op, Phase::kPost, ActionKind::kCopyD2H, id},
         copy.rank});
    // The host copy is last used by the prefetch before op last_end. When that
    // op writes the storage, the next version's copy may be taken right after
    // it, so the stale copy goes before the op.
    pending.push_back(
        {Action{use.last_end, use.last_end_writes ? Phase::kPre : Phase::kPost, ActionKind::kReleaseHost, id}, 0});
  }
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    const OpIndex last_use = model.last_use[static_cast<std::size_t>(s)];
    const StorageInfo& info = trace.storage(s);
    if (last_use < 0 || info.retained()) continue;
    pending.push_back({Action{last_use, Phase::kPost, ActionKind::kReleaseDevice, info.id}, 0});
  }

  // Execution order: a counting sort by (op, phase), then the fixed order
  // within each (op, phase), which holds few actions.
  std::vector<std::uint32_t> slot_start(2 * static_cast<std::size_t>(trace.op_count()) + 1, 0);
  auto slot = [](const Action& a) { return 2 * static_cast<std::size_t>(a.op) + (a.phase == Phase::kPost ? 1 : 0); };
  for (const PendingAction& p : pending) ++slot_start[slot(p.action) + 1];
  std::partial_sum(slot_start.begin(), slot_start.end(), slot_start.begin());
  std::vector<PendingAction> ordered(pending.size());
  {
    std::vector<std::uint32_t> cursor(slot_start.begin(), slot_start.end() - 1);
    for (const PendingAction& p : pending) ordered[cursor[slot(p.action)]++] = p;
  }
  for (std::size_t s = 0; s + 1 < slot_start.size(); ++s) {
    if (slot_start[s + 1] - slot_start[s] < 2) continue;
    std::sort(ordered.begin() + slot_start[s], ordered.begin() + slot_start[s + 1],
              [](const PendingAction& a, const PendingAction& b) {
                return std::make_tuple(kind_rank(a.action.kind), a.order_key, a.action.storage) <
                       std::make_tuple(kind_rank(b.action.kind), b.order_key, b.action.storage);
              });
  }
  pending = std::move(ordered);
  // An action repeated by two sources has the same order key too, so duplicates
  // end up adjacent.
  std::vector<Action> actions;
  actions.reserve(pending.size());
  for (const PendingAction& p : pending) {
    if (actions.empty() || !(actions.back() == p.action)) actions.push_back(p.action);
  }
  return actions;
}

}  // namespace

Result<PlanResult> PeakPlanner::plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const {
  PlanResult result;
  result.schedule.planner = std::string(name());
  if (trace.op_count() == 0 || !budget_bytes) return result;
  const std::int64_t limit = *budget_bytes;

  const StorageAccesses accesses(trace);
  const PeakModel model = internal::build_peak_model(trace, accesses);
  result.floor = model.floor;
  ProfileTree profile(model.resident_bytes, limit);
  result.initial_peak_bytes = profile.max();
  if (limit < model.floor.bytes) {
    result.notes.push_back(fmt::format(
        "budget {} ({} bytes) is below the unavoidable floor of {} ({} bytes) at op {} ({}): the planned peak "
        "cannot go below the floor; planned as close to the budget as possible",
        format_bytes(limit), limit, format_bytes(model.floor.bytes), model.floor.bytes, model.floor.op,
        trace.op_name(model.floor.op)));
  }

  const std::vector<std::int32_t> selected = Selection(trace, model, options_.weights, limit, profile).run();
  // Below the floor the selection stops at the floor; placement then keeps to
  // what was reached instead of the unreachable budget.
  const std::int64_t placement_limit = std::max(limit, profile.max());
  const std::vector<double> start_ms = op_start_ms(trace);
  const std::vector<std::int32_t> by_edge = boundaries_by_edge(model);
  // The first placement's copies to host follow their copy ops.
  const std::vector<double> copy_op_ready = copy_op_ready_ms(trace, model, selected, start_ms);
  // The stall estimate models the device the schedule is tuned for.
  const std::optional<std::int64_t> memory_cap =
      options_.device_memory == DeviceMemory::kBudget ? std::optional<std::int64_t>(limit) : std::nullopt;
  struct Variant {
    std::vector<Action> actions;
    std::size_t boundary_picks = 0;
    std::int64_t peak_bytes = 0;
    double stall_ms = 0.0;
  };
  // Placement runs twice (docs/PEAK_PLANNER.md, "Copies to host"). The first
  // placement, with copies to host in op order and the idle-filling prefetch
  // order, gives the releases and copies back that say when each version is
  // needed; the copies to host are sequenced from them. Then each prefetch
  // order is placed again with the copies to host in that sequence, and the
  // schedule with the smaller estimated stall is kept.
  auto first_placement = [&] {
    ProfileTree first = profile;
    const std::vector<Placement> placements = place(trace, model, selected, start_ms, copy_op_ready, placement_limit,
                                                    first, EngineRule::kFillIdleEngine, options_.device_memory);
    return order_host_copies(trace, model, placements, start_ms, options_.device_memory);
  };
  auto build = [&](EngineRule rule, ProfileTree& tree, const HostCopyOrder& host_order) {
    const std::vector<Placement> placements =
        place(trace, model, selected, start_ms, host_order.ready_ms, placement_limit, tree, rule, options_.device_memory);
    const std::vector<std::int32_t> boundary_picks = select_boundaries(model, placements, limit, by_edge);
    const std::vector<HostCopy> host_copies =
        issue_host_copies(model, host_order.versions, first_releases(model, placements, boundary_picks));
    Variant variant{emit_actions(trace, model, placements, boundary_picks, host_copies), boundary_picks.size(),
                    tree.max(), 0.0};
    variant.stall_ms = internal::estimate_stall_ms(trace, accesses, variant.actions, memory_cap);
    return variant;
  };
  Variant chosen;
  if (selected.empty()) {
    chosen = build(EngineRule::kSoonestNeeded, profile, HostCopyOrder{});
  } else {
    // The idle-filling order is built on a second thread, on its own copy of
    // the profile, taken while this thread runs the first placement.
    HostCopyOrder host_order;
    std::latch profile_copied(1), order_ready(1);
    Variant fill;
    std::jthread worker([&] {
      ProfileTree fill_profile = profile;
      profile_copied.count_down();
      order_ready.wait();
      fill = build(EngineRule::kFillIdleEngine, fill_profile, host_order);
    });
    host_order = first_placement();
    order_ready.count_down();
    profile_copied.wait();
    chosen = build(EngineRule::kSoonestNeeded, profile, host_order);
    worker.join();
    if (fill.stall_ms < chosen.stall_ms) chosen = std::move(fill);
  }
  if (chosen.boundary_picks > 0) {
    result.notes.push_back(
        fmt::format("{} boundary candidate(s) used to lower edge memory between ops", chosen.boundary_picks));
  }
  result.planned_peak_bytes = chosen.peak_bytes;
  result.schedule.actions = std::move(chosen.actions);
  return result;
}

}  // namespace hyperoffload
