#include "hyperoffload/plan/dtr_planner.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/recompute_unit.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/recompute/recompute_model.h"

namespace hyperoffload {
namespace {

std::int64_t work_of(const Trace& trace) {
  return static_cast<std::int64_t>(trace.op_count()) + static_cast<std::int64_t>(trace.access_count());
}

// Staleness below this counts as this, so that a storage touched just now
// still ranks by cost and size (DTR adds the same kind of epsilon).
constexpr double kMinStalenessMs = 1e-9;

// The walk of DtrPlanner::plan (see the header).
class DtrWalk {
 public:
  DtrWalk(const Trace& trace, std::int64_t budget_bytes, const DtrOptions& options)
      : trace_(trace),
        accesses_(trace),
        budget_bytes_(budget_bytes),
        max_rerun_work_(options.max_rerun_work.value_or(kDtrRerunWorkFactor * work_of(trace))),
        max_scan_work_(options.max_scan_work.value_or(kDtrScanWorkFactor * work_of(trace))),
        heuristic_(options.heuristic),
        producer_(recompute_producers(trace, accesses_)),
        valid_until_(internal::valid_until_per_op(trace)),
        last_write_(last_writes(trace)),
        regen_(regenerators()),
        storages_(static_cast<std::size_t>(trace.storage_count())),
        start_ms_(looks_ahead() ? op_start_ms(trace) : std::vector<double>{}),
        resident_(storages_, false),
        pins_(storages_, 0),
        pool_position_(storages_, -1),
        last_use_ms_(storages_, 0.0) {
    regenerable_through_ = regenerable_through();
    if (classes()) {
      evicted_.assign(storages_, false);
      class_parent_.resize(storages_);
      for (std::size_t i = 0; i < storages_; ++i) class_parent_[i] = static_cast<StorageIndex>(i);
      class_ms_.assign(storages_, 0.0);
    }
  }

  DtrPlan run() && {
    DtrPlan plan;
    PlanResult& result = plan.result;
    result.schedule.planner = "dtr";
    result.initial_peak_bytes = unplanned_peak(trace_, accesses_).bytes;
    for (OpIndex t = 0; t < trace_.op_count(); ++t) step(t);
    result.schedule.actions = std::move(actions_);
    result.planned_peak_bytes = peak_bytes_;
    if (peak_bytes_ > budget_bytes_) {
      result.notes.push_back(fmt::format(
          "dtr: the budget ({} bytes) is not met: {} bytes at the peak, where nothing left on the device could be "
          "evicted (it is locked by the op or its re-runs, or cannot be regenerated)",
          budget_bytes_, peak_bytes_));
    }
    result.notes.push_back(fmt::format("dtr: {} evictions, {} recomputes ({:.3f} ms)", evictions_, recomputes_,
                                       recompute_ms_));
    if (cut_op_ >= 0) {
      result.notes.push_back(fmt::format(
          "dtr: the walk was cut before op {} ({}), where its {} (Note [The walk's work bound]): from there on it "
          "evicted nothing",
          cut_op_, trace_.op_name(cut_op_),
          rerun_work_ > max_rerun_work_
              ? fmt::format("re-runs had done {} of work, over the bound of {}", rerun_work_, max_rerun_work_)
              : fmt::format("evictions had done {} of work (storages weighed and their producers' accesses), "
                            "over the bound of {}",
                            scan_work_, max_scan_work_)));
    }
    plan.cut_op = cut_op_;
    plan.peak_op = peak_op_;
    plan.recompute_count = recomputes_;
    plan.recompute_ms = recompute_ms_;
    return plan;
  }

 private:
  std::size_t at(StorageIndex s) const { return static_cast<std::size_t>(s); }

  // Whether the cost is the evicted neighbourhood's (dtr_planner.h).
  bool classes() const { return heuristic_ != DtrHeuristic::kLocal; }
  // Whether the walk ranks by the next use (dtr_planner.h).
  bool looks_ahead() const {
    return heuristic_ == DtrHeuristic::kNextUse || heuristic_ == DtrHeuristic::kFarthestNextUse;
  }

