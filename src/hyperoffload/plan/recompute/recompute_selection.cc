#include "hyperoffload/plan/recompute/recompute_selection.h"

#include <algorithm>
#include <limits>

#include "hyperoffload/plan/common/covering_index.h"
#include "hyperoffload/plan/common/range_max_tree.h"

namespace hyperoffload::internal {
namespace {

// Costs below this count as this (a free recompute still ranks by its size).
constexpr double kMinCostMs = 1e-9;

// Note [Lists for the few that get one]: the selection keeps, per storage,
// its decisions and its lock points, and per source op its decisions, which
// most storages and ops never get. A vector per storage cost the 1M-op
// chain's 2.1M storages 100 MB of empty vectors to make, zero and free (55 ms
// to make, about as much to free, 8% of the selection), and a hash map per
// source op a node and a probe per decision; here each index holds the
// position of its list, made when it gets its first entry.
template <typename T>
class ListsByIndex {
 public:
  explicit ListsByIndex(std::int32_t indices) : list_of_(static_cast<std::size_t>(indices), kNoList) {}

  std::span<const T> of(std::int32_t index) const {
    const std::uint32_t list = list_of_[static_cast<std::size_t>(index)];
    return list == kNoList ? std::span<const T>() : std::span<const T>(lists_[list]);
  }
  // The list of `index`, made empty when it has none. The reference lasts
  // until the next call.
  std::vector<T>& at(std::int32_t index) {
    std::uint32_t& list = list_of_[static_cast<std::size_t>(index)];
    if (list == kNoList) {
      list = static_cast<std::uint32_t>(lists_.size());
      lists_.emplace_back();
    }
    return lists_[list];
  }

 private:
  static constexpr std::uint32_t kNoList = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> list_of_;  // per index: position in lists_, or kNoList
  std::vector<std::vector<T>> lists_;
};

class Selector {
 public:
  Selector(const Trace& trace, std::span<const std::int64_t> resident_bytes, const RecomputeModel& model,
           std::int64_t stop_bytes, RegenerationRule regeneration, bool keep_dead_inputs)
      : trace_(trace),
        model_(model),
        stop_bytes_(stop_bytes),
        regeneration_(regeneration),
        profile_(resident_bytes),
        decisions_of_(trace.storage_count()),
        decisions_by_source_(trace.op_count()),
        locks_(trace.storage_count()),
        kept_until_(keep_dead_inputs ? static_cast<std::size_t>(trace.storage_count()) : 0, -1),
        marks_(trace.op_count()),
        work_left_(kChainWorkFactor *
                   (static_cast<std::int64_t>(trace.op_count()) + static_cast<std::int64_t>(trace.access_count()))) {}

