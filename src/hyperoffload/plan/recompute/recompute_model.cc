#include "hyperoffload/plan/recompute/recompute_model.h"

#include <algorithm>
#include <limits>

#include "hyperoffload/ir/recompute_unit.h"
#include "hyperoffload/plan/peak/peak_model.h"

namespace hyperoffload::internal {
namespace {

constexpr OpIndex kNever = std::numeric_limits<OpIndex>::max();

}  // namespace

// One backward pass over the ops: next_write[x] is the first op after the
// current one that writes x. A follower's unit must find what every member
// read and wrote as that member saw it, except for the storage S the unit
// rewrites, whose later writes up to the follower are the unit's own. So per
// op the pass keeps the two earliest next writes over distinct storages (the
// bound without any one storage is then O(1)), and a forward pass folds, for
// each follower, its previous members' bounds without S (a head may start
// several units, one per storage it makes: each excludes only its own).
std::vector<OpIndex> valid_until_per_op(const Trace& trace) {
  std::vector<OpIndex> valid_until(static_cast<std::size_t>(trace.op_count()), -1);
  std::vector<OpIndex> next_write(static_cast<std::size_t>(trace.storage_count()), kNever);
  struct Earliest {
    OpIndex first = kNever;
    StorageIndex first_storage = -1;
    OpIndex second = kNever;  // over storages other than first_storage
    OpIndex without(StorageIndex s) const { return s == first_storage ? second : first; }
  };
  std::vector<Earliest> earliest;
  if (trace.has_in_place_units()) earliest.resize(static_cast<std::size_t>(trace.op_count()));
  for (OpIndex op = trace.op_count() - 1; op >= 0; --op) {
    const std::span<const Access> list = trace.accesses(op);
    if (trace.op_recomputable(op)) {
      OpIndex until = kNever;
      Earliest e;
      for (const Access& access : list) {
        const OpIndex next = next_write[static_cast<std::size_t>(access.storage)];
        until = std::min(until, next);
        if (access.storage == e.first_storage) continue;
        if (next < e.first) {
          e.second = e.first;
          e.first = next;
          e.first_storage = access.storage;
        } else {
          e.second = std::min(e.second, next);
        }
      }
      valid_until[static_cast<std::size_t>(op)] = until;
      if (!earliest.empty()) earliest[static_cast<std::size_t>(op)] = e;
    }
    for (const Access& access : list) {
      if (access.kind == AccessKind::kWrite) next_write[static_cast<std::size_t>(access.storage)] = op;
    }
  }
  if (earliest.empty()) return valid_until;
  // members[f]: the bound of f's previous members without S. Members come
  // before their followers, so one forward pass sees each previous first.
  std::vector<OpIndex> members(static_cast<std::size_t>(trace.op_count()), kNever);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    const OpIndex previous = trace.op_unit_previous(op);
    if (previous < 0) continue;
    OpIndex bound = earliest[static_cast<std::size_t>(previous)].without(rewritten_storage(trace, op));
    if (trace.op_unit_previous(previous) >= 0) bound = std::min(bound, members[static_cast<std::size_t>(previous)]);
    members[static_cast<std::size_t>(op)] = bound;
    valid_until[static_cast<std::size_t>(op)] = std::min(valid_until[static_cast<std::size_t>(op)], bound);
  }
  return valid_until;
}

Regenerators find_regenerators(const Trace& trace, const StorageAccesses& accesses,
                               std::span<const OpIndex> producer) {
  Regenerators out;
  out.regenerator.assign(producer.begin(), producer.end());
  if (!trace.has_in_place_units()) return out;
  std::vector<OpIndex> members;
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    if (trace.op_unit_previous(op) < 0 || unit_size(trace, op) > static_cast<std::size_t>(kMaxUnitOps)) continue;
    unit_members(trace, op, members);
    std::vector<Access>& list = out.unit_accesses[op];
    for_each_unit_access(trace, members, [&](OpIndex, std::size_t, const Access& access) { list.push_back(access); });
  }
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    const OpIndex made_by = producer[static_cast<std::size_t>(s)];
    if (made_by < 0 || !accesses.accessed(s)) continue;
    OpIndex last_write = made_by;
    for (const StorageAccess& access : accesses.of(s)) {
      if (access.kind == AccessKind::kWrite) last_write = access.op;
    }
    if (out.unit_accesses.contains(last_write)) out.regenerator[static_cast<std::size_t>(s)] = last_write;
  }
  return out;
}