  // The next-use heuristics' clock: the compute ms from the start of op t to
  // the next op at or after t that accesses s. Every storage in the pool has
  // one: it is released after its last access.
  double until_next_use_ms(StorageIndex s, OpIndex t) const {
    const std::span<const StorageAccess> uses = accesses_.of(s);
    const auto next = std::lower_bound(uses.begin(), uses.end(), t,
                                       [](const StorageAccess& use, OpIndex op) { return use.op < op; });
    const OpIndex op = next == uses.end() ? trace_.op_count() : next->op;
    return start_ms_[static_cast<std::size_t>(op)] - start_ms_[static_cast<std::size_t>(t)];
  }

  static std::vector<OpIndex> last_writes(const Trace& trace) {
    std::vector<OpIndex> last(static_cast<std::size_t>(trace.storage_count()), -1);
    for (OpIndex op = 0; op < trace.op_count(); ++op) {
      for (const Access& access : trace.accesses(op)) {
        if (access.kind == AccessKind::kWrite) last[static_cast<std::size_t>(access.storage)] = op;
      }
    }
    return last;
  }

  // Per storage, the op whose re-run regenerates its final version (the only
  // one the walk evicts: evictable), and the units' accesses
  // (internal::find_regenerators, the recompute model's rule).
  std::vector<OpIndex> regenerators() {
    internal::Regenerators found = internal::find_regenerators(trace_, accesses_, producer_);
    unit_lists_ = std::move(found.unit_accesses);
    return std::move(found.regenerator);
  }

  // What a re-run of op p reads and writes: its unit's accesses for a
  // follower, its own otherwise.
  std::span<const Access> rerun_list(OpIndex p) const {
    const auto it = unit_lists_.find(p);
    return it == unit_lists_.end() ? trace_.accesses(p) : std::span<const Access>(it->second);
  }
  std::int64_t size_of(StorageIndex s) const { return trace_.storage(s).size_bytes; }
  StorageId id_of(StorageIndex s) const { return trace_.storage(s).id; }

  // Per op p: the last op before which a re-run of p (its unit) is sure to
  // find its inputs (on the device, or regenerable there): min of
  // valid_until[p] and, per input u, how long u is: retained or empty, always;
  // without producer, until its last access (never evicted); with a producer,
  // until its last access or as long as its own producer is regenerable,
  // whichever is later (it is evicted only when that covers its last access).
  // Inputs are created before p, so one pass in op order sees them first.
  std::vector<OpIndex> regenerable_through() const {
    std::vector<OpIndex> through(static_cast<std::size_t>(trace_.op_count()), -1);
    for (OpIndex p = 0; p < trace_.op_count(); ++p) {
      if (!trace_.op_recomputable(p)) continue;
      OpIndex until = valid_until_[static_cast<std::size_t>(p)];
      for (const Access& access : rerun_list(p)) {
        if (access.kind != AccessKind::kRead) continue;
        const StorageIndex u = access.storage;
        const StorageInfo& info = trace_.storage(u);
        if (info.retained() || info.size_bytes <= 0) continue;
        // An input whose final version comes after p is not evicted before
        // p's re-runs stop being valid (evictable): through[q] is then -1.
        const OpIndex q = regen_[at(u)];
        const OpIndex last = accesses_.last_op(u);
        until = std::min(until, q < 0 ? last : std::max(through[static_cast<std::size_t>(q)], last));
      }
      through[static_cast<std::size_t>(p)] = until;
    }
    return through;
  }

