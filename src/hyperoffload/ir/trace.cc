#include "hyperoffload/ir/trace.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace hyperoffload {

const char* to_string(AccessKind kind) {
  return kind == AccessKind::kWrite ? "write" : "read";
}

double Trace::d2h_ms(std::int64_t bytes) const {
  return static_cast<double>(bytes) / (d2h_bandwidth_gib_per_s_ * static_cast<double>(kBytesPerGiB)) * 1e3;
}

double Trace::h2d_ms(std::int64_t bytes) const {
  return static_cast<double>(bytes) / (h2d_bandwidth_gib_per_s_ * static_cast<double>(kBytesPerGiB)) * 1e3;
}

std::optional<StorageIndex> Trace::find_storage(StorageId id) const { return id_map_.find(id); }

void Trace::StorageIdMap::build(std::span<const StorageInfo> storages) {
  direct_.clear();
  sparse_.clear();
  StorageId max_id = -1;
  for (const StorageInfo& s : storages) max_id = std::max(max_id, s.id);
  // A direct table costs 4 bytes per possible id; use it while that stays within
  // a small multiple of the storage count.
  use_direct_ = max_id < static_cast<StorageId>(4 * storages.size() + 1024);
  if (use_direct_) {
    direct_.assign(static_cast<std::size_t>(max_id + 1), -1);
    for (std::size_t i = 0; i < storages.size(); ++i) {
      direct_[static_cast<std::size_t>(storages[i].id)] = static_cast<StorageIndex>(i);
    }
  } else {
    sparse_.reserve(storages.size());
    for (std::size_t i = 0; i < storages.size(); ++i) {
      sparse_.emplace(storages[i].id, static_cast<StorageIndex>(i));
    }
  }
}

std::optional<StorageIndex> Trace::StorageIdMap::find_sparse(StorageId id) const {
  auto it = sparse_.find(id);
  if (it == sparse_.end()) return std::nullopt;
  return it->second;
}

Status TraceBuilder::add_storage(StorageId id, std::int64_t size_bytes, Retention retention) {
  const std::size_t index = trace_.storages_.size();
  if (id < 0) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("storages[{}].id: must be a non-negative integer, got {}", index, id));
  }
  if (id > std::numeric_limits<std::int64_t>::max() / 2) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("storages[{}].id: {} is too large", index, id));
  }
  if (size_bytes < 0) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("storages[{}].size_bytes: must be non-negative, got {}", index, size_bytes));
  }
  if (size_bytes > kMaxTotalStorageBytes - total_storage_bytes_) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("storages[{}].size_bytes: {} brings the storages' total above 2^62 bytes",
                                  index, size_bytes));
  }
  if (index >= static_cast<std::size_t>(std::numeric_limits<StorageIndex>::max())) {
    return make_error(ErrorCode::kInvalidInput, "storages: too many storages");
  }
  total_storage_bytes_ += size_bytes;
  trace_.storages_.push_back(StorageInfo{id, size_bytes, retention});
  return ok_status();
}

OpNames& TraceBuilder::owned_names() {
  if (owned_names_ == nullptr) {
    // Copy on the first write: a shared table stays as its other traces read it.
    auto owned = std::make_shared<OpNames>(*trace_.names_);
    owned_names_ = owned.get();
    trace_.names_ = std::move(owned);
  }
  return *owned_names_;
}