OpIndex rerun_source(const Trace& trace, OpIndex version_writer, OpIndex producer) {
  if (version_writer < 0 || trace.op_unit_previous(version_writer) < 0) return producer;
  return unit_size(trace, version_writer) <= static_cast<std::size_t>(kMaxUnitOps) ? version_writer : -1;
}

namespace {

// chain_cost's search, without what it learns for later searches.
double chain_search(const Trace& trace, RecomputeModel& model, OpIndex source_op, OpIndex op, ChainMarks& marks,
                    std::int64_t max_work, std::vector<OpIndex>& pending, std::span<const OpIndex> no_chain_from) {
  if (no_chain_from[static_cast<std::size_t>(source_op)] <= op) return -1.0;
  const double limit_ms = trace.total_compute_ms();
  marks.clear();
  marks.visit_unit(trace, source_op);
  pending.assign(1, source_op);
  std::size_t visited = 1;
  double cost = 0.0;
  while (!pending.empty()) {
    const OpIndex k = pending.back();
    pending.pop_back();
    if (model.valid_until[static_cast<std::size_t>(k)] < op) return -1.0;
    cost += unit_duration_ms(trace, k);
    if (cost > limit_ms) return -1.0;
    const std::span<const Access> list = rerun_accesses(trace, model, k);
    model.chain_work += 1 + static_cast<std::int64_t>(list.size());
    for (const Access& access : list) {
      if (access.kind != AccessKind::kRead || !dead_before(trace, model, access.storage, op)) continue;
      const OpIndex producer = model.regenerator[static_cast<std::size_t>(access.storage)];
      if (producer < 0 || no_chain_from[static_cast<std::size_t>(producer)] <= op) return -1.0;
      if (!marks.visit_unit(trace, producer)) continue;
      if (visited >= static_cast<std::size_t>(kMaxChainOps)) return -1.0;
      if (model.chain_work > max_work) {
        model.chain_work_cut = true;
        return -1.0;
      }
      ++visited;
      pending.push_back(producer);
    }
  }
  return cost;
}

// The chain's compute time for a recompute of `source_op` before `op`, or a
// negative value when no chain exists (stale, a dead input that cannot be
// regenerated, longer than kMaxChainOps or costlier than the step) or the
// model's chain work budget (`max_work`, Note [Chain work]) is spent and the
// chain needs more than its producer.
// Depth-first with an explicit stack (chains can be thousands of ops deep)
// and each producer once: the augmented trace re-runs a producer once per
// point however many re-runs read its outputs.
// `pending` is scratch space, reused between calls (one allocation per
// candidate was a tenth of the model on a 1M-op transformer).
//
// Note [Chains that cannot be]
// Whether a chain exists is monotone, in the op and in the chain: with a
// later op more inputs are dead and fewer re-runs are valid, so the chain of
// a source before op' >= op holds the one before op; and the chain of a
// source that reaches producer p holds p's own chain before the same op.
// Every reason a chain does not exist — a re-run no longer valid, a dead
// input nothing regenerates, more than kMaxChainOps ops, more compute than
// the step — holds for every chain that holds it. So `no_chain_from[k]`
// keeps the earliest op before which the chain of source k was found not to
// exist (kNever: none yet), and a search that reaches k before that op or
// later gives up at once, with the answer it would have reached. (A search
// cut by the work budget says nothing about its chain and is not kept.) On
// a 36k-layer transformer step (1M ops) each backward gradient's chain runs
// through every later layer's backward: 33k searches ran to kMaxChainOps
// one after the other, 98% of the model's chain work, until the budget
// cut the rest; the later of two such chains now stops where it meets the
// earlier.
double chain_cost(const Trace& trace, RecomputeModel& model, OpIndex source_op, OpIndex op, ChainMarks& marks,
                  std::int64_t max_work, std::vector<OpIndex>& pending, std::vector<OpIndex>& no_chain_from) {
  const double cost = chain_search(trace, model, source_op, op, marks, max_work, pending, no_chain_from);
  if (cost < 0.0 && !model.chain_work_cut) {
    OpIndex& from = no_chain_from[static_cast<std::size_t>(source_op)];
    from = std::min(from, op);
  }
  return cost;
}

// Per access of a storage: the copy op of its version, by the peak model's
// rule (peak_model.h, starts_version) — the op of the version's first access,
// which is the only op that writes it. Into `copy_ops`, reused between
// storages.
void version_copy_ops(std::span<const StorageAccess> list, std::vector<OpIndex>& copy_ops) {
  copy_ops.resize(list.size());
  for (std::size_t j = 0; j < list.size(); ++j) {
    copy_ops[j] = j == 0 || starts_version(list, j) ? list[j].op : copy_ops[j - 1];
  }
}

// Note [Keeping a dead input]: the source's own dead inputs (each once) and
// whether keeping them frees anything. `kept` is scratch space.
void offer_kept_inputs(const Trace& trace, const RecomputeModel& model, RecomputeCandidate& c,
                       std::vector<StorageIndex>& kept) {
  dead_inputs(trace, model, c.source_op, c.end_op, kept);
  for (const StorageIndex u : kept) c.keep_bytes += trace.storage(u).size_bytes;
  if (kept.empty() || c.keep_bytes >= c.size_bytes) {
    c.keep_bytes = 0;
    return;
  }
  c.keep_cost_ms = unit_duration_ms(trace, c.source_op);
}

}  // namespace