  // Whether s may be evicted before op t: regenerable at every later access
  // and at every chain that may need it before t.
  // A storage a unit regenerates only at its final version, once the
  // unit's last follower has run.
  bool evictable(StorageIndex s, OpIndex t) const {
    const OpIndex p = regen_[at(s)];
    return p >= 0 && pins_[at(s)] == 0 && (p == producer_[at(s)] || last_write_[at(s)] < t) &&
           regenerable_through_[static_cast<std::size_t>(p)] >= std::max(accesses_.last_op(s), t);
  }

  void make_resident(StorageIndex s) {
    if (classes() && evicted_[at(s)]) {
      // Back on the device: its class no longer pays for it (classes are not
      // split, as in DTR's union-find approximation).
      evicted_[at(s)] = false;
      class_ms_[static_cast<std::size_t>(find(s))] -= unit_duration_ms(trace_, regen_[at(s)]);
    }
    resident_[at(s)] = true;
    resident_bytes_ += size_of(s);
    last_use_ms_[at(s)] = now_ms_;
    const StorageInfo& info = trace_.storage(s);
    const OpIndex p = regen_[at(s)];
    // Only a storage regenerable through its last access is ever evictable.
    if (p >= 0 && !info.retained() && info.size_bytes > 0 &&
        regenerable_through_[static_cast<std::size_t>(p)] >= accesses_.last_op(s)) {
      pool_position_[at(s)] = static_cast<std::int64_t>(pool_.size());
      pool_.push_back(s);
    }
  }

  void leave_pool(StorageIndex s) {
    const std::int64_t position = pool_position_[at(s)];
    if (position < 0) return;
    pool_[static_cast<std::size_t>(position)] = pool_.back();
    pool_position_[at(pool_.back())] = position;
    pool_.pop_back();
    pool_position_[at(s)] = -1;
  }

  void release(StorageIndex s, OpIndex op, Phase phase) {
    resident_[at(s)] = false;
    resident_bytes_ -= size_of(s);
    actions_.push_back(Action{op, phase, ActionKind::kReleaseDevice, id_of(s)});
    leave_pool(s);
  }

  // DtrHeuristic::kLocal's cost: the producer's run plus the runs that would
  // regenerate its inputs missing now (the first level of the evicted
  // neighbourhood).
  double cost_ms(StorageIndex s) const {
    const OpIndex p = regen_[at(s)];
    double cost = unit_duration_ms(trace_, p);
    for (const Access& access : rerun_list(p)) {
      if (access.kind != AccessKind::kRead || resident_[at(access.storage)]) continue;
      const OpIndex q = regen_[at(access.storage)];
      if (q >= 0) cost += unit_duration_ms(trace_, q);
    }
    return cost;
  }