  RecomputeSelection run(double max_ratio, std::span<const std::int32_t> excluded) {
    const std::vector<RecomputeCandidate>& candidates = model_.candidates;
    // The ways each candidate may be taken within the cost limit, and the
    // better of them (Note [Keeping a dead input]).
    ways_.assign(candidates.size(), 0);
    keeps_first_.assign(candidates.size(), false);
    for (std::size_t g = 0; g < candidates.size(); ++g) {
      const auto entry = static_cast<std::int32_t>(g);
      for (const bool keep : {false, true}) {
        if (keep && (kept_until_.empty() || !candidates[g].can_keep_inputs())) continue;
        if (cost_of(entry, keep) <= max_ratio * trace_.h2d_ms(size_of(entry, keep))) ways_[g] |= way_bit(keep);
      }
      keeps_first_[g] = ways_[g] == way_bit(true) ||
                        (ways_[g] == (way_bit(false) | way_bit(true)) &&
                         static_cast<double>(size_of(entry, true)) / cost_of(entry, true) >
                             static_cast<double>(size_of(entry, false)) / cost_of(entry, false));
    }
    for (const std::int32_t g : excluded) ways_[static_cast<std::size_t>(g)] = 0;
    std::vector<OpInterval> intervals;
    intervals.reserve(candidates.size());
    for (const RecomputeCandidate& c : candidates) intervals.push_back({c.interior_first(), c.interior_last()});
    CoveringIndex index(trace_.op_count(), intervals);
    std::vector<double> keys(candidates.size(), 0.0);
    for (std::size_t g = 0; g < candidates.size(); ++g) {
      const auto entry = static_cast<std::int32_t>(g);
      if (ways_[g] != 0) keys[g] = static_cast<double>(best_size(entry)) / best_cost(entry);
    }
    index.activate_all(IndexGroup::kSmall, keys, ways_);
    while (profile_.max() > stop_bytes_) {
      const auto peak_op = static_cast<OpIndex>(profile_.argmax());
      const std::int64_t excess = profile_.max() - stop_bytes_;
      const CoveringIndex::Best best = index.query_cached(peak_op);
      // Candidates at least as large as the excess all remove it: they rank by
      // 1 / cost in the large group (the excess only shrinks, so they stay).
      if (best.small != CoveringIndex::kNoEntry && best_size(best.small) >= excess) {
        index.set(best.small, IndexGroup::kLarge, 1.0 / best_cost(best.small));
        continue;
      }
      std::int32_t pick = best.small;
      if (best.large != CoveringIndex::kNoEntry) {
        const double large_value = static_cast<double>(excess) / best_cost(best.large);
        const double small_value = pick == CoveringIndex::kNoEntry ? -1.0 : index.key(pick);
        if (large_value > small_value || (large_value == small_value && best.large < pick)) pick = best.large;
      }
      if (pick == CoveringIndex::kNoEntry) break;  // nothing covers the peak
      index.set(pick, IndexGroup::kNone, 0.0);
      // The better way first, then the other when the limit admits it.
      const bool keep = keeps_first_[static_cast<std::size_t>(pick)];
      if (!try_take(pick, peak_op, keep) && (ways_[static_cast<std::size_t>(pick)] & way_bit(!keep)) != 0) {
        try_take(pick, peak_op, !keep);
      }
    }
    return std::move(result_);
  }

 private:
  // What taking a candidate implies: where it is regenerated, which earlier
  // decisions move, which storages get locked.
  struct Effect {
    OpIndex regenerate_before = 0;
    std::vector<std::pair<std::size_t, OpIndex>> moves;  // (decision, new point)
    std::vector<std::pair<StorageIndex, OpIndex>> locks;
    std::vector<StorageIndex> kept;  // dead inputs kept until the point (Note [Keeping a dead input])
    std::size_t reruns = 0;  // producers re-run at the point (marked in marks_)

    // Empty, its lists keeping their memory: one Effect serves every
    // candidate tried (a quarter of a million on the 1M-op chain).
    void reset(OpIndex point) {
      regenerate_before = point;
      moves.clear();
      locks.clear();
      kept.clear();
      reruns = 0;
    }
  };

  static std::uint8_t way_bit(bool keep) { return keep ? 2 : 1; }

  const RecomputeCandidate& candidate(std::int32_t g) const { return model_.candidates[static_cast<std::size_t>(g)]; }
  // A way's cost and bytes: the chain's, or with the dead inputs kept.
  double cost_of(std::int32_t g, bool keep) const {
    return std::max(keep ? candidate(g).keep_cost_ms : candidate(g).cost_ms, kMinCostMs);
  }
  std::int64_t size_of(std::int32_t g, bool keep) const {
    return candidate(g).size_bytes - (keep ? candidate(g).keep_bytes : 0);
  }
  double best_cost(std::int32_t g) const { return cost_of(g, keeps_first_[static_cast<std::size_t>(g)]); }
  std::int64_t best_size(std::int32_t g) const { return size_of(g, keeps_first_[static_cast<std::size_t>(g)]); }
  // The first op a kept input u adds its bytes at: after its last access and
  // after what earlier decisions keep it for.
  OpIndex keep_from(StorageIndex u) const {
    return std::max(model_.last_op[static_cast<std::size_t>(u)] + 1, kept_until_[static_cast<std::size_t>(u)]);
  }

  // The decision whose storage u is off the device before `op`: taken with a
  // gap start < op < its regeneration point. -1 when none.
  std::int32_t dropped_at(StorageIndex u, OpIndex op) const {
    for (const std::size_t d : decisions_of_.of(u)) {
      const RecomputeDecision& decision = result_.decisions[d];
      if (candidate(decision.candidate).start_op < op && op < decision.regenerate_before) {
        return static_cast<std::int32_t>(d);
      }
    }
    return -1;
  }

