#include "hyperoffload/plan/peak_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
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
      const CoveringIndex::Best best = index_.query(peak_op);
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

// When each selected candidate's copy back could start and when it is needed,
// in ms of compute without stalls: the version's copy to host is simulated on a
// FIFO engine (issued after its copy op, in op order), and the candidate is
// needed when its end op starts. Used to order the prefetches.
struct PrefetchTiming {
  double ready_ms = 0.0;     // its version's D2H has completed
  double deadline_ms = 0.0;  // its end op starts
};

std::vector<PrefetchTiming> estimate_timing(const Trace& trace, const PeakModel& model,
                                            std::span<const std::int32_t> selected) {
  std::vector<double> start_ms(static_cast<std::size_t>(trace.op_count()) + 1, 0.0);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    start_ms[static_cast<std::size_t>(op) + 1] = start_ms[static_cast<std::size_t>(op)] + trace.op_duration_ms(op);
  }
  std::vector<std::int32_t> versions;
  for (const std::int32_t k : selected) versions.push_back(model.interior[static_cast<std::size_t>(k)].version);
  std::sort(versions.begin(), versions.end(), [&](std::int32_t a, std::int32_t b) {
    const internal::PeakVersion& x = model.versions[static_cast<std::size_t>(a)];
    const internal::PeakVersion& y = model.versions[static_cast<std::size_t>(b)];
    return std::tie(x.copy_op, a) < std::tie(y.copy_op, b);
  });
  versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
  std::vector<double> done_ms(model.versions.size(), 0.0);
  double engine_free_ms = 0.0;
  for (const std::int32_t v : versions) {
    const internal::PeakVersion& version = model.versions[static_cast<std::size_t>(v)];
    const double issue_ms = start_ms[static_cast<std::size_t>(version.copy_op) + 1];
    engine_free_ms = std::max(engine_free_ms, issue_ms) + trace.d2h_ms(trace.storage(version.storage).size_bytes);
    done_ms[static_cast<std::size_t>(v)] = engine_free_ms;
  }
  std::vector<PrefetchTiming> timing(model.interior.size());
  for (const std::int32_t k : selected) {
    const PeakCandidate& c = model.interior[static_cast<std::size_t>(k)];
    timing[static_cast<std::size_t>(k)] = {done_ms[static_cast<std::size_t>(c.version)],
                                           start_ms[static_cast<std::size_t>(c.end_op)]};
  }
  return timing;
}

// Two ways to order the prefetches on their FIFO copy engine; the planner
// builds both schedules and keeps the one with the smaller estimated stall
// (internal/stall_estimate.h).
enum class PrefetchOrder : std::uint8_t {
  // Soonest needed first. Best when compute hides the copies.
  kSoonestNeeded,
  // Soonest needed first, except that while the next copy cannot start yet —
  // its data is not on the host, or the budget has no room for it — copies
  // needed later that can start and finish before it run in the idle time
  // (over estimated times). Best when copies to host lag behind compute.
  kFillIdleEngine,
};