  // Evicts, lowest h first, until `extra_bytes` more fit the budget or
  // nothing can be evicted.
  void make_room(std::int64_t extra_bytes, OpIndex t) {
    while (resident_bytes_ + extra_bytes > budget_bytes_) {
      if (scan_work_ > max_scan_work_ && cut_op_ < 0) cut_op_ = t;
      if (cut_op_ >= 0) return;
      StorageIndex best = -1;
      // Lowest first: (h, 0), or for kFarthestNextUse (-time to the next
      // use, cost per byte); then the lowest index.
      std::pair<double, double> best_rank;
      for (std::size_t i = 0; i < pool_.size();) {
        const StorageIndex s = pool_[i];
        ++scan_work_;  // Note [The walk's work bound]: 1 per look, plus the producer's accesses when priced
        if (regenerable_through_[static_cast<std::size_t>(regen_[at(s)])] < t) {
          leave_pool(s);  // no longer regenerable for chains before t, nor later: never evictable again
          continue;
        }
        ++i;
        if (!evictable(s, t)) continue;
        const auto size = static_cast<double>(size_of(s));
        // The look-ahead walks price only a storage that may still be the
        // one (pricing walks its neighbourhood, most of a walk's work): one
        // used again sooner than the best so far cannot be under Belady's
        // rule, nor one whose own run alone, a lower bound of its cost,
        // already ranks it above the best. The victim is the same.
        const double until_next_ms = looks_ahead() ? until_next_use_ms(s, t) : 0.0;
        if (best >= 0 && heuristic_ == DtrHeuristic::kFarthestNextUse && -until_next_ms > best_rank.first) continue;
        if (best >= 0 && heuristic_ == DtrHeuristic::kNextUse &&
            unit_duration_ms(trace_, regen_[at(s)]) / (size * std::max(until_next_ms, kMinStalenessMs)) >
                best_rank.first) {
          continue;
        }
        scan_work_ += static_cast<std::int64_t>(rerun_list(regen_[at(s)]).size());
        const double cost = classes() ? class_cost_ms(s) : cost_ms(s);
        std::pair<double, double> rank;
        switch (heuristic_) {
          case DtrHeuristic::kEquivalenceClasses:
          case DtrHeuristic::kLocal:
            rank = {cost / (size * std::max(now_ms_ - last_use_ms_[at(s)], kMinStalenessMs)), 0.0};
            break;
          case DtrHeuristic::kNextUse:
            rank = {cost / (size * std::max(until_next_ms, kMinStalenessMs)), 0.0};
            break;
          case DtrHeuristic::kFarthestNextUse:
            rank = {-until_next_ms, cost / size};
            break;
        }
        if (best < 0 || rank < best_rank || (rank == best_rank && s < best)) {
          best = s;
          best_rank = rank;
        }
      }
      if (best < 0) return;
      release(best, t, Phase::kPre);
      if (classes()) join_class(best);
      ++evictions_;
    }
  }

  // The class costs of every heuristic but kLocal (dtr_planner.h): the
  // union-find of the evicted storages' classes; a class root's class_ms_ is
  // the producers' runs of its evicted members.
  StorageIndex find(StorageIndex s) {
    std::size_t i = at(s);
    while (class_parent_[i] != static_cast<StorageIndex>(i)) {
      class_parent_[i] = class_parent_[static_cast<std::size_t>(class_parent_[i])];  // path halving
      i = static_cast<std::size_t>(class_parent_[i]);
    }
    return static_cast<StorageIndex>(i);
  }

  // Calls `visit` with each evicted neighbour of s: the inputs of its producer
  // and the outputs of the ops that read it.
  template <class Visit>
  void evicted_neighbours(StorageIndex s, Visit visit) {
    for (const Access& access : rerun_list(regen_[at(s)])) {
      if (access.kind == AccessKind::kRead && evicted_[at(access.storage)]) visit(access.storage);
    }
    for (const StorageAccess& use : accesses_.of(s)) {
      if (use.kind != AccessKind::kRead) continue;
      for (const Access& access : trace_.accesses(use.op)) {
        ++scan_work_;
        if (access.kind == AccessKind::kWrite && regen_[at(access.storage)] == use.op &&
            evicted_[at(access.storage)]) {
          visit(access.storage);
        }
      }
    }
  }

  double class_cost_ms(StorageIndex s) {
    double cost = unit_duration_ms(trace_, regen_[at(s)]);
    roots_.clear();
    evicted_neighbours(s, [&](StorageIndex n) {
      const StorageIndex root = find(n);
      if (std::find(roots_.begin(), roots_.end(), root) != roots_.end()) return;
      roots_.push_back(root);
      cost += class_ms_[static_cast<std::size_t>(root)];
    });
    return cost;
  }

  void join_class(StorageIndex s) {
    // Evicted again after a regeneration, s rejoins the class it never left.
    evicted_[at(s)] = true;
    class_ms_[static_cast<std::size_t>(find(s))] += unit_duration_ms(trace_, regen_[at(s)]);
    evicted_neighbours(s, [&](StorageIndex n) {
      StorageIndex a = find(s);
      StorageIndex b = find(n);
      if (a == b) return;
      if (b < a) std::swap(a, b);  // the lower index roots the union: deterministic
      class_parent_[static_cast<std::size_t>(b)] = a;
      class_ms_[static_cast<std::size_t>(a)] += class_ms_[static_cast<std::size_t>(b)];
    });
  }

