#include "hyperoffload/plan/peak/peak_selection.h"

#include <algorithm>
#include <future>
#include <span>
#include <vector>

#include "hyperoffload/plan/common/beside.h"
#include "hyperoffload/plan/common/covering_index.h"
#include "hyperoffload/plan/peak/transfer_load.h"

namespace hyperoffload::internal {
namespace {

constexpr std::int32_t kNone = CoveringIndex::kNoEntry;
// Lazy evaluation stops at a re-evaluated candidate whose value is within
// this fraction of the leader's upper bound. Exact lazy evaluation degenerates
// when every pick lowers many candidates' values a little: on a deep
// transformer every saved activation covers the peak and every pick adds
// copy-engine load to every window, so the refreshes per step grew with the
// layers (a 560k-op step took 165 s, 47 refreshes per step at 56k ops); within
// 1% they stay at about six per step at any depth.
constexpr double kNearBest = 0.01;
// See Selection::key.
constexpr double kSizeTieBreak = 1e-9;
// Picks between checks of the stop token: a few ms on a large trace.
constexpr std::int32_t kStopCheckSteps = 256;

// Note [A cap on re-evaluations]
// Lazy evaluation re-evaluates the leader until a fresh candidate is within
// kNearBest of the leader's bound. Each re-evaluation but a pick's last cuts
// that candidate's cached value by more than kNearBest, and a pick
// re-evaluates a candidate at most once, so a pick makes at most as many as
// there are candidates covering its peak op: O(candidates) per pick and
// O(candidates²) in all at worst, which nothing in the scores rules out. On
// every trace measured a pick makes about six (2.65M for the 414k picks of the
// 1M-op chain at 50%) — but some picks make far more: when the peak moves,
// every candidate covering the new peak op can be stale by more than
// kNearBest, and single picks on the chain re-evaluated up to 182k
// candidates. At PeakPlannerOptions::max_refreshes_per_pick (64) the pick takes the best
// candidate re-evaluated so far, which is exact for what it has seen and may
// miss a stale leader; the planner's note counts such picks. So selection is
// O(max_refreshes_per_pick × log n) per pick on top of the query, whatever the
// trace. At 64 the simulated overheads of the peak and hybrid plans of every
// example and corpus trace at 30/50/70% on both devices are as without a cap
// (the demo's peak plan at 70%: 29.99% against 30.36%; BENCHMARKS.md).

// Copy-back windows (CopyBackWindows): per candidate, the earliest start of
// its copy back, the end of the last op of its gap where it must be off the
// device (0 where there is none).
//
// Before planning: where the profile before anything is selected is over the
// limit. Selections can only move that op earlier, so hiding stays an upper
// bound. last_over[x]: the last op at or before x above the limit, -1 when
// none.
std::vector<double> windows_before_planning(const PeakModel& model, std::int64_t limit,
                                            std::span<const double> compute_before) {
  std::vector<OpIndex> last_over(model.resident_bytes.size(), -1);
  for (std::size_t op = 0; op < last_over.size(); ++op) {
    last_over[op] = model.resident_bytes[op] > limit ? static_cast<OpIndex>(op) : (op > 0 ? last_over[op - 1] : -1);
  }
  std::vector<double> from_ms(model.interior.size(), 0.0);
  for (std::size_t k = 0; k < model.interior.size(); ++k) {
    const PeakCandidate& c = model.interior[k];
    const OpIndex last = last_over[static_cast<std::size_t>(c.interior_last())];
    if (last >= c.interior_first()) from_ms[k] = compute_before[static_cast<std::size_t>(last) + 1];
  }
  return from_ms;
}

// After a pass that took `taken` and left `after`: where `after`, with the
// candidate on the device, is over the limit.
std::vector<double> windows_after_a_pass(const PeakModel& model, std::int64_t limit,
                                         std::span<const double> compute_before, const ProfileTree& after,
                                         std::span<const std::int32_t> taken) {
  std::vector<bool> was_taken(model.interior.size(), false);
  for (const std::int32_t k : taken) was_taken[static_cast<std::size_t>(k)] = true;
  std::vector<double> from_ms(model.interior.size(), 0.0);
  for (std::size_t k = 0; k < model.interior.size(); ++k) {
    const PeakCandidate& c = model.interior[k];
    const std::int64_t threshold = limit - (was_taken[k] ? c.size_bytes : 0);
    const std::size_t last = after.find_last_above(static_cast<std::size_t>(c.interior_first()),
                                                   static_cast<std::size_t>(c.interior_last()), threshold);
    if (last != ProfileTree::kNotFound) from_ms[k] = compute_before[last + 1];
  }
  return from_ms;
}

// Peak-driven selection (docs/PEAK_PLANNER.md, "Selection"). Candidates sit in
// a CoveringIndex keyed by an upper bound of their score. Every selection only
// lowers the profile (coverage shrinks), queues another copy to host (hiding
// shrinks) and commits more copy-engine time (the neighbour penalty grows), so
// a cached factor stays an upper bound; re-evaluating the current leader until
// it is fresh, or until a fresh one is within kNearBest of the leader's bound,
// gives a candidate within kNearBest of the exact best (lazy evaluation).
//
// Scores scale with min(size, E): candidates known to be at least as large as
// the excess E (the "large" group) all remove E and are keyed by their factor F
// alone; the others are keyed by size * F, an upper bound of their value once E
// drops below their size. Such a candidate is moved to the large group when it
// leads a query; E only decreases, so it moves at most once.
class Selection {
 public:
  // `compute_before`: op_start_ms(trace); `prefetch_from_ms`: per
  // candidate, the earliest start of its copy back (a copy-back window, or 0);
  // `index`: the covering index of index_in_background(trace, model), taken
  // once the records are made.
  Selection(const Trace& trace, const PeakModel& model, const PeakScoreWeights& weights, SelectionTies ties,
            HostCopyDeadline host_copy_deadline, std::int32_t max_refreshes, std::int64_t limit,
            ProfileTree& profile, std::vector<double> compute_before, std::vector<double> prefetch_from_ms,
            std::future<CoveringIndex> index)
      : weights_(weights),
        ties_(ties),
        host_copy_deadline_(host_copy_deadline),
        max_refreshes_(std::max<std::int32_t>(1, max_refreshes)),
        limit_(limit),
        profile_(profile),
        trace_(trace),
        compute_before_(std::move(compute_before)),
        load_(compute_before_),
        d2h_queue_(static_cast<std::size_t>(trace.op_count()) + 1, 0.0) {
    const std::size_t count = model.interior.size();
    gaps_.resize(count);
    for (std::size_t k = 0; k < count; ++k) {
      const PeakCandidate& c = model.interior[k];
      Gap& gap = gaps_[k];
      gap.interior_first = c.interior_first();
      gap.interior_last = c.interior_last();
      gap.version = c.version;
      gap.copy_op = model.versions[static_cast<std::size_t>(c.version)].copy_op;
      gap.size_bytes = c.size_bytes;
      gap.copy_from_ms = compute_before_[gap.window_first()];
      gap.end_ms = compute_before_[static_cast<std::size_t>(c.end_op)];
      gap.prefetch_from_ms = prefetch_from_ms[k];
    }
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
      // Nothing is selected yet: no queue, no contention. The peak op is always
      // among the covered over-budget ops, hence the -1 in the coverage; the
      // bound uses the initial count, which can only shrink.
      const auto first = static_cast<std::size_t>(c.interior_first());
      const auto end = static_cast<std::size_t>(c.end_op);
      gaps_[k].factor =
          combine(hiding(k, /*queued_ms=*/0.0), coverage_fraction(over_before[end] - over_before[first]), 0.0);
    }
    for (const PeakCandidate& c : model.interior) {
      largest_bytes_ = std::max(largest_bytes_, static_cast<double>(c.size_bytes));
    }
    std::vector<double> keys(count);
    for (std::size_t k = 0; k < count; ++k) keys[k] = key(k, IndexGroup::kSmall);
    index_ = index.get();
    index_.activate_all(IndexGroup::kSmall, keys);
  }

