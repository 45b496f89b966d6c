// Shared pieces of the libFuzzer harnesses (docs/FUZZING.md).
//
//  - FUZZ_CHECK(condition, format, args...): an invariant. When it does not hold
//    the harness prints the message and aborts, which libFuzzer reports as a
//    crash and saves the input for.
//  - decode_trace(): structure-aware input. Turns the fuzzer's bytes into a
//    valid trace (every access names a declared storage, recomputable only where
//    the format allows it), so harnesses that test planners, the validator, the
//    simulator and the runtime spend their time there rather than in the parser.
//    Sizes, ids, durations and bandwidths are drawn from ranges that include the
//    edges (0, huge, sparse ids, tiny and huge bandwidths).
//  - error_names_a_place(): the parsers' contract that every error message starts
//    with a JSON path or with "<source>:<line>:<column>".
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"

#define FUZZ_CHECK(condition, ...)                                                               \
  do {                                                                                           \
    if (!(condition)) ::hyperoffload::fuzz::fail(__FILE__, __LINE__, #condition, fmt::format(__VA_ARGS__)); \
  } while (false)

namespace hyperoffload::fuzz {

[[noreturn]] inline void fail(const char* file, int line, const char* condition, const std::string& message) {
  std::fprintf(stderr, "\n%s:%d: invariant violated: %s\n  %s\n", file, line, condition, message.c_str());
  std::fflush(stderr);
  std::abort();
}

// Whether `message` starts with a JSON path ("ops[3].accesses[0].kind: ...",
// "(document): ...", "storages: ...") or with "<source>:<line>:<column>: ".
inline bool error_names_a_place(std::string_view message, std::string_view source) {
  if (message.starts_with(source) && message.size() > source.size() && message[source.size()] == ':') {
    std::string_view rest = message.substr(source.size() + 1);
    // "<source>: document too large ..." has no position; every other error has line:column.
    if (rest.starts_with(" document too large")) return true;
    for (int field = 0; field < 2; ++field) {
      std::size_t digits = 0;
      while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
      if (digits == 0 || digits >= rest.size() || rest[digits] != ':') return false;
      rest.remove_prefix(digits + 1);
    }
    return rest.starts_with(" ");
  }
  if (message.starts_with("(document): ")) return true;
  // path := key ('[' digits ']')* ('.' key ('[' digits ']')*)* ': '
  std::size_t i = 0;
  auto key = [&] {
    const std::size_t begin = i;
    while (i < message.size() && ((message[i] >= 'a' && message[i] <= 'z') || message[i] == '_' ||
                                  (message[i] >= '0' && message[i] <= '9'))) {
      ++i;
    }
    return i > begin;
  };
  auto indices = [&] {
    while (i < message.size() && message[i] == '[') {
      const std::size_t begin = ++i;
      while (i < message.size() && message[i] >= '0' && message[i] <= '9') ++i;
      if (i == begin || i >= message.size() || message[i] != ']') return false;
      ++i;
    }
    return true;
  };
  if (!key() || !indices()) return false;
  while (i < message.size() && message[i] == '.') {
    ++i;
    if (!key() || !indices()) return false;
  }
  return message.substr(i).starts_with(": ");
}

struct TraceShape {
  int max_ops = 24;
  int max_storages = 16;
  int max_accesses_per_op = 5;
  // Sizes are drawn up to this; the runtime harness keeps them small because
  // it allocates them.
  std::int64_t max_size_bytes = std::int64_t{1} << 40;
  // Whether durations and bandwidths may take extreme values (subnormal,
  // 1e300): those the trace limits reject make decode_trace return nullopt.
  bool extreme_times = true;
  // Whether the trace must be replayable (exec/replay_guide.h), as the
  // runtime needs: each storage first appears as one write, and its first op
  // touches it only there (a step produces every storage it tracks).
  bool replayable = false;
};

inline double pick_duration_ms(FuzzedDataProvider& in, bool extreme) {
  switch (in.ConsumeIntegralInRange<int>(0, extreme ? 5 : 2)) {
    case 0: return 0.0;
    case 1: return in.ConsumeFloatingPointInRange<double>(0.0, 2.0);
    case 2: return static_cast<double>(in.ConsumeIntegralInRange<int>(0, 1000)) * 0.125;
    case 3: return in.ConsumeFloatingPointInRange<double>(0.0, 1e12);
    case 4: return 5e-324 * static_cast<double>(in.ConsumeIntegralInRange<int>(1, 4));  // subnormal
    default: return in.ConsumeFloatingPointInRange<double>(0.0, 1e308);
  }
}

inline double pick_bandwidth(FuzzedDataProvider& in, bool extreme) {
  switch (in.ConsumeIntegralInRange<int>(0, extreme ? 4 : 1)) {
    case 0: return kDefaultBandwidthGiBPerS;
    case 1: return in.ConsumeFloatingPointInRange<double>(0.001, 64.0);
    case 2: return in.ConsumeFloatingPointInRange<double>(1e-12, 1e-3);
    case 3: return in.ConsumeFloatingPointInRange<double>(1e3, 1e300);
    default: return 5e-324 * static_cast<double>(in.ConsumeIntegralInRange<int>(1, 1000));
  }
}

inline std::int64_t pick_size_bytes(FuzzedDataProvider& in, std::int64_t max_size_bytes) {
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: return 0;
    case 1: return in.ConsumeIntegralInRange<std::int64_t>(1, std::min<std::int64_t>(64, max_size_bytes));
    case 2: return in.ConsumeIntegralInRange<std::int64_t>(1, std::min<std::int64_t>(1 << 16, max_size_bytes));
    case 3: return std::int64_t{1} << in.ConsumeIntegralInRange<int>(0, 62);  // capped below
    default: return in.ConsumeIntegralInRange<std::int64_t>(0, max_size_bytes);
  }
}

// A valid trace from the fuzzer's bytes, or nullopt when the builder rejects
// what was drawn (a total above the trace limits). Storages are declared in
// random id order; ops access them at random.
inline std::optional<Trace> decode_trace(FuzzedDataProvider& in, const TraceShape& shape) {
  TraceBuilder builder;
  const int storages = in.ConsumeIntegralInRange<int>(0, shape.max_storages);
  const int ops = in.ConsumeIntegralInRange<int>(0, shape.max_ops);
  const int id_style = in.ConsumeIntegralInRange<int>(0, 2);  // dense, shuffled, sparse
  std::vector<StorageId> ids;
  std::int64_t total_bytes = 0;
  for (int s = 0; s < storages; ++s) {
    StorageId id = s;
    if (id_style == 1) id = (static_cast<StorageId>(s) * 7 + 3) % (storages + 5) + storages * (s % 2);
    if (id_style == 2) id = in.ConsumeIntegralInRange<StorageId>(0, std::int64_t{1} << 62);
    bool duplicate = false;
    for (StorageId other : ids) duplicate = duplicate || other == id;
    if (duplicate) id = (ids.empty() ? 0 : ids.back()) + storages + 1;
    std::int64_t size = std::min(pick_size_bytes(in, shape.max_size_bytes), shape.max_size_bytes);
    size = std::min(size, TraceBuilder::kMaxTotalStorageBytes - total_bytes);
    total_bytes += size;
    const Retention retention = in.ConsumeBool() ? Retention::kRetained : Retention::kReleasable;
    if (!builder.add_storage(id, size, retention)) return std::nullopt;
    ids.push_back(id);
  }
  builder.set_d2h_bandwidth_gib_per_s(pick_bandwidth(in, shape.extreme_times));
  builder.set_h2d_bandwidth_gib_per_s(in.ConsumeBool() ? pick_bandwidth(in, shape.extreme_times)
                                                       : kDefaultBandwidthGiBPerS);
  std::vector<OpIndex> first_op(static_cast<std::size_t>(storages), -1);
  static constexpr const char* kNames[] = {"aten::mm", "aten::relu", "", "op \"quoted\"\n", "aten::add_"};
  for (int op = 0; op < ops; ++op) {
    struct Drawn {
      int storage;
      AccessKind kind;
    };
    std::vector<Drawn> accesses;
    const int count = storages == 0 ? 0 : in.ConsumeIntegralInRange<int>(0, shape.max_accesses_per_op);
    for (int a = 0; a < count; ++a) {
      Drawn d{in.ConsumeIntegralInRange<int>(0, storages - 1), in.ConsumeBool() ? AccessKind::kWrite : AccessKind::kRead};
      if (shape.replayable && first_op[static_cast<std::size_t>(d.storage)] < 0) {
        bool seen_here = false;
        for (const Drawn& other : accesses) seen_here = seen_here || other.storage == d.storage;
        if (seen_here) continue;
        d.kind = AccessKind::kWrite;
      }
      accesses.push_back(d);
    }
    // Recomputable only where the builder allows it: writes at least one
    // storage, each created here and not also read here.
    bool eligible = false;
    for (const Drawn& w : accesses) {
      if (w.kind != AccessKind::kWrite) continue;
      eligible = true;
      const OpIndex first = first_op[static_cast<std::size_t>(w.storage)];
      bool read_here = false;
      for (const Drawn& r : accesses) read_here = read_here || (r.storage == w.storage && r.kind == AccessKind::kRead);
      if ((first >= 0 && first != op) || read_here) {
        eligible = false;
        break;
      }
    }
    const Recomputable recomputable = eligible && in.ConsumeBool() ? Recomputable::kYes : Recomputable::kNo;
    const char* name = kNames[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kNames) - 1)];
    if (!builder.add_op(name, pick_duration_ms(in, shape.extreme_times), recomputable)) return std::nullopt;
    for (const Drawn& d : accesses) {
      builder.add_access(ids[static_cast<std::size_t>(d.storage)], d.kind);
      OpIndex& first = first_op[static_cast<std::size_t>(d.storage)];
      if (first < 0) first = op;
    }
  }
  Result<Trace> trace = std::move(builder).build();
  if (!trace) return std::nullopt;
  return std::move(*trace);
}

// A budget for `trace`: none, a fraction of the unplanned peak (mostly), 0, or
// any byte count.
inline std::optional<std::int64_t> decode_budget(FuzzedDataProvider& in, const Trace& trace) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: return std::nullopt;
    case 1: return 0;
    case 2: return in.ConsumeIntegralInRange<std::int64_t>(0, std::numeric_limits<std::int64_t>::max());
    default: {
      const double fraction = in.ConsumeFloatingPointInRange<double>(0.0, 1.2);
      return static_cast<std::int64_t>(fraction * static_cast<double>(unplanned_peak(trace).bytes));
    }
  }
}

}  // namespace hyperoffload::fuzz