// Note [Interning while it pays]
// Interning saves a name's characters when ops share names, as the ops of a
// captured step do ("aten::mm" thousands of times). Where nearly every name is
// new, as in a generated 1M-op transformer ("layer12345.attn.qkv"), it saves
// nothing and costs a hash and a cache miss in a table of 16 MiB per op: a
// quarter of reading the 1M-op chain trace. So after kInternTrial names the
// builder looks at what interning found: when fewer than 1 in
// kInternHitsPerTrial of them were already in the table, every later name is
// appended without a lookup (a name seen again then gets a second index; the
// names read the same). The decision depends only on the names in order, so
// the same trace always gets the same table; smaller traces are never
// affected.
std::uint32_t TraceBuilder::intern(std::string_view name) {
  constexpr std::size_t kInternTrial = 1 << 16;
  constexpr std::size_t kInternHitsPerTrial = 16;
  if (!interning_) return owned_names().append(name);
  // Each lookup so far either found its name or added it to the table.
  if (intern_lookups_ == kInternTrial && (intern_lookups_ - interned_count_) * kInternHitsPerTrial < kInternTrial) {
    interning_ = false;
    name_slots_ = {};
    return owned_names().append(name);
  }
  ++intern_lookups_;
  if (2 * (interned_count_ + 1) > name_slots_.size()) {
    std::vector<NameSlot> old = std::move(name_slots_);
    name_slots_.assign(std::max<std::size_t>(64, 2 * old.size()), NameSlot{});
    const std::size_t mask = name_slots_.size() - 1;
    for (const NameSlot& slot : old) {
      if (slot.index_plus_one == 0) continue;
      std::size_t at = slot.hash_low & mask;
      while (name_slots_[at].index_plus_one != 0) at = (at + 1) & mask;
      name_slots_[at] = slot;
    }
  }
  OpNames& names = owned_names();
  const auto hash_low = static_cast<std::uint32_t>(std::hash<std::string_view>{}(name));
  const std::size_t mask = name_slots_.size() - 1;
  std::size_t at = hash_low & mask;
  while (name_slots_[at].index_plus_one != 0) {
    const NameSlot& slot = name_slots_[at];
    if (slot.hash_low == hash_low && names[slot.index_plus_one - 1] == name) return slot.index_plus_one - 1;
    at = (at + 1) & mask;
  }
  const std::uint32_t index = names.append(name);
  name_slots_[at] = NameSlot{hash_low, index + 1};
  ++interned_count_;
  return index;
}

Status TraceBuilder::add_op(std::string_view name, double duration_ms, Recomputable recomputable) {
  return add_named_op(intern(name), duration_ms, recomputable);
}

void TraceBuilder::use_op_names(std::shared_ptr<const OpNames> names) {
  // Not interned: a later add_op of one of these names interns it a second
  // time, which costs a copy of the table and changes nothing else.
  trace_.names_ = std::move(names);
  owned_names_ = nullptr;
}

Status TraceBuilder::add_named_op(std::uint32_t name_index, double duration_ms, Recomputable recomputable) {
  const std::size_t index = trace_.ops_.size();
  if (!(duration_ms >= 0.0) || !std::isfinite(duration_ms)) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("ops[{}].duration_ms: must be a non-negative finite number, got {}",
                                  index, duration_ms));
  }
  if (total_duration_ms_ + duration_ms > kMaxTotalMs) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("ops[{}].duration_ms: {} ms brings the ops' total duration above 1e15 ms (about "
                                  "31,700 years), the most a trace may hold",
                                  index, duration_ms));
  }
  if (index >= static_cast<std::size_t>(std::numeric_limits<OpIndex>::max())) {
    return make_error(ErrorCode::kInvalidInput, "ops: too many ops");
  }
  // -0 passes the check above. Stored as +0: the writer would print "-0",
  // which reads back as the integer 0, so a written trace would not read back
  // as itself (found by fuzz/trace_json_fuzzer.cc).
  if (duration_ms == 0.0) duration_ms = 0.0;
  total_duration_ms_ += duration_ms;
  trace_.total_compute_ms_ = total_duration_ms_;
  const auto access_at = static_cast<std::uint32_t>(trace_.accesses_.size());
  trace_.ops_.push_back(Trace::OpRecord{name_index, access_at, access_at, recomputable, duration_ms});
  if (recomputable != Recomputable::kNo) ++trace_.recomputable_count_;
  if (recomputable == Recomputable::kWithRngReplay) ++trace_.rng_replay_count_;
  return ok_status();
}

void TraceBuilder::add_access(StorageId storage, AccessKind kind) {
  trace_.accesses_.push_back(Access{0, kind});
  pending_ids_.push_back(storage);
  trace_.ops_.back().access_end = static_cast<std::uint32_t>(trace_.accesses_.size());
}

void TraceBuilder::take_storages(TraceBuilder&& other) {
  trace_.storages_ = std::move(other.trace_.storages_);
  total_storage_bytes_ = other.total_storage_bytes_;
}