void dead_inputs(const Trace& trace, const RecomputeModel& model, OpIndex source, OpIndex op,
                 std::vector<StorageIndex>& out) {
  out.clear();
  for (const Access& access : rerun_accesses(trace, model, source)) {
    if (access.kind != AccessKind::kRead || !dead_before(trace, model, access.storage, op)) continue;
    if (std::find(out.begin(), out.end(), access.storage) == out.end()) out.push_back(access.storage);
  }
}

bool dead_before(const Trace& trace, const RecomputeModel& model, StorageIndex s, OpIndex op) {
  const StorageInfo& info = trace.storage(s);
  return info.size_bytes > 0 && !info.retained() && model.last_op[static_cast<std::size_t>(s)] < op;
}

RecomputeModel build_recompute_model(const Trace& trace, const StorageAccesses& accesses) {
  RecomputeModel model;
  const auto storages = static_cast<std::size_t>(trace.storage_count());
  model.producer = recompute_producers(trace, accesses);
  model.last_op.assign(storages, -1);
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (accesses.accessed(s)) model.last_op[static_cast<std::size_t>(s)] = accesses.last_op(s);
  }
  model.regenerator = model.producer;
  if (!trace.has_recomputable_ops()) return model;
  model.valid_until = valid_until_per_op(trace);
  Regenerators regenerators = find_regenerators(trace, accesses, model.producer);
  model.regenerator = std::move(regenerators.regenerator);
  model.unit_accesses = std::move(regenerators.unit_accesses);
  ChainMarks marks(trace.op_count());
  const std::int64_t max_work =
      kChainWorkFactor * (static_cast<std::int64_t>(trace.op_count()) + static_cast<std::int64_t>(trace.access_count()));

  std::vector<OpIndex> copy_ops;
  std::vector<OpIndex> pending;
  std::vector<StorageIndex> kept;
  std::vector<OpIndex> no_chain_from(static_cast<std::size_t>(trace.op_count()), kNever);  // Note [Chains that cannot be]
  for (const StorageIndex s : accesses.by_first_appearance()) {
    const OpIndex producer = model.producer[static_cast<std::size_t>(s)];
    const StorageInfo& info = trace.storage(s);
    if (producer < 0 || info.retained() || info.size_bytes <= 0) continue;
    const std::span<const StorageAccess> list = accesses.of(s);
    version_copy_ops(list, copy_ops);
    for (std::size_t j = 0; j + 1 < list.size(); ++j) {
      const OpIndex start = list[j].op;
      const OpIndex end = list[j + 1].op;
      if (end - start < 2) continue;
      // The version in the gap: its producer's, or an in-place follower's
      // (then its unit re-runs).
      const OpIndex source = rerun_source(trace, copy_ops[j], producer);
      if (source < 0) continue;
      const double cost = chain_cost(trace, model, source, end, marks, max_work, pending, no_chain_from);
      if (cost < 0.0) continue;
      RecomputeCandidate& c = model.candidates.emplace_back(
          RecomputeCandidate{s, info.size_bytes, start, end, source, cost, copy_ops[j]});
      offer_kept_inputs(trace, model, c, kept);
    }
  }
  return model;
}

}  // namespace hyperoffload::internal