// The order in which the copy engine should run the prefetches, from a
// simulation of the engine over estimated times.
std::vector<std::int32_t> engine_order(const Trace& trace, const PeakModel& model,
                                       std::span<const std::int32_t> selected, std::int64_t limit,
                                       const ProfileTree& profile, PrefetchOrder rule) {
  const std::vector<PrefetchTiming> timing = estimate_timing(trace, model, selected);
  std::vector<double> start_ms(static_cast<std::size_t>(trace.op_count()) + 1, 0.0);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    start_ms[static_cast<std::size_t>(op) + 1] = start_ms[static_cast<std::size_t>(op)] + trace.op_duration_ms(op);
  }
  struct Job {
    std::int32_t candidate;
    double available_ms;  // data on the host and room on the device
    double deadline_ms;
    OpIndex end_op;
    double duration_ms;
  };
  std::vector<Job> jobs;
  jobs.reserve(selected.size());
  for (const std::int32_t k : selected) {
    const PeakCandidate& c = model.interior[static_cast<std::size_t>(k)];
    const std::size_t blocked_last =
        profile.find_last_above(static_cast<std::size_t>(c.interior_first()),
                                static_cast<std::size_t>(c.interior_last()), limit - c.size_bytes);
    const OpIndex room_from =
        blocked_last == ProfileTree::kNotFound ? c.interior_first() : static_cast<OpIndex>(blocked_last) + 1;
    const PrefetchTiming& t = timing[static_cast<std::size_t>(k)];
    jobs.push_back({k, std::max(t.ready_ms, start_ms[static_cast<std::size_t>(room_from)]), t.deadline_ms, c.end_op,
                    trace.h2d_ms(c.size_bytes)});
  }
  // by_deadline: the EDD sequence; by_availability feeds the heap of startable jobs.
  auto sooner = [&](std::size_t a, std::size_t b) {
    return std::tie(jobs[a].deadline_ms, jobs[a].end_op, jobs[a].candidate) <
           std::tie(jobs[b].deadline_ms, jobs[b].end_op, jobs[b].candidate);
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
  std::vector<std::int32_t> order;
  order.reserve(jobs.size());
  double now_ms = 0.0;
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
    if (rule == PrefetchOrder::kFillIdleEngine && jobs[due].available_ms > now_ms) {
      while (!startable.empty() && done[startable.front()]) {
        std::pop_heap(startable.begin(), startable.end(), later);
        startable.pop_back();
      }
      const bool fills_gap =
          !startable.empty() && now_ms + jobs[startable.front()].duration_ms <= jobs[due].available_ms;
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
    order.push_back(jobs[run].candidate);
    now_ms += jobs[run].duration_ms;
  }
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
// the copies queued behind it. Releases follow, in selection order.
std::vector<Placement> place(const Trace& trace, const PeakModel& model, std::span<const std::int32_t> selected,
                             std::int64_t limit, ProfileTree& profile, PrefetchOrder rule) {
  auto interior = [&](std::int32_t k) -> const PeakCandidate& { return model.interior[static_cast<std::size_t>(k)]; };
  const std::vector<std::int32_t> by_need = engine_order(trace, model, selected, limit, profile, rule);
  std::vector<std::int32_t> engine_rank(model.interior.size(), 0);
  for (std::size_t i = 0; i < by_need.size(); ++i)
    engine_rank[static_cast<std::size_t>(by_need[i])] = static_cast<std::int32_t>(i);
  std::vector<OpIndex> prefetch_op(model.interior.size(), -1);
  OpIndex issued_up_to = 0;
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
    // Keep the engine order, unless that would be too late for this copy.
    const OpIndex prefetch = std::min(std::max(static_cast<OpIndex>(blocked_last) + 1, issued_up_to), c.end_op);
    if (prefetch <= c.interior_last()) profile.add(static_cast<std::size_t>(prefetch), last, c.size_bytes);
    prefetch_op[static_cast<std::size_t>(k)] = prefetch;
    issued_up_to = std::max(issued_up_to, prefetch);
  }

  std::vector<Placement> placements;
  placements.reserve(selected.size());
  for (const std::int32_t k : selected) {
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

// Boundary candidates (docs/PEAK_PLANNER.md, "Boundaries"): for each boundary
// whose edge memory is still over the limit after placement, and whose boundary
// candidates together can bring it within the limit, take them by the edge
// reduction max(0, before - max(after, limit)) — the smallest candidate that
// clears the excess, else the largest — until it fits.
std::vector<std::int32_t> select_boundaries(const PeakModel& model, std::span<const Placement> placements,
                                            std::int64_t limit) {
  std::vector<std::int32_t> chosen;
  const std::size_t boundaries = model.edge_bytes.size();
  if (boundaries == 0 || model.boundary.empty()) return chosen;
  std::vector<std::int64_t> freed_delta(boundaries + 1, 0);
  for (const Placement& p : placements) {
    const std::int64_t size = model.interior[static_cast<std::size_t>(p.candidate)].size_bytes;
    freed_delta[static_cast<std::size_t>(p.release_op)] += size;
    freed_delta[static_cast<std::size_t>(p.prefetch_op)] -= size;
  }
  // Boundary candidates grouped by boundary, smallest first.
  std::vector<std::int32_t> order(model.boundary.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const PeakCandidate& x = model.boundary[static_cast<std::size_t>(a)];
    const PeakCandidate& y = model.boundary[static_cast<std::size_t>(b)];
    return std::tie(x.start_op, x.size_bytes) < std::tie(y.start_op, y.size_bytes);
  });
  std::int64_t freed = 0;
  std::size_t at = 0;
  for (std::size_t boundary = 0; boundary < boundaries; ++boundary) {
    freed += freed_delta[boundary];
    std::size_t group_end = at;
    while (group_end < order.size() &&
           model.boundary[static_cast<std::size_t>(order[group_end])].start_op == static_cast<OpIndex>(boundary)) {
      ++group_end;
    }
    std::int64_t edge = model.edge_bytes[boundary] - freed;
    // Only when the boundary candidates here can bring the edge within the
    // limit: a partial reduction would add round trips and leave it over.
    std::int64_t available = 0;
    for (std::size_t i = at; i < group_end; ++i)
      available += model.boundary[static_cast<std::size_t>(order[i])].size_bytes;
    if (edge - available > limit) {
      at = group_end;
      continue;
    }
    std::size_t remaining_end = group_end;  // candidates [at, remaining_end) are unused
    while (edge > limit && remaining_end > at) {
      const std::int64_t excess = edge - limit;
      auto size_of = [&](std::size_t i) { return model.boundary[static_cast<std::size_t>(order[i])].size_bytes; };
      std::size_t pick = remaining_end - 1;  // the largest: removes the most when none clears the excess
      if (size_of(pick) >= excess) {
        // The smallest that clears it: same reduction, fewest bytes moved.
        std::size_t lo = at, hi = remaining_end - 1;
        while (lo < hi) {
          const std::size_t mid = lo + (hi - lo) / 2;
          if (size_of(mid) >= excess) {
            hi = mid;
          } else {
            lo = mid + 1;
          }
        }
        pick = lo;
      }
      chosen.push_back(order[pick]);
      edge -= size_of(pick);
      std::rotate(order.begin() + static_cast<std::ptrdiff_t>(pick),
                  order.begin() + static_cast<std::ptrdiff_t>(pick) + 1,
                  order.begin() + static_cast<std::ptrdiff_t>(remaining_end));
      --remaining_end;
    }
    at = group_end;
  }
  return chosen;
}

struct PendingAction {
  Action action;
  // Orders copies within one (op, phase): prefetches by engine order (those of
  // boundary candidates, needed by the very next op, first), copies to host by
  // the first release that waits for them.
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
                                 std::span<const std::int32_t> boundary_picks) {
  struct VersionUse {
    OpIndex first_release = -1;
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
    if (use.first_release < 0 || release_op < use.first_release) use.first_release = release_op;
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
    pending.push_back({Action{model.versions[v].copy_op, Phase::kPost, ActionKind::kCopyD2H, id}, use.first_release});
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
  struct Variant {
    std::vector<Action> actions;
    std::size_t boundary_picks = 0;
    std::int64_t peak_bytes = 0;
    double stall_ms = 0.0;
  };
  auto build = [&](PrefetchOrder rule, ProfileTree& tree) {
    const std::vector<Placement> placements = place(trace, model, selected, placement_limit, tree, rule);
    const std::vector<std::int32_t> boundary_picks = select_boundaries(model, placements, limit);
    Variant variant{emit_actions(trace, model, placements, boundary_picks), boundary_picks.size(), tree.max(), 0.0};
    variant.stall_ms = internal::estimate_stall_ms(trace, accesses, variant.actions);
    return variant;
  };
  // The two orders are independent: the idle-filling one runs on a second
  // thread, on its own copy of the profile.
  Variant chosen;
  if (selected.empty()) {
    chosen = build(PrefetchOrder::kSoonestNeeded, profile);
  } else {
    ProfileTree fill_profile = profile;
    Variant fill;
    std::jthread worker([&] { fill = build(PrefetchOrder::kFillIdleEngine, fill_profile); });
    chosen = build(PrefetchOrder::kSoonestNeeded, profile);
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