Status TraceBuilder::take_ops(TraceBuilder&& other) {
  const Trace& from = other.trace_;
  for (const Trace::OpRecord& op : from.ops_) {
    HO_RETURN_IF_ERROR(add_named_op(intern((*from.names_)[op.name_index]), op.duration_ms, op.recomputable));
    for (std::uint32_t a = op.access_begin; a < op.access_end; ++a) {
      add_access(other.pending_ids_[a], from.accesses_[a].kind);
    }
  }
  return ok_status();
}

void TraceBuilder::reserve(std::size_t ops, std::size_t storages, std::size_t accesses) {
  trace_.ops_.reserve(trace_.ops_.size() + ops);
  trace_.storages_.reserve(trace_.storages_.size() + storages);
  trace_.accesses_.reserve(trace_.accesses_.size() + accesses);
  pending_ids_.reserve(pending_ids_.size() + accesses);
}

// What a recomputable op must look like from the trace alone: it writes at
// least one storage, and either each storage it writes is created by that
// write (the storage's first access in the step) and not also read by the op,
// or it is an in-place follower: it reads and writes exactly one storage, whose
// current version a recomputable op made (Note [In-place units] in trace.h).
// Records each follower's previous unit member. O(ops + accesses).
Status TraceBuilder::check_recomputable_ops() {
  const auto storages = static_cast<std::size_t>(trace_.storage_count());
  std::vector<OpIndex> first_access(storages, -1);
  std::vector<OpIndex> read_by(storages, -1);      // last op that read the storage
  std::vector<OpIndex> last_writer(storages, -1);  // op that made its current version
  for (OpIndex op = 0; op < trace_.op_count(); ++op) {
    const std::span<const Access> accesses = trace_.accesses(op);
    if (trace_.op_recomputable(op)) {
      for (const Access& access : accesses) {
        if (access.kind == AccessKind::kRead) read_by[static_cast<std::size_t>(access.storage)] = op;
      }
      bool creates = false;                 // writes a storage it creates
      std::optional<std::size_t> in_place;  // an access writing a storage the op also reads
      bool two_in_place = false;
      for (std::size_t a = 0; a < accesses.size(); ++a) {
        if (accesses[a].kind != AccessKind::kWrite) continue;
        const auto s = static_cast<std::size_t>(accesses[a].storage);
        const StorageId id = trace_.storages_[s].id;
        if (read_by[s] == op) {
          if (in_place && accesses[*in_place].storage != accesses[a].storage) two_in_place = true;
          if (!in_place) in_place = a;
          continue;
        }
        if (first_access[s] >= 0 && first_access[s] != op) {
          return make_error(ErrorCode::kInvalidInput,
                            fmt::format("ops[{}].recomputable: the op writes storage {} (accesses[{}]), which "
                                        "ops[{}] created, without reading it; an op that overwrites a storage it "
                                        "did not create cannot be recomputed",
                                        op, id, a, first_access[s]));
        }
        creates = true;
      }
      if (!creates && !in_place) {
        return make_error(ErrorCode::kInvalidInput,
                          fmt::format("ops[{}].recomputable: the op writes no storage, so there is nothing to "
                                      "recompute",
                                      op));
      }
      if (in_place) {
        const std::size_t a = *in_place;
        const auto s = static_cast<std::size_t>(accesses[a].storage);
        const StorageId id = trace_.storages_[s].id;
        if (creates || two_in_place) {
          return make_error(ErrorCode::kInvalidInput,
                            fmt::format("ops[{}].recomputable: the op reads and writes storage {} (accesses[{}]) "
                                        "and writes another storage; an in-place op is recomputable only when "
                                        "that one storage is all it writes",
                                        op, id, a));
        }
        const OpIndex previous = last_writer[s];
        if (previous < 0 || !trace_.op_recomputable(previous)) {
          return make_error(ErrorCode::kInvalidInput,
                            previous < 0
                                ? fmt::format("ops[{}].recomputable: the op reads and writes storage {} "
                                              "(accesses[{}]), which no op of the step wrote before; an in-place "
                                              "op is recomputable only on what a recomputable op made",
                                              op, id, a)
                                : fmt::format("ops[{}].recomputable: the op reads and writes storage {} "
                                              "(accesses[{}]), whose current version ops[{}] made, which is not "
                                              "recomputable; an in-place op is recomputable only on what a "
                                              "recomputable op made",
                                              op, id, a, previous));
        }
        if (trace_.unit_previous_.empty()) trace_.unit_previous_.assign(static_cast<std::size_t>(trace_.op_count()), -1);
        trace_.unit_previous_[static_cast<std::size_t>(op)] = previous;
      }
    }
    for (const Access& access : accesses) {
      const auto s = static_cast<std::size_t>(access.storage);
      if (first_access[s] < 0) first_access[s] = op;
      if (access.kind == AccessKind::kWrite) last_writer[s] = op;
    }
  }
  return ok_status();
}