  // The re-run of `producer` before `op` and everything it needs there: dead
  // inputs regenerated (a chain), dropped inputs moved here, the rest locked.
  // Once the chain work budget is spent (Note [Chain work]) only the
  // candidate's own producer is looked at: a chain that needs more fails.
  bool plan_rerun(OpIndex producer, OpIndex op, Effect& effect, bool keep_dead = false) {
    if (!marks_.visit_unit(trace_, producer)) return true;
    if (model_.valid_until[static_cast<std::size_t>(producer)] < op ||
        effect.reruns >= static_cast<std::size_t>(kMaxChainOps)) {
      return false;
    }
    if (effect.reruns > 0 && work_left_ < 0) {
      result_.cut = true;
      return false;
    }
    ++effect.reruns;
    const std::span<const Access> list = rerun_accesses(trace_, model_, producer);
    work_left_ -= 1 + static_cast<std::int64_t>(list.size());
    for (const Access& access : list) {
      if (access.kind != AccessKind::kRead) continue;
      const StorageIndex u = access.storage;
      if (dead_before(trace_, model_, u, op)) {
        // An earlier decision keeps it on the device until its own re-run at
        // or after this one: read where it is (its bytes are in the profile
        // already), as the augmented trace does.
        if (!kept_until_.empty() && kept_until_[static_cast<std::size_t>(u)] >= op) continue;
        if (keep_dead) {
          if (std::find(effect.kept.begin(), effect.kept.end(), u) == effect.kept.end()) effect.kept.push_back(u);
          continue;
        }
        const OpIndex inner = model_.regenerator[static_cast<std::size_t>(u)];
        if (inner < 0 || !plan_rerun(inner, op, effect)) return false;
        continue;
      }
      const std::int32_t dropped = dropped_at(u, op);
      if (dropped < 0) {
        effect.locks.push_back({u, op});
        continue;
      }
      const auto d = static_cast<std::size_t>(dropped);
      const bool moved = std::any_of(effect.moves.begin(), effect.moves.end(),
                                     [&](const auto& move) { return move.first == d; });
      if (moved) continue;
      if (!may_move(d, op, effect)) return false;
      effect.moves.push_back({d, op});
      move_siblings(d, op, effect);
      if (!plan_rerun(candidate(result_.decisions[d].candidate).source_op, op, effect)) return false;
    }
    return true;
  }

  // Whether decision d's regeneration may move to `op`: when it is at most an
  // eighth of its gap early (may_regenerate_early), or when the ops it then
  // holds the storage over stay below the current peak even with every move
  // of the effect added there — a move never raises the peak, however far.
  bool may_move(std::size_t d, OpIndex op, const Effect& effect) const {
    const RecomputeCandidate& moved = candidate(result_.decisions[d].candidate);
    if (may_regenerate_early(moved, op)) return true;
    if (regeneration_ == RegenerationRule::kWithinAnEighth) return false;
    std::int64_t added = moved.size_bytes;
    for (const auto& [other, point] : effect.moves) added += candidate(result_.decisions[other].candidate).size_bytes;
    const OpIndex until = result_.decisions[d].regenerate_before - 1;
    return op <= until && profile_.max(static_cast<std::size_t>(op), static_cast<std::size_t>(until)) + added <
                              profile_.max();
  }

  // Bytes the effect removes at `op` (negative when it adds).
  std::int64_t gain_at(const RecomputeCandidate& c, const Effect& effect, OpIndex op) const {
    std::int64_t gain = c.start_op < op && op < effect.regenerate_before ? c.size_bytes : 0;
    for (const auto& [d, point] : effect.moves) {
      const RecomputeDecision& decision = result_.decisions[d];
      if (point <= op && op < decision.regenerate_before) gain -= candidate(decision.candidate).size_bytes;
    }
    for (const StorageIndex u : effect.kept) {
      if (keep_from(u) <= op && op < effect.regenerate_before) gain -= trace_.storage(u).size_bytes;
    }
    return gain;
  }