  void pin(StorageIndex s) { ++pins_[at(s)]; }
  void unpin(StorageIndex s) { --pins_[at(s)]; }

  // Re-runs the producer of s before op t, after its missing inputs,
  // recursively (an explicit stack: chains can be as deep as the trace).
  // Precondition: s is not on the device and regenerable before t.
  void rematerialize(StorageIndex s, OpIndex t) {
    struct Frame {
      OpIndex op;
      std::size_t next = 0;                // the next access of op to look at
      std::vector<StorageIndex> pinned;    // inputs gathered so far
    };
    std::vector<Frame> stack;
    stack.push_back(Frame{regen_[at(s)]});
    while (!stack.empty()) {
      Frame& frame = stack.back();
      const std::span<const Access> list = rerun_list(frame.op);
      bool descended = false;
      for (; frame.next < list.size(); ++frame.next) {
        const Access& access = list[frame.next];
        if (access.kind != AccessKind::kRead) continue;
        const StorageIndex u = access.storage;
        if (!resident_[at(u)]) {
          stack.push_back(Frame{regen_[at(u)]});  // regenerable: see regenerable_through
          descended = true;
          break;
        }
        pin(u);
        frame.pinned.push_back(u);
      }
      if (descended) continue;
      rerun(frame, t);
      stack.pop_back();
    }
  }

  template <typename Frame>
  void rerun(Frame& frame, OpIndex t) {
    const OpIndex p = frame.op;
    const std::span<const Access> list = rerun_list(p);
    rerun_work_ += 1 + static_cast<std::int64_t>(list.size());
    if (rerun_work_ > max_rerun_work_ && cut_op_ < 0) cut_op_ = t;
    // Outputs on the device stay (same version); the others are allocated.
    std::vector<StorageIndex> fresh;
    for (const Access& access : list) {
      if (access.kind != AccessKind::kWrite) continue;
      const StorageIndex o = access.storage;
      pin(o);
      frame.pinned.push_back(o);
      if (!resident_[at(o)] && std::find(fresh.begin(), fresh.end(), o) == fresh.end()) fresh.push_back(o);
    }
    std::int64_t fresh_bytes = 0;
    for (const StorageIndex o : fresh) fresh_bytes += size_of(o);
    make_room(fresh_bytes, t);
    actions_.push_back(Action{t, Phase::kPre, ActionKind::kRecompute, 0, p});
    ++recomputes_;
    recompute_ms_ += unit_duration_ms(trace_, p);
    for (const StorageIndex o : fresh) make_resident(o);
    note_peak(t);
    now_ms_ += unit_duration_ms(trace_, p);
    for (const StorageIndex u : frame.pinned) {
      last_use_ms_[at(u)] = now_ms_;
      unpin(u);
    }
    for (const StorageIndex o : fresh) {
      if (accesses_.last_op(o) < t) chain_only_.push_back(o);
    }
  }

  void note_peak(OpIndex t) {
    if (peak_op_ >= 0 && resident_bytes_ <= peak_bytes_) return;
    peak_bytes_ = resident_bytes_;
    peak_op_ = t;
  }

