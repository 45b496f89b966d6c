#include "hyperoffload/gen/random_trace.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <span>
#include <string>

#include "hyperoffload/ir/memory_profile.h"

namespace hyperoffload {
namespace {

struct PendingAccess {
  OpIndex op;
  StorageId storage;
  AccessKind kind;
};

// Marks recomputable_fraction of the eligible ops: those that write, and
// write only storages whose first access is that write (each storage's first
// access is its creating write, pushed before its later accesses, so a later
// access in the same op means an in-place update), and as many of the
// in-place followers (ops that read and write one storage, all they write,
// whose version a marked op made). Uses its own random stream,
// so the trace's accesses and durations do not depend on the fraction.
std::vector<Recomputable> mark_recomputable(const RandomTraceOptions& options, std::span<const PendingAccess> by_op,
                                            std::span<const std::size_t> offsets, StorageIndex storages) {
  const std::size_t ops = offsets.size() - 1;
  std::vector<Recomputable> marks(ops, Recomputable::kNo);
  if (!(options.recomputable_fraction > 0.0)) return marks;
  std::mt19937_64 rng(options.seed ^ 0x9e3779b97f4a7c15ULL);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // In-place followers (Note [In-place units] in ir/trace.h) from a second
  // stream, so the other marks stay as they were.
  std::mt19937_64 follower_rng(options.seed ^ 0x5851f42d4c957f2dULL);
  std::vector<bool> seen(static_cast<std::size_t>(storages), false);
  std::vector<bool> version_marked(static_cast<std::size_t>(storages), false);  // its last writer is marked
  for (std::size_t op = 0; op < ops; ++op) {
    bool writes = false;
    bool eligible = true;
    // A follower: reads and writes one storage, which a marked op wrote last,
    // and writes nothing else.
    std::optional<std::size_t> rewritten;
    bool follower = true;
    for (std::size_t i = offsets[op]; i < offsets[op + 1]; ++i) {
      const auto s = static_cast<std::size_t>(by_op[i].storage);
      if (by_op[i].kind == AccessKind::kWrite) {
        writes = true;
        if (seen[s]) eligible = false;  // a later version, or the write of an in-place pair
        if (rewritten && *rewritten != s) follower = false;
        rewritten = s;
      }
      seen[s] = true;
    }
    if (rewritten) {
      bool reads = false;
      for (std::size_t i = offsets[op]; i < offsets[op + 1]; ++i) {
        reads = reads || (by_op[i].kind == AccessKind::kRead && static_cast<std::size_t>(by_op[i].storage) == *rewritten);
      }
      follower = follower && reads && version_marked[*rewritten];
    }
    if (writes && eligible && unit(rng) < options.recomputable_fraction) {
      marks[op] = Recomputable::kYes;
    } else if (writes && follower && unit(follower_rng) < options.recomputable_fraction) {
      marks[op] = Recomputable::kYes;
    }
    for (std::size_t i = offsets[op]; i < offsets[op + 1]; ++i) {
      if (by_op[i].kind == AccessKind::kWrite) {
        version_marked[static_cast<std::size_t>(by_op[i].storage)] = marks[op] != Recomputable::kNo;
      }
    }
  }
  return marks;
}

}  // namespace

Trace generate_random_trace(const RandomTraceOptions& options) {
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const OpIndex ops = std::max(0, options.op_count);
  const StorageIndex storages = ops == 0 ? 0 : std::max(0, options.storage_count);

  std::vector<PendingAccess> pending;
  pending.reserve(static_cast<std::size_t>(storages) * 4);
  std::vector<StorageInfo> infos(static_cast<std::size_t>(storages));
  const double log_min = std::log(static_cast<double>(std::max<std::int64_t>(1, options.min_size_bytes)));
  const double log_max = std::log(static_cast<double>(std::max(options.min_size_bytes, options.max_size_bytes)));
  std::uniform_int_distribution<int> extra_count(0, std::max(0, options.max_extra_accesses));
  std::uniform_int_distribution<OpIndex> any_op(0, std::max(0, ops - 1));

  for (StorageIndex s = 0; s < storages; ++s) {
    StorageInfo& info = infos[static_cast<std::size_t>(s)];
    info.id = s;
    if (unit(rng) < options.zero_size_fraction) {
      info.size_bytes = 0;
    } else {
      info.size_bytes = static_cast<std::int64_t>(std::exp(log_min + (log_max - log_min) * unit(rng)));
    }
    info.retention = unit(rng) < options.retained_fraction ? Retention::kRetained : Retention::kReleasable;

    OpIndex at = any_op(rng);
    pending.push_back({at, s, AccessKind::kWrite});
    const int extras = extra_count(rng);
    for (int e = 0; e < extras; ++e) {
      // Half the hops are short (1-3 ops), half are long jumps with a mean of a
      // tenth of the trace: both adjacent and long-interior gaps appear.
      double hop;
      if (unit(rng) < 0.5) {
        hop = 1.0 + std::floor(3.0 * unit(rng));
      } else {
        hop = 1.0 + std::floor(-std::log(1.0 - unit(rng)) * std::max(1.0, ops / 10.0));
      }
      if (static_cast<double>(at) + hop >= static_cast<double>(ops)) break;
      at += static_cast<OpIndex>(hop);
      const double roll = unit(rng);
      if (roll < options.in_place_fraction) {
        pending.push_back({at, s, AccessKind::kRead});
        pending.push_back({at, s, AccessKind::kWrite});
      } else {
        pending.push_back({at, s, roll < options.in_place_fraction + options.write_fraction ? AccessKind::kWrite
                                                                                            : AccessKind::kRead});
      }
    }
  }
  // Counting sort by op keeps each storage's accesses in order within an op.
  std::vector<std::size_t> offsets(static_cast<std::size_t>(ops) + 1, 0);
  for (const PendingAccess& p : pending) ++offsets[static_cast<std::size_t>(p.op) + 1];
  for (std::size_t i = 1; i < offsets.size(); ++i) offsets[i] += offsets[i - 1];
  std::vector<PendingAccess> by_op(pending.size());
  {
    std::vector<std::size_t> cursor(offsets.begin(), offsets.end() - 1);
    for (const PendingAccess& p : pending) by_op[cursor[static_cast<std::size_t>(p.op)]++] = p;
  }

  TraceBuilder builder;
  builder.reserve(static_cast<std::size_t>(ops), static_cast<std::size_t>(storages), by_op.size());
  builder.set_d2h_bandwidth_gib_per_s(options.bandwidth_gib_per_s);
  builder.set_h2d_bandwidth_gib_per_s(options.bandwidth_gib_per_s);
  for (const StorageInfo& info : infos) (void)builder.add_storage(info.id, info.size_bytes, info.retention);
  static const char* const kNames[] = {"aten::mm", "aten::add", "aten::gelu", "aten::layer_norm",
                                       "aten::softmax", "aten::mul", "aten::view", "aten::copy_"};
  std::uniform_int_distribution<int> name_pick(0, 7);
  const std::vector<Recomputable> recomputable = mark_recomputable(options, by_op, offsets, storages);
  for (OpIndex op = 0; op < ops; ++op) {
    (void)builder.add_op(kNames[name_pick(rng)], options.max_duration_ms * unit(rng),
                         recomputable[static_cast<std::size_t>(op)]);
    for (std::size_t i = offsets[static_cast<std::size_t>(op)]; i < offsets[static_cast<std::size_t>(op) + 1]; ++i) {
      builder.add_access(by_op[i].storage, by_op[i].kind);
    }
  }
  Trace trace = value_or_throw(std::move(builder).build());  // cannot fail: ids are 0..n-1
  if (options.limit_fraction) {
    const PeakBytes peak = unplanned_peak(trace);
    trace.set_memory_limit_bytes(
        static_cast<std::int64_t>(std::floor(static_cast<double>(peak.bytes) * *options.limit_fraction)));
  }
  return trace;
}

}  // namespace hyperoffload