  // Note [One re-run for sibling outputs]
  // An op with several outputs (layer norm's output, mean and rstd; a
  // dropout's output and mask) whose outputs are dropped by two decisions
  // would re-run once before each regeneration point, though one re-run
  // regenerates them all: a GPT-2 planned at checkpointing's memory re-ran
  // six layer norms twice each, 7 ops apart. So a candidate whose source an
  // earlier decision already re-runs inside the candidate's gap is
  // regenerated at that re-run (earlier than its own point: it frees fewer
  // ops, so only where may_regenerate_early allows, under either rule, and
  // while it still lowers the peak op), and an earlier decision whose re-run
  // of the source comes later than the candidate's point moves to it where
  // the point is inside that decision's gap and a move is allowed
  // (may_move). Either way the augmented trace runs the source once there
  // (augmented_trace.h). When a later re-run moves one of them earlier (a
  // dropped input it reads), the others move with it where they may
  // (move_siblings). Sharing is tried with the nearest such re-run
  // among the source's last kMaxSiblings decisions only, so a storage read
  // after thousands of gaps (each a candidate of the same source) costs
  // O(1) per candidate tried, not O(its decisions).
  static constexpr std::size_t kMaxSiblings = 16;
  std::span<const std::size_t> recent_decisions_of(OpIndex source) const {
    const std::span<const std::size_t> list = decisions_by_source_.of(source);
    return list.last(std::min(list.size(), kMaxSiblings));
  }

  void share_rerun(const RecomputeCandidate& c, OpIndex peak_op, Effect& effect) {
    const OpIndex own = effect.regenerate_before;
    std::size_t nearest = 0;
    OpIndex nearest_distance = std::numeric_limits<OpIndex>::max();
    for (const std::size_t d : recent_decisions_of(c.source_op)) {
      const OpIndex point = result_.decisions[d].regenerate_before;
      if (point == own) return;  // already shared
      if (point <= c.start_op + 1) continue;
      const OpIndex distance = point < own ? own - point : point - own;
      if (distance < nearest_distance) {
        nearest_distance = distance;
        nearest = d;
      }
    }
    if (nearest_distance == std::numeric_limits<OpIndex>::max()) return;
    const OpIndex point = result_.decisions[nearest].regenerate_before;
    if (point < own) {
      Effect earlier = effect;
      earlier.regenerate_before = point;
      if (may_regenerate_early(c, point) && gain_at(c, earlier, peak_op) > 0) effect.regenerate_before = point;
    } else if (candidate(result_.decisions[nearest].candidate).start_op + 1 < own && may_move(nearest, own, effect)) {
      effect.moves.push_back({nearest, own});
    }
  }

  // Decision d's re-run moves to `op`: the decisions that share it (the same
  // source re-run at the same point, Note [One re-run for sibling outputs])
  // move with it where `op` is inside their gaps and a move is allowed, so
  // the source still runs once. Those that may not stay where they were.
  void move_siblings(std::size_t d, OpIndex op, Effect& effect) const {
    const RecomputeDecision& moved = result_.decisions[d];
    for (const std::size_t s : recent_decisions_of(candidate(moved.candidate).source_op)) {
      if (s == d || result_.decisions[s].regenerate_before != moved.regenerate_before) continue;
      if (candidate(result_.decisions[s].candidate).start_op + 1 >= op) continue;
      if (std::any_of(effect.moves.begin(), effect.moves.end(), [&](const auto& move) { return move.first == s; })) {
        continue;
      }
      if (may_move(s, op, effect)) effect.moves.push_back({s, op});
    }
  }