Result<Trace> TraceBuilder::build() && {
  if (limit_ && *limit_ < 0) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("memory_limit_bytes: must be non-negative or null, got {}", *limit_));
  }
  if (host_limit_ && *host_limit_ < 0) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("host_memory_limit_bytes: must be non-negative or null, got {}", *host_limit_));
  }
  if (!(d2h_ > 0.0) || !std::isfinite(d2h_)) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("d2h_bandwidth_gbps: must be a positive number, got {}", d2h_));
  }
  if (!(h2d_ > 0.0) || !std::isfinite(h2d_)) {
    return make_error(ErrorCode::kInvalidInput,
                      fmt::format("h2d_bandwidth_gbps: must be a positive number, got {}", h2d_));
  }
  trace_.memory_limit_bytes_ = limit_;
  trace_.host_memory_limit_bytes_ = host_limit_;
  trace_.d2h_bandwidth_gib_per_s_ = d2h_;
  trace_.h2d_bandwidth_gib_per_s_ = h2d_;
  // Copying every storage once must fit in kMaxTotalMs each way: a bandwidth
  // of 1e-300 GiB/s would otherwise turn a copy's time into an infinity.
  for (const auto& [key, copy_ms] : {std::pair{"d2h_bandwidth_gbps", trace_.d2h_ms(total_storage_bytes_)},
                                     std::pair{"h2d_bandwidth_gbps", trace_.h2d_ms(total_storage_bytes_)}}) {
    if (!(copy_ms <= kMaxTotalMs)) {
      return make_error(ErrorCode::kInvalidInput,
                        fmt::format("{}: {} GiB/s is too slow for this trace: copying its storages' {} bytes "
                                    "would take more than 1e15 ms (about 31,700 years), the most a trace may hold",
                                    key, key[0] == 'd' ? d2h_ : h2d_, total_storage_bytes_));
    }
  }

  trace_.id_map_.build(trace_.storages_);
  // A duplicate id maps to its last declaration; any earlier declaration whose
  // lookup does not return itself is a duplicate.
  for (std::size_t i = 0; i < trace_.storages_.size(); ++i) {
    const StorageId id = trace_.storages_[i].id;
    const StorageIndex found = *trace_.id_map_.find(id);
    if (static_cast<std::size_t>(found) != i) {
      return make_error(ErrorCode::kInvalidInput,
                        fmt::format("storages[{}].id: duplicate storage id {} (also storages[{}])",
                                    found, id, i));
    }
  }

  for (OpIndex op = 0; op < trace_.op_count(); ++op) {
    const Trace::OpRecord& record = trace_.ops_[op];
    for (std::uint32_t a = record.access_begin; a < record.access_end; ++a) {
      const StorageId id = pending_ids_[a];
      std::optional<StorageIndex> index = trace_.id_map_.find(id);
      if (!index) {
        return make_error(ErrorCode::kInvalidInput,
                          fmt::format("ops[{}].accesses[{}].storage: undeclared storage {}", op,
                                      a - record.access_begin, id));
      }
      trace_.accesses_[a].storage = *index;
    }
  }
  if (trace_.recomputable_count_ > 0) HO_RETURN_IF_ERROR(check_recomputable_ops());
  pending_ids_ = {};
  name_slots_ = {};
  return std::move(trace_);
}

std::vector<double> op_start_ms(const Trace& trace) {
  std::vector<double> start_ms(static_cast<std::size_t>(trace.op_count()) + 1, 0.0);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    start_ms[static_cast<std::size_t>(op) + 1] = start_ms[static_cast<std::size_t>(op)] + trace.op_duration_ms(op);
  }
  return start_ms;
}

}  // namespace hyperoffload