  // Note [The covering index beside the records]
  // The covering index and the per-candidate records (Gap, the initial
  // bounds and keys) are both made from the model alone, and each is a
  // pass over every candidate that mostly waits for memory: on the 1M-storage
  // random trace 0.21 s and 0.14 s, on the 1M-op chain 0.09 s and 0.06 s. So
  // on a large trace the index is built on a thread of its own while the
  // records are made here (plan/common/beside.h); the selection starts once
  // both are done.
  static std::future<CoveringIndex> index_in_background(const Trace& trace, const PeakModel& model,
                                                        std::size_t beside_min_candidates) {
    return std::async(beside_when_large(model.interior.size(), beside_min_candidates),
                      [&trace, &model] { return CoveringIndex(trace.op_count(), intervals(model)); });
  }

  // Runs to completion or until `stop` is requested; returns the selected
  // interior candidates in order.
  PeakSelection run(std::stop_token stop) {
    PeakSelection out;
    std::vector<std::int32_t>& selected = out.picks;
    for (std::int32_t step = 0;; ++step) {
      if (step % kStopCheckSteps == 0 && stop.stop_requested()) break;
      const std::int64_t peak = profile_.max();
      if (peak <= limit_) break;
      const auto peak_op = static_cast<OpIndex>(profile_.argmax());
      peak_op_ = peak_op;
      const std::int64_t excess = peak - limit_;
      const std::int32_t pick = best_at(peak_op, excess, step);
      if (pick == kNone) break;  // nothing covers the peak: it sits at the floor
      const Gap& gap = gaps_[static_cast<std::size_t>(pick)];
      profile_.add(static_cast<std::size_t>(gap.interior_first), static_cast<std::size_t>(gap.interior_last),
                   -gap.size_bytes);
      const double d2h_ms = trace_.d2h_ms(gap.size_bytes);
      load_.add(gap.window_first(), gap.window_last(), d2h_ms + trace_.h2d_ms(gap.size_bytes));
      if (!version_queued_[static_cast<std::size_t>(gap.version)]) {
        version_queued_[static_cast<std::size_t>(gap.version)] = true;
        queue_d2h(gap.copy_op, d2h_ms);
      }
      index_.set(pick, IndexGroup::kNone, 0.0);
      selected.push_back(pick);
    }
    out.cut_picks = cut_picks_;
    return out;
  }