  // Takes candidate g, its dead inputs kept or not, when the decisions agree
  // (see the header) and it lowers op peak_op; whether it did.
  bool try_take(std::int32_t g, OpIndex peak_op, bool keep) {
    const RecomputeCandidate& c = candidate(g);
    Effect& effect = effect_;
    effect.reset(c.end_op);
    const std::span<const OpIndex> locks = locks_.of(c.storage);
    const auto lock = std::upper_bound(locks.begin(), locks.end(), c.start_op);
    // Regenerated before the first lock instead, however early: it frees
    // fewer ops, and the gain check below passes it over when that no longer
    // includes the peak op.
    if (lock != locks.end() && *lock < c.end_op) {
      if (regeneration_ == RegenerationRule::kWithinAnEighth && !may_regenerate_early(c, *lock)) return false;
      effect.regenerate_before = *lock;
    }
    if (effect.regenerate_before - c.start_op < 2) return false;  // frees no op
    share_rerun(c, peak_op, effect);
    marks_.clear();
    if (!plan_rerun(c.source_op, effect.regenerate_before, effect, keep)) return false;
    if (gain_at(c, effect, peak_op) <= 0) return false;

    const std::size_t step = result_.decisions.size();
    profile_.add(static_cast<std::size_t>(c.interior_first()), static_cast<std::size_t>(effect.regenerate_before) - 1,
                 -c.size_bytes);
    for (const auto& [d, point] : effect.moves) {
      RecomputeDecision& decision = result_.decisions[d];
      profile_.add(static_cast<std::size_t>(point), static_cast<std::size_t>(decision.regenerate_before) - 1,
                   candidate(decision.candidate).size_bytes);
      result_.moves.push_back({step, d, decision.regenerate_before});
      decision.regenerate_before = point;
    }
    for (const auto& [u, point] : effect.locks) {
      std::vector<OpIndex>& list = locks_.at(u);
      const auto at = std::lower_bound(list.begin(), list.end(), point);
      if (at == list.end() || *at != point) list.insert(at, point);
    }
    for (const StorageIndex u : effect.kept) {
      const OpIndex from = keep_from(u);
      const OpIndex to = effect.regenerate_before - 1;
      if (from > to) continue;
      profile_.add(static_cast<std::size_t>(from), static_cast<std::size_t>(to), trace_.storage(u).size_bytes);
      kept_until_[static_cast<std::size_t>(u)] = effect.regenerate_before;
    }
    decisions_of_.at(c.storage).push_back(step);
    decisions_by_source_.at(c.source_op).push_back(step);
    result_.decisions.push_back({g, effect.regenerate_before, keep});
    result_.peak_after.push_back(profile_.max());
    return true;
  }