  void step(OpIndex t) {
    const std::span<const Access> list = trace_.accesses(t);
    for (const Access& access : list) pin(access.storage);
    for (const Access& access : list) {
      const StorageIndex s = access.storage;
      if (accesses_.first_op(s) < t && !resident_[at(s)]) rematerialize(s, t);
    }
    // Storages regenerated only for a chain are dead: dropped before the op
    // (after a cut they stay, so that no chain regenerates them again).
    for (const StorageIndex s : chain_only_) {
      if (resident_[at(s)] && cut_op_ < 0) release(s, t, Phase::kPre);
    }
    chain_only_.clear();
    std::vector<StorageIndex> fresh;
    for (const Access& access : list) {
      const StorageIndex s = access.storage;
      if (accesses_.first_op(s) == t && !resident_[at(s)] &&
          std::find(fresh.begin(), fresh.end(), s) == fresh.end()) {
        fresh.push_back(s);
      }
    }
    std::int64_t fresh_bytes = 0;
    for (const StorageIndex s : fresh) fresh_bytes += size_of(s);
    make_room(fresh_bytes, t);
    for (const StorageIndex s : fresh) make_resident(s);
    note_peak(t);
    now_ms_ += trace_.op_duration_ms(t);
    for (const Access& access : list) {
      last_use_ms_[at(access.storage)] = now_ms_;
      unpin(access.storage);
    }
    for (const Access& access : list) {
      const StorageIndex s = access.storage;
      const StorageInfo& info = trace_.storage(s);
      if (accesses_.last_op(s) == t && resident_[at(s)] && !info.retained() && info.size_bytes > 0) {
        release(s, t, Phase::kPost);
      }
    }
  }

  const Trace& trace_;
  const StorageAccesses accesses_;
  const std::int64_t budget_bytes_;
  const std::int64_t max_rerun_work_;
  const std::int64_t max_scan_work_;
  const DtrHeuristic heuristic_;
  // With classes():
  std::vector<bool> evicted_;               // off the device by an eviction
  std::vector<StorageIndex> class_parent_;  // the union-find
  std::vector<double> class_ms_;            // per class root, its members' runs
  std::vector<StorageIndex> roots_;         // scratch of class_cost_ms
  const std::vector<OpIndex> producer_;
  const std::vector<OpIndex> valid_until_;
  const std::vector<OpIndex> last_write_;  // per storage: its last write's op (-1: none)
  std::unordered_map<OpIndex, std::vector<Access>> unit_lists_;  // regenerating followers' unit accesses
  const std::vector<OpIndex> regen_;       // per storage: regenerators()
  std::vector<OpIndex> regenerable_through_;
  const std::size_t storages_;
  const std::vector<double> start_ms_;  // looks_ahead(): op_start_ms(trace)
  std::vector<bool> resident_;
  std::vector<std::int32_t> pins_;
  std::vector<std::int64_t> pool_position_;  // per storage: its index in pool_, or -1
  std::vector<StorageIndex> pool_;           // resident storages with a producer (eviction candidates)
  std::vector<double> last_use_ms_;
  std::vector<StorageIndex> chain_only_;     // regenerated before the current op, dead there
  std::vector<Action> actions_;
  std::int64_t resident_bytes_ = 0;
  std::int64_t peak_bytes_ = 0;
  OpIndex peak_op_ = -1;
  double now_ms_ = 0.0;  // compute time so far, re-runs included
  std::int64_t evictions_ = 0;
  std::int64_t recomputes_ = 0;
  std::int64_t rerun_work_ = 0;  // 1 + accesses per re-run (Note [The walk's work bound])
  OpIndex cut_op_ = -1;
  std::int64_t scan_work_ = 0;   // pool entries looked at plus their producers' accesses when priced
  double recompute_ms_ = 0.0;
};

}  // namespace

Result<PlanResult> DtrPlanner::plan(const Trace& trace, std::optional<std::int64_t> budget_bytes) const {
  if (trace.op_count() == 0 || !budget_bytes) {
    PlanResult result;
    result.schedule.planner = std::string(name());
    return result;
  }
  return plan_dtr(trace, *budget_bytes).result;
}

DtrPlan plan_dtr(const Trace& trace, std::int64_t budget_bytes, const DtrOptions& options) {
  if (trace.op_count() == 0) {
    DtrPlan plan;
    plan.result.schedule.planner = "dtr";
    return plan;
  }
  return DtrWalk(trace, budget_bytes, options).run();
}

}  // namespace hyperoffload