 private:
  static std::vector<internal::OpInterval> intervals(const PeakModel& model) {
    std::vector<internal::OpInterval> out;
    out.reserve(model.interior.size());
    for (const PeakCandidate& c : model.interior) out.push_back({c.interior_first(), c.interior_last()});
    return out;
  }

  // Hiding: how much of the copy back fits between the moment it can start
  // and the data's use. It starts once the data is on the host, and not
  // before its Gap::prefetch_from_ms (CopyBackWindows; 0 without). The copy to host
  // starts after the version's copy op, behind the copies of selected
  // candidates issued no later (the engine is FIFO; the queue is estimated as
  // busy from time 0); the fraction of the copy back that fits before the end
  // op starts is clamped to [0, 1]. With nothing selected and no op over the
  // limit late in the gap this is (window - D2H) / H2D: 1 when the compute
  // from the copy op to the use covers both transfers. `queued_ms` is
  // queued_d2h_ms of the version's copy op (0 with nothing selected, as when
  // the bounds are first made). With HostCopyDeadline::kBeforePeak it is 0
  // when the data reaches the host after the current peak op starts. (That
  // rule is not monotone in the picks: the peak op may move later and give the
  // credit back, which lazy evaluation then misses; the initial bounds, made
  // without a peak op, stay upper bounds.)
  double hiding(std::size_t k, double queued_ms) const {
    const Gap& gap = gaps_[k];
    const double d2h_ms = trace_.d2h_ms(gap.size_bytes);
    const double h2d_ms = trace_.h2d_ms(gap.size_bytes);
    const double own_ms = version_queued_[static_cast<std::size_t>(gap.version)] ? 0.0 : d2h_ms;
    const double on_host_ms = std::max(gap.copy_from_ms + d2h_ms, queued_ms + own_ms);
    if (host_copy_deadline_ == HostCopyDeadline::kBeforePeak && peak_op_ >= 0 &&
        on_host_ms > compute_before_[static_cast<std::size_t>(peak_op_)]) {
      return 0.0;
    }
    const double slack_ms = gap.end_ms - std::max(on_host_ms, gap.prefetch_from_ms);
    if (h2d_ms <= 0.0) return slack_ms >= 0.0 ? 1.0 : 0.0;
    return std::clamp(slack_ms / h2d_ms, 0.0, 1.0);
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

  // A large candidate's key is its factor; with SelectionTies::kSmallestFirst
  // plus a tie-break below any real difference of factors, so that among
  // candidates that all remove the excess and score alike the smaller wins.
  // (When none of them can hide its copy back, their factors are all the base
  // credit or all clamped to 0, and the smallest copy back is usually, not
  // always, the shortest stall.) A constant per candidate, so the key stays an
  // upper bound of its value.
  double key(std::size_t k, IndexGroup group) const {
    const auto size = static_cast<double>(gaps_[k].size_bytes);
    const double factor = gaps_[k].factor;
    if (group != IndexGroup::kLarge) return size * factor;
    return ties_ == SelectionTies::kSmallestFirst ? factor + kSizeTieBreak * (1.0 - size / largest_bytes_) : factor;
  }

  // The value a candidate's key stands for at excess E: what it removes times
  // its factor (the score without the common 1/E).
  double value(std::int32_t k, std::int64_t excess) const {
    const double key = index_.key(k);
    return index_.group(k) == IndexGroup::kLarge ? static_cast<double>(excess) * key : key;
  }

  // Between the two groups' leaders at equal value: the one generated first,
  // or with SelectionTies::kSmallestFirst the smaller, which moves fewer bytes
  // for the same score.
  bool large_wins_tie(std::int32_t large, std::int32_t small) const {
    if (ties_ == SelectionTies::kSmallestFirst) {
      const std::int64_t large_bytes = gaps_[static_cast<std::size_t>(large)].size_bytes;
      const std::int64_t small_bytes = gaps_[static_cast<std::size_t>(small)].size_bytes;
      if (large_bytes != small_bytes) return large_bytes < small_bytes;
    }
    return large < small;
  }

  std::int32_t best_at(OpIndex peak_op, std::int64_t excess, std::int32_t step) {
    // The best candidate re-evaluated in this step so far and its exact value.
    std::int32_t best_fresh = kNone;
    double best_fresh_value = 0.0;
    std::int32_t refreshes = 0;
    for (;;) {
      const CoveringIndex::Best best = index_.query_cached(peak_op);
      std::int32_t pick = best.small;
      if (best.large != kNone) {
        if (pick == kNone) {
          pick = best.large;
        } else {
          const double small_value = value(best.small, excess);
          const double large_value = value(best.large, excess);
          if (large_value > small_value || (large_value == small_value && large_wins_tie(best.large, best.small))) {
            pick = best.large;
          }
        }
      }
      if (pick == kNone) return pick;
      const auto index = static_cast<std::size_t>(pick);
      if (index_.group(pick) == IndexGroup::kSmall && gaps_[index].size_bytes >= excess) {
        // Its key size * F overstates what it can remove now: move it to the
        // large group, keyed by F, and look again.
        index_.set(pick, IndexGroup::kLarge, key(index, IndexGroup::kLarge));
        continue;
      }
      if (gaps_[index].fresh_at == step) return pick;
      // The leader's key is an upper bound of its value: a fresh candidate
      // within kNearBest of it is within kNearBest of the exact best.
      if (best_fresh != kNone && best_fresh_value >= (1.0 - kNearBest) * value(pick, excess)) return best_fresh;
      if (refreshes == max_refreshes_) {
        ++cut_picks_;
        return best_fresh;
      }
      ++refreshes;
      // When this one's value falls, one of these likely leads: its record is
      // on the way while this one is re-evaluated.
      for (const std::int32_t next : index_.runners_up(index_.group(pick))) {
        __builtin_prefetch(&gaps_[static_cast<std::size_t>(next)]);
      }
      refresh(pick);
      gaps_[index].fresh_at = step;
      const double fresh_value = value(pick, excess);
      if (best_fresh == kNone || fresh_value > best_fresh_value ||
          (fresh_value == best_fresh_value && pick < best_fresh)) {
        best_fresh = pick;
        best_fresh_value = fresh_value;
      }
    }
  }

  static constexpr double kMaxNeighbor = 2.0;

  void refresh(std::int32_t k) {
    const auto index = static_cast<std::size_t>(k);
    Gap& gap = gaps_[index];
    const auto over_inside = static_cast<std::int64_t>(
        profile_.count_over(static_cast<std::size_t>(gap.interior_first), static_cast<std::size_t>(gap.interior_last)));
    // Neighbour impact: the copy-engine time that selected candidates already
    // claim inside this candidate's window per unit of compute there, capped at
    // 2 so that a twice-oversubscribed window weighs more than a merely busy one.
    const double committed_ms = load_.load(gap.window_first(), gap.window_last(), gap.copy_from_ms, gap.end_ms);
    const double window_ms = gap.end_ms - gap.copy_from_ms;
    const double neighbor =
        window_ms > 0.0 ? std::min(kMaxNeighbor, committed_ms / window_ms) : (committed_ms > 0.0 ? kMaxNeighbor : 0.0);
    const double hiding = this->hiding(index, queued_d2h_ms(gap.copy_op));
    gap.factor = combine(hiding, coverage_fraction(over_inside), neighbor);
    const IndexGroup group = index_.group(k);
    index_.set(k, group, key(index, group));
  }

  const PeakScoreWeights& weights_;
  SelectionTies ties_;
  HostCopyDeadline host_copy_deadline_;
  OpIndex peak_op_ = -1;  // the op whose peak the current pick resolves (-1 before the first)
  std::int32_t max_refreshes_ = 1;  // PeakPlannerOptions::max_refreshes_per_pick, at least 1
  std::int64_t cut_picks_ = 0;      // picks that stopped at max_refreshes_
  std::int64_t limit_;
  ProfileTree& profile_;
  CoveringIndex index_;
  const Trace& trace_;  // copy times
  std::vector<double> compute_before_;  // compute ms of ops [0, x)
  internal::TransferLoad load_;
  std::int64_t initial_over_ = 0;
  double largest_bytes_ = 1.0;            // the largest candidate's size (at least 1), for key()
  std::vector<bool> version_queued_;    // a selected candidate already copies this version
  std::vector<double> d2h_queue_;       // Fenwick tree over copy ops, see queued_d2h_ms
  // What a re-evaluation reads of one candidate, in one cache line: the
  // selection re-evaluates candidates in no order, and on the 1M-op chain
  // (2.1M re-evaluations) each array read was a cache miss.
  struct alignas(64) Gap {
    OpIndex interior_first = 0;
    OpIndex interior_last = 0;
    OpIndex copy_op = 0;  // its version's: the copy to host goes after it
    std::int32_t version = 0;
    std::int64_t size_bytes = 0;
    double copy_from_ms = 0.0;      // compute before op copy_op + 1: the copy to host may start
    double end_ms = 0.0;            // compute before its end op: the copy back must be done
    double prefetch_from_ms = 0.0;  // the earliest start of its copy back (CopyBackWindows, or 0)
    double factor = 0.0;            // cached F: an upper bound of the current one
    std::int32_t fresh_at = -1;     // step at which factor was last made exact
    // Its window: the ops whose compute can hide its round trip, from after
    // its version's copy op (the copy to host can start) to before its end op;
    // copy_from_ms and end_ms are the compute before its first op and after
    // its last.
    std::size_t window_first() const { return static_cast<std::size_t>(copy_op) + 1; }
    std::size_t window_last() const { return static_cast<std::size_t>(interior_last); }
  };
  std::vector<Gap> gaps_;  // per interior candidate
};

}  // namespace

PeakSelection select_peak_candidates(const Trace& trace, const PeakModel& model, const PeakPlannerOptions& options,
                                     std::int64_t limit_bytes, ProfileTree& profile, std::stop_token stop) {
  const PeakScoreWeights& weights = options.weights;
  const SelectionTies ties = options.ties;
  const HostCopyDeadline host_copy_deadline = options.host_copy_deadline;
  std::vector<double> compute_before = op_start_ms(trace);
  std::vector<double> prefetch_from_ms;
  switch (options.windows) {
    case CopyBackWindows::kNone:
      prefetch_from_ms.assign(model.interior.size(), 0.0);
      break;
    case CopyBackWindows::kBeforePlanning:
      prefetch_from_ms = windows_before_planning(model, limit_bytes, compute_before);
      break;
    case CopyBackWindows::kAfterAFirstPass: {
      // A first pass, with the windows before planning, on a copy of the profile.
      ProfileTree after = profile;
      const PeakSelection first_pass =
          Selection(trace, model, weights, ties, host_copy_deadline, options.max_refreshes_per_pick, limit_bytes, after,
                    compute_before, windows_before_planning(model, limit_bytes, compute_before),
                    Selection::index_in_background(trace, model, options.beside_min_candidates))
              .run(stop);
      prefetch_from_ms = windows_after_a_pass(model, limit_bytes, compute_before, after, first_pass.picks);
      break;
    }
  }
  return Selection(trace, model, weights, ties, host_copy_deadline, options.max_refreshes_per_pick, limit_bytes, profile,
                   std::move(compute_before), std::move(prefetch_from_ms),
                   Selection::index_in_background(trace, model, options.beside_min_candidates))
      .run(stop);
}

}  // namespace hyperoffload::internal
