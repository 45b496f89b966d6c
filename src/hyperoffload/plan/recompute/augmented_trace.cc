#include "hyperoffload/plan/recompute/augmented_trace.h"

#include <algorithm>
#include <map>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/recompute_unit.h"
#include "hyperoffload/plan/common/offload_floor_rule.h"

namespace hyperoffload::internal {
namespace {

// What one op re-run before the current op regenerates.
struct Rerun {
  std::vector<StorageIndex> persistent;  // outputs that live on as new instances
  std::vector<StorageIndex> transient;   // outputs read only by the re-runs here
};

bool contains(const std::vector<StorageIndex>& list, StorageIndex s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// Decisions grouped by an op (their gap's start, or their regeneration
// point), as offsets into one flat list of an item per decision (its index,
// or its storage): a counting sort.
struct OpBuckets {
  std::vector<std::uint32_t> offsets;
  std::vector<std::int32_t> items;
  std::span<const std::int32_t> at(OpIndex op) const {
    return std::span<const std::int32_t>(items).subspan(offsets[static_cast<std::size_t>(op)],
                                                        offsets[static_cast<std::size_t>(op) + 1] -
                                                            offsets[static_cast<std::size_t>(op)]);
  }
};

// Item d goes to op op_of(d) as item_of(d), in order of d.
template <typename OpOf, typename ItemOf>
OpBuckets bucket(OpIndex op_count, std::size_t count, OpOf op_of, ItemOf item_of) {
  OpBuckets buckets;
  buckets.offsets.assign(static_cast<std::size_t>(op_count) + 1, 0);
  for (std::size_t d = 0; d < count; ++d) ++buckets.offsets[static_cast<std::size_t>(op_of(d)) + 1];
  for (std::size_t i = 1; i < buckets.offsets.size(); ++i) buckets.offsets[i] += buckets.offsets[i - 1];
  buckets.items.resize(count);
  std::vector<std::uint32_t> cursor(buckets.offsets.begin(), buckets.offsets.end() - 1);
  for (std::size_t d = 0; d < count; ++d) {
    buckets.items[cursor[static_cast<std::size_t>(op_of(d))]++] = item_of(d);
  }
  return buckets;
}

// Note [One walk, two sinks]: the walk below decides the augmented trace's
// ops, storages and accesses, and hands them to a sink: TraceSink builds the
// trace; PeakSink only follows each storage's first and last access, which
// gives the trace's peak with releases after the last access, without the
// trace (its ops, accesses, the id map, the per-storage accesses). The
// recompute-only plan needs only the peak of its whole decision sequence (its
// floor): on the 1M-op chain that is a third of the build's time.
class TraceSink {
 public:
  void begin(const Trace& trace, std::size_t decisions) {
    builder_.reserve(static_cast<std::size_t>(trace.op_count()) + 2 * decisions,
                     static_cast<std::size_t>(trace.storage_count()) + 2 * decisions,
                     trace.access_count() + 8 * decisions);
    builder_.set_d2h_bandwidth_gib_per_s(trace.d2h_bandwidth_gib_per_s());
    builder_.set_h2d_bandwidth_gib_per_s(trace.h2d_bandwidth_gib_per_s());
    builder_.set_memory_limit_bytes(trace.memory_limit_bytes());
    builder_.use_op_names(trace.op_names_shared());
  }
  // Cannot fail: ids are dense and every op and size comes from a valid trace.
  void add_storage(StorageId id, std::int64_t size_bytes, Retention retention) {
    (void)builder_.add_storage(id, size_bytes, retention);
  }
  void add_op(std::uint32_t name_index, double duration_ms) { (void)builder_.add_named_op(name_index, duration_ms); }
  void add_access(StorageId id, AccessKind kind) { builder_.add_access(id, kind); }
  Trace finish() && { return value_or_throw(std::move(builder_).build()); }

 private:
  TraceBuilder builder_;
};

class PeakSink {
 public:
  void begin(const Trace& trace, std::size_t decisions) {
    storages_.reserve(static_cast<std::size_t>(trace.storage_count()) + 2 * decisions);
    reducible_delta_.reserve(static_cast<std::size_t>(trace.op_count()) + decisions + 1);
    reducible_delta_.push_back(0);
  }
  // Ids are dense, in order (0, 1, ...): the id is the index.
  void add_storage(StorageId, std::int64_t size_bytes, Retention retention) {
    storages_.push_back({size_bytes, -1, -1, retention == Retention::kRetained});
  }
  void add_op(std::uint32_t, double) {
    ++ops_;
    reducible_delta_.push_back(0);
  }
  // The gaps the peak planner could offload (offload_floor_rule.h).
  void add_access(StorageId id, AccessKind) {
    Lifetime& storage = storages_[static_cast<std::size_t>(id)];
    const OpIndex op = ops_ - 1;
    if (storage.first < 0) {
      storage.first = op;
    } else if (storage.size_bytes > 0) {
      add_offloadable_gap(reducible_delta_, storage.last, op, storage.size_bytes);
    }
    storage.last = op;
  }
  // As unplanned_peak (ir/memory_profile.h) and offload_floor on the trace
  // TraceSink builds: the same arithmetic, the first op for ties.
  struct Result {
    PeakBytes peak;
    UnavoidableFloor floor{-1, 0};
  };
  Result finish() && {
    const auto ops = static_cast<std::size_t>(ops_);
    std::vector<std::int64_t> delta(ops + 1, 0);
    for (const Lifetime& storage : storages_) {
      if (storage.first < 0) continue;
      delta[static_cast<std::size_t>(storage.first)] += storage.size_bytes;
      delta[storage.retained ? ops : static_cast<std::size_t>(storage.last) + 1] -= storage.size_bytes;
    }
    Result result;
    FloorScan floor;
    std::int64_t running = 0;
    std::int64_t reducible = 0;
    for (std::size_t op = 0; op < ops; ++op) {
      running += delta[op];
      reducible += reducible_delta_[op];
      if (result.peak.op < 0 || running > result.peak.bytes) result.peak = {running, static_cast<OpIndex>(op)};
      floor.add(static_cast<OpIndex>(op), running, reducible);
    }
    result.floor = floor.floor();
    return result;
  }

 private:
  struct Lifetime {
    std::int64_t size_bytes;
    OpIndex first;  // first and last op accessing it; -1: none
    OpIndex last;
    bool retained;
  };
  std::vector<Lifetime> storages_;
  std::vector<std::int64_t> reducible_delta_;  // per op and one past the last
  OpIndex ops_ = 0;
};

template <typename Sink>
class Builder {
 public:
  Builder(const Trace& trace, const RecomputeModel& model, std::span<const RecomputeDecision> decisions)
      : trace_(trace),
        model_(model),
        decisions_(decisions),
        current_(static_cast<std::size_t>(trace.storage_count())),
        dropped_(static_cast<std::size_t>(trace.storage_count()), false),
        kept_until_(static_cast<std::size_t>(trace.storage_count()), -1) {
    for (std::size_t s = 0; s < current_.size(); ++s) current_[s] = static_cast<StorageId>(s);
    // Note [Keeping a dead input] (recompute_model.h): a decision that keeps
    // its source's dead inputs holds each on the device until its re-run.
    std::vector<StorageIndex> kept;
    for (const RecomputeDecision& decision : decisions_) {
      if (!decision.keeps_dead_inputs) continue;
      const OpIndex source = model_.candidates[static_cast<std::size_t>(decision.candidate)].source_op;
      dead_inputs(trace_, model_, source, decision.regenerate_before, kept);
      for (const StorageIndex u : kept) {
        OpIndex& until = kept_until_[static_cast<std::size_t>(u)];
        until = std::max(until, decision.regenerate_before);
      }
    }
  }

  // Walks the trace into the sink, which it returns; out() then holds the
  // rest of the augmented trace (all but `trace`). Call once.
  Sink run() {
    const OpBuckets ends =
        bucket(trace_.op_count(), decisions_.size(), [&](std::size_t d) { return decisions_[d].regenerate_before; },
               [](std::size_t d) { return static_cast<std::int32_t>(d); });
    // By gap start, the storage each decision drops there: the walk below
    // then reads no candidate (on the 1M-op chain, a cache miss each).
    const OpBuckets dropped_after =
        bucket(trace_.op_count(), decisions_.size(), [&](std::size_t d) { return gap(d).start_op; },
               [&](std::size_t d) { return static_cast<std::int32_t>(gap(d).storage); });
    sink_.begin(trace_, decisions_.size());
    out_.original_id.reserve(static_cast<std::size_t>(trace_.storage_count()) + decisions_.size());
    // At least one re-run per decision.
    out_.original_op.reserve(static_cast<std::size_t>(trace_.op_count()) + decisions_.size());
    out_.source_op.reserve(static_cast<std::size_t>(trace_.op_count()) + decisions_.size());
    for (StorageIndex s = 0; s < trace_.storage_count(); ++s) {
      const StorageInfo& info = trace_.storage(s);
      sink_.add_storage(static_cast<StorageId>(s), info.size_bytes, info.retention);
      out_.original_id.push_back(info.id);
    }
    for (OpIndex op = 0; op < trace_.op_count(); ++op) {
      if (!ends.at(op).empty()) regenerate_before(op, ends.at(op));
      sink_.add_op(trace_.op_name_index(op), trace_.op_duration_ms(op));
      for (const Access& access : trace_.accesses(op)) {
        sink_.add_access(current_[static_cast<std::size_t>(access.storage)], access.kind);
      }
      out_.original_op.push_back(op);
      out_.source_op.push_back(-1);
      for (const std::int32_t s : dropped_after.at(op)) dropped_[static_cast<std::size_t>(s)] = true;
    }
    return std::move(sink_);
  }

  AugmentedTrace& out() { return out_; }

 private:
  const RecomputeCandidate& gap(std::size_t d) const {
    return model_.candidates[static_cast<std::size_t>(decisions_[d].candidate)];
  }

  StorageId new_instance(StorageIndex s) {
    const auto id = static_cast<StorageId>(out_.original_id.size());
    sink_.add_storage(id, trace_.storage(s).size_bytes, Retention::kReleasable);
    out_.original_id.push_back(trace_.storage(s).id);
    return id;
  }

  // Whether storage u, dead before `op`, is still on the device there: a
  // decision regenerated at `op` or later keeps it (from its last access to
  // that decision's re-run, which reads it where it is and so is its last
  // access). Every re-run before then reads it there too: regenerating it
  // would write the storage that is kept, and release it under the decision
  // that keeps it.
  bool kept_at(StorageIndex u, OpIndex op) const { return kept_until_[static_cast<std::size_t>(u)] >= op; }

  // An input u of a re-run before `op`: when it is dead there and not kept,
  // regenerate it for the re-runs here (a chain). Whatever else a re-run
  // reads is on the device there or regenerated before it for good (the
  // selection makes the decisions agree, recompute_selection.h), so it is
  // read where it is.
  // A producer that heads the unit of a follower re-run here regenerates u
  // within that unit: re-run alone it would write the storage its followers
  // rewrote back to an older version (Note [In-place units] in ir/trace.h).
  void require(StorageIndex u, OpIndex op, std::map<OpIndex, Rerun>& reruns) {
    if (dropped_[static_cast<std::size_t>(u)] || !dead_before(trace_, model_, u, op) || kept_at(u, op)) return;
    OpIndex producer = model_.regenerator[static_cast<std::size_t>(u)];
    if (producer < 0) return;  // cannot be: the chain was checked when the candidate was made
    if (trace_.has_in_place_units()) {
      for (auto it = reruns.upper_bound(producer); it != reruns.end(); ++it) {
        if (unit_head(trace_, it->first) == producer) producer = it->first;
      }
    }
    Rerun& rerun = reruns[producer];
    if (!contains(rerun.transient, u)) rerun.transient.push_back(u);
  }

  void regenerate_before(OpIndex op, std::span<const std::int32_t> ending) {
    std::map<OpIndex, Rerun> reruns;
    for (const std::int32_t d : ending) {
      const RecomputeCandidate& c = gap(static_cast<std::size_t>(d));
      reruns[c.source_op].persistent.push_back(c.storage);
    }
    // Expand from the latest producer down: inputs are created by earlier ops,
    // so every producer added lies below the one being expanded, where the
    // reverse walk reaches it next (inserting into a map moves no iterator):
    // O(re-runs here × log) per point.
    for (auto it = reruns.rbegin(); it != reruns.rend(); ++it) {
      const OpIndex k = it->first;
      for (const Access& access : rerun_accesses(trace_, model_, k)) {
        if (access.kind == AccessKind::kRead) require(access.storage, op, reruns);
      }
      // Outputs not already regenerated here: written into a short-lived
      // instance when not on the device, read where they are otherwise.
      Rerun& self = reruns[k];
      for (const Access& access : rerun_accesses(trace_, model_, k)) {
        if (access.kind != AccessKind::kWrite || contains(self.persistent, access.storage)) continue;
        const StorageIndex u = access.storage;
        if ((dropped_[static_cast<std::size_t>(u)] || (dead_before(trace_, model_, u, op) && !kept_at(u, op))) &&
            !contains(self.transient, u)) {
          self.transient.push_back(u);
        }
      }
    }
    std::map<StorageIndex, StorageId> transient_instance;
    for (auto& [k, rerun] : reruns) {
      // A follower's re-run is its unit's, as one op (rerun_accesses).
      sink_.add_op(trace_.op_name_index(k), unit_duration_ms(trace_, k));
      // One instance per output however many writes of it the op lists: a
      // second instance would leave the first unread, and the planner would
      // release the storage right after regenerating it (found by
      // fuzz/planners_fuzzer.cc).
      std::map<StorageIndex, StorageId> written_here;
      for (const Access& access : rerun_accesses(trace_, model_, k)) {
        const StorageIndex s = access.storage;
        if (access.kind == AccessKind::kRead) {
          const auto transient = transient_instance.find(s);
          sink_.add_access(transient != transient_instance.end() ? transient->second : current_[static_cast<std::size_t>(s)],
                              AccessKind::kRead);
        } else if (const auto again = written_here.find(s); again != written_here.end()) {
          sink_.add_access(again->second, AccessKind::kWrite);
        } else if (contains(rerun.persistent, s)) {
          const StorageId id = new_instance(s);
          current_[static_cast<std::size_t>(s)] = id;
          dropped_[static_cast<std::size_t>(s)] = false;
          written_here.emplace(s, id);
          sink_.add_access(id, AccessKind::kWrite);
        } else if (contains(rerun.transient, s)) {
          const StorageId id = new_instance(s);
          transient_instance[s] = id;
          written_here.emplace(s, id);
          sink_.add_access(id, AccessKind::kWrite);
        } else {
          sink_.add_access(current_[static_cast<std::size_t>(s)], AccessKind::kRead);
        }
      }
      out_.original_op.push_back(op);
      out_.source_op.push_back(k);
      ++out_.recompute_count;
      out_.recompute_ms += unit_duration_ms(trace_, k);
    }
  }

  const Trace& trace_;
  const RecomputeModel& model_;
  std::span<const RecomputeDecision> decisions_;
  Sink sink_;
  AugmentedTrace out_;
  std::vector<StorageId> current_;  // per original storage: the instance later accesses use
  std::vector<bool> dropped_;       // per original storage: off the device, inside a decision's gap
  // Per original storage: the point of the latest re-run that keeps it (it is
  // held over the ops before it; -1: none), as in the selection's Selector.
  std::vector<OpIndex> kept_until_;
};

}  // namespace

AugmentedTrace build_augmented_trace(const Trace& trace, const RecomputeModel& model,
                                     std::span<const RecomputeDecision> decisions) {
  Builder<TraceSink> builder(trace, model, decisions);
  Trace augmented = builder.run().finish();
  AugmentedTrace out = std::move(builder.out());
  out.trace = std::move(augmented);
  return out;
}

AugmentedPeak augmented_peak(const Trace& trace, const RecomputeModel& model,
                             std::span<const RecomputeDecision> decisions) {
  Builder<PeakSink> builder(trace, model, decisions);
  const PeakSink::Result walked = builder.run().finish();
  const AugmentedTrace& out = builder.out();
  const auto original = [&](OpIndex op) { return op >= 0 ? out.original_op[static_cast<std::size_t>(op)] : -1; };
  return {walked.peak.bytes, original(walked.peak.op), UnavoidableFloor{original(walked.floor.op), walked.floor.bytes},
          out.recompute_count, out.recompute_ms};
}

std::vector<Action> map_back(const AugmentedTrace& augmented, std::span<const Action> actions) {
  const ActionsByOp by_op(actions, augmented.trace.op_count());
  std::vector<Action> out;
  out.reserve(actions.size() + static_cast<std::size_t>(augmented.recompute_count));
  auto emit = [&](std::span<const Action> list, OpIndex op, std::optional<Phase> phase) {
    for (Action action : list) {
      action.op = op;
      if (phase) action.phase = *phase;
      action.storage = augmented.original_id[static_cast<std::size_t>(action.storage)];
      out.push_back(action);
    }
  };
  for (OpIndex j = 0; j < augmented.trace.op_count(); ++j) {
    const OpIndex op = augmented.original_op[static_cast<std::size_t>(j)];
    const OpIndex source = augmented.source_op[static_cast<std::size_t>(j)];
    if (source < 0) {
      emit(by_op.pre(j), op, std::nullopt);
      emit(by_op.post(j), op, std::nullopt);
    } else {
      emit(by_op.pre(j), op, Phase::kPre);
      out.push_back(Action{op, Phase::kPre, ActionKind::kRecompute, 0, source});
      emit(by_op.post(j), op, Phase::kPre);
    }
  }
  return out;
}

std::vector<Action> end_of_life_releases(const Trace& trace, const StorageAccesses& accesses) {
  // A counting sort by op of the storages in index order (the order
  // ScheduleAssembler keeps within an op), with one phase and 32-bit counts:
  // on the 1M-op chain's augmented traces the assembler's two slots per op
  // and its copy of every action were half of the time.
  const auto ops = static_cast<std::size_t>(trace.op_count());
  std::vector<std::uint32_t> start(ops + 1, 0);
  std::size_t count = 0;
  const auto released = [&](StorageIndex s) {
    const StorageInfo& info = trace.storage(s);
    return accesses.accessed(s) && !info.retained() && info.size_bytes > 0;
  };
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (!released(s)) continue;
    ++start[static_cast<std::size_t>(accesses.last_op(s)) + 1];
    ++count;
  }
  for (std::size_t op = 1; op <= ops; ++op) start[op] += start[op - 1];
  std::vector<Action> releases(count);
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (!released(s)) continue;
    const OpIndex op = accesses.last_op(s);
    releases[start[static_cast<std::size_t>(op)]++] =
        Action{op, Phase::kPost, ActionKind::kReleaseDevice, trace.storage(s).id};
  }
  return releases;
}

}  // namespace hyperoffload::internal