  const Trace& trace_;
  const RecomputeModel& model_;
  std::int64_t stop_bytes_;
  RegenerationRule regeneration_;
  RangeMaxTree profile_;
  ListsByIndex<std::size_t> decisions_of_;          // per storage: its decisions
  ListsByIndex<std::size_t> decisions_by_source_;  // per source op: its decisions
  ListsByIndex<OpIndex> locks_;                    // per storage: sorted lock points
  // Per storage: the point of the latest re-run an earlier decision keeps it
  // for (it is held over the ops before it; -1: none), as in the augmented
  // trace's Builder; empty unless dead inputs may be kept.
  std::vector<OpIndex> kept_until_;
  std::vector<std::uint8_t> ways_;  // per candidate: way_bit of each way within the cost limit
  std::vector<bool> keeps_first_;   // per candidate: whether keeping is its better way
  ChainMarks marks_;                                    // the producers of the re-run being planned
  Effect effect_;                                       // try_take's, of the candidate it tries
  std::int64_t work_left_;                              // of the chain work budget (Note [Chain work])
  RecomputeSelection result_;
};

}  // namespace

std::vector<RecomputeDecision> RecomputeSelection::prefix(std::size_t length) const {
  std::vector<RecomputeDecision> out(decisions.begin(), decisions.begin() + static_cast<std::ptrdiff_t>(length));
  // Undo, latest first, the moves made after the length-th decision.
  for (auto it = moves.rbegin(); it != moves.rend() && it->step >= length; ++it) {
    if (it->decision < length) out[it->decision].regenerate_before = it->previous;
  }
  return out;
}

RecomputeSelection select_recomputes(const Trace& trace, std::span<const std::int64_t> resident_bytes,
                                     const RecomputeModel& model, const RecomputeSelectionParams& params,
                                     std::span<const std::int32_t> excluded) {
  if (trace.op_count() == 0) return {};
  return Selector(trace, resident_bytes, model, params.stop_bytes, params.regeneration, params.keep_dead_inputs)
      .run(params.max_ratio, excluded);
}

std::vector<std::int32_t> reserve_for_offload(const Trace& trace, const RecomputeModel& model, OpIndex peak_op,
                                              double deadline_ms) {
  // The candidates covering the peak op, the most expensive to recompute per
  // byte first (ties: in candidate order), sorted on their keys computed once
  // (a comparison that read two candidates was a cache miss each on a large
  // trace).
  std::vector<std::pair<double, std::int32_t>> by_cost;
  for (std::size_t g = 0; g < model.candidates.size(); ++g) {
    const RecomputeCandidate& c = model.candidates[g];
    if (c.interior_first() <= peak_op && peak_op <= c.interior_last() && c.size_bytes > 0) {
      by_cost.emplace_back(c.cost_ms / static_cast<double>(c.size_bytes), static_cast<std::int32_t>(g));
    }
  }
  std::sort(by_cost.begin(), by_cost.end(),
            [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });

  // finish[x] = start[x] + the copy time of the taken copies ready at or after
  // position x (ready at position copy_op + 1: when that op starts without
  // stalls). The FIFO engine finishes the copies in ready order at the maximum
  // of finish over the positions up to the last one holding a copy: a position
  // without one is dominated by the next that has one (its start is no later
  // and the same copies are ready at or after it), so only the positions of
  // the candidates' copies are kept, in order.
  //
  // Taking a copy ready at position r adds its time to finish over [0, r],
  // and the positions after r keep what they had, within the deadline since
  // the last copy taken; so it is taken exactly when the maximum of finish
  // over [0, r] plus its time is within the deadline, and the tree is only
  // updated for copies taken. Every copy taken adds to the first position, so
  // a copy longer than the deadline leaves after it is refused without the
  // tree: once the engine is full, that is most of them.
  //
  // Times are integer ticks, so that sums are exact. A tick is 1 ns unless
  // the step's compute and every candidate's copy together take more than
  // 2^62 ns (146 years): the trace limits allow 1e15 ms of compute and as
  // much again of copies (docs/FORMATS.md, "Limits"), which in ns overflow
  // int64 (found by fuzz/planners_fuzzer.cc). Then a tick is that total /
  // 2^62, and no finish, a start plus copies, exceeds 2^62 ticks.
  const auto ops = static_cast<std::size_t>(trace.op_count());
  double longest_ms = trace.total_compute_ms();
  for (const auto& [per_byte, g] : by_cost) longest_ms += trace.d2h_ms(model.candidates[static_cast<std::size_t>(g)].size_bytes);
  constexpr double kMaxTicks = 0x1p62;
  const double ticks_per_ms = longest_ms * 1e6 <= kMaxTicks ? 1e6 : kMaxTicks / longest_ms;
  auto ticks = [&](double ms) { return static_cast<std::int64_t>(ms * ticks_per_ms); };
  const auto ready_of = [&](std::int32_t g) {
    return static_cast<std::size_t>(model.candidates[static_cast<std::size_t>(g)].copy_op) + 1;
  };
  // position_of[op]: the index among the distinct ready positions, ascending.
  std::vector<std::int32_t> position_of(ops + 1, -1);
  for (const auto& [per_byte, g] : by_cost) position_of[ready_of(g)] = 0;
  std::vector<std::int64_t> finish_ticks;
  double start_ms = 0.0;
  for (std::size_t x = 0; x <= ops; ++x) {
    if (position_of[x] == 0) {
      position_of[x] = static_cast<std::int32_t>(finish_ticks.size());
      finish_ticks.push_back(ticks(start_ms));
    }
    if (x < ops) start_ms += trace.op_duration_ms(static_cast<OpIndex>(x));
  }
  if (finish_ticks.empty()) return {};
  std::int64_t first_finish = finish_ticks.front();
  RangeMaxTree finish(finish_ticks);
  // A deadline beyond every finish takes every candidate.
  const std::int64_t deadline_ticks =
      deadline_ms * ticks_per_ms < kMaxTicks ? ticks(deadline_ms) : std::numeric_limits<std::int64_t>::max();
  std::vector<std::int32_t> reserved;
  for (const auto& [per_byte, g] : by_cost) {
    const std::int64_t copy_ticks = ticks(trace.d2h_ms(model.candidates[static_cast<std::size_t>(g)].size_bytes));
    if (first_finish > deadline_ticks - copy_ticks) continue;
    const auto ready = static_cast<std::size_t>(position_of[ready_of(g)]);
    if (finish.max(0, ready) > deadline_ticks - copy_ticks) continue;
    finish.add(0, ready, copy_ticks);
    first_finish += copy_ticks;
    reserved.push_back(g);
  }
  return reserved;
}

}  // namespace hyperoffload::internal
