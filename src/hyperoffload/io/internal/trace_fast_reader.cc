#include "hyperoffload/io/internal/trace_fast_reader.h"

#include <simdjson.h>

#include <array>
#include <charconv>
#include <cstdint>
#include <future>
#include <new>
#include <stdexcept>

#include "hyperoffload/io/trace_json.h"

namespace hyperoffload::internal {
namespace {

// A cursor over the document. Every method returns false when the text is not
// in the accepted subset (Note [Two trace readers]); the reader then stops.
class Cursor {
 public:
  explicit Cursor(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  bool at_end() {
    skip_space();
    return p_ == end_;
  }

  // Consumes `c` after optional whitespace.
  bool expect(char c) {
    skip_space();
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }

  // Consumes `c` after optional whitespace if it is next.
  bool accept(char c) {
    skip_space();
    if (p_ != end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }

  // A string without escapes or control characters (the document's UTF-8
  // was validated as a whole).
  bool string(std::string_view* out) {
    if (!expect('"')) return false;
    const char* start = p_;
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *out = std::string_view(start, static_cast<std::size_t>(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\' || c < 0x20) return false;
      ++p_;
    }
    return false;
  }

  // A member's key and the colon after it.
  bool key(std::string_view* out) { return string(out) && expect(':'); }

  // A non-negative integer of at most 18 digits (so it fits int64), with no
  // fraction or exponent, in JSON's grammar (no leading zeros).
  bool integer(std::int64_t* out) {
    skip_space();
    const char* start = p_;
    std::uint64_t value = 0;  // 19 digits fit: the check below comes after
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9' && p_ - start < 19) {
      value = value * 10 + static_cast<std::uint64_t>(*p_ - '0');
      ++p_;
    }
    const std::ptrdiff_t digits = p_ - start;
    if (digits == 0 || digits > 18 || (digits > 1 && *start == '0')) return false;
    if (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    *out = static_cast<std::int64_t>(value);
    return true;
  }

  // A JSON number as a double, correctly rounded (as simdjson rounds it; an
  // integer of at most 18 digits converts exactly as the DOM reader's int64
  // does). Out of range: not accepted.
  bool number(double* out) {
    skip_space();
    const char* start = p_;
    if (p_ != end_ && *p_ == '-') ++p_;
    const char* int_start = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    const std::ptrdiff_t int_digits = p_ - int_start;
    if (int_digits == 0 || (int_digits > 1 && *int_start == '0')) return false;
    bool is_integer = true;
    if (p_ != end_ && *p_ == '.') {
      ++p_;
      const char* fraction = p_;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      if (p_ == fraction) return false;
      is_integer = false;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      const char* exponent = p_;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      if (p_ == exponent) return false;
      is_integer = false;
    }
    // Larger integers are uint64 or big integers to simdjson; leave them to it.
    if (is_integer && int_digits > 18) return false;
    const std::from_chars_result parsed = std::from_chars(start, p_, *out);
    return parsed.ec == std::errc() && parsed.ptr == p_;
  }

  bool boolean(bool* out) {
    skip_space();
    if (literal("true")) {
      *out = true;
      return true;
    }
    if (literal("false")) {
      *out = false;
      return true;
    }
    return false;
  }

  bool null() {
    skip_space();
    return literal("null");
  }

  // After a member or element: true and `*more` when a comma follows, true
  // and !*more when `close` does.
  bool next(char close, bool* more) {
    skip_space();
    if (p_ == end_) return false;
    if (*p_ == ',') {
      ++p_;
      *more = true;
      return true;
    }
    if (*p_ == close) {
      ++p_;
      *more = false;
      return true;
    }
    return false;
  }

  bool peek_null() {
    skip_space();
    return p_ != end_ && *p_ == 'n';
  }

  // The text from here to the end.
  std::string_view rest() const { return {p_, static_cast<std::size_t>(end_ - p_)}; }

  // Where the cursor is, and a jump to a point of the same text another
  // cursor read up to.
  const char* position() const { return p_; }
  void jump_to(const char* position) { p_ = position; }
  // Where the next token starts (the whitespace before it consumed).
  const char* token() {
    skip_space();
    return p_;
  }

  // Any JSON value, not kept: a member the format does not define (the
  // "meta" of captured traces). Gives up on \u escapes (simdjson checks
  // their surrogates) and on nesting deeper than `depth_left`.
  bool skip_value(int depth_left) {
    skip_space();
    if (p_ == end_) return false;
    switch (*p_) {
      case '"': return skip_string();
      case '{': {
        if (depth_left == 0) return false;
        ++p_;
        if (accept('}')) return true;
        for (bool more = true; more;) {
          if (!skip_string() || !expect(':') || !skip_value(depth_left - 1) || !next('}', &more)) return false;
        }
        return true;
      }
      case '[': {
        if (depth_left == 0) return false;
        ++p_;
        if (accept(']')) return true;
        for (bool more = true; more;) {
          if (!skip_value(depth_left - 1) || !next(']', &more)) return false;
        }
        return true;
      }
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default: {
        double ignored = 0.0;
        return number(&ignored);
      }
    }
  }

 private:
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  // `word`, followed by a character that cannot continue a literal. Consumes
  // nothing when it fails: boolean() tries "false" where "true" failed, and
  // "truefalse" must not read as false.
  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    const char* after = p_ + word.size();
    if (after != end_ && ((*after >= 'a' && *after <= 'z') || (*after >= '0' && *after <= '9'))) return false;
    p_ = after;
    return true;
  }

  // A string with the escapes JSON allows, except \u.
  bool skip_string() {
    if (!expect('"')) return false;
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_++);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c == '\\') {
        if (p_ == end_) return false;
        const char escaped = *p_++;
        if (std::string_view("\"\\/bfnrt").find(escaped) == std::string_view::npos) return false;
      }
    }
    return false;
  }

  const char* p_;
  const char* end_;
};

// The deepest a skipped member's value may nest, well inside the DOM
// reader's limit (json_reader.h, kMaxJsonDepth).
constexpr int kMaxSkippedDepth = 32;

// Members of an object `{...}` in turn: calls `member(key)` for each, which
// reads the value. Empty objects are accepted.
template <typename Member>
bool members(Cursor& in, Member&& member) {
  if (!in.expect('{')) return false;
  if (in.accept('}')) return true;
  for (bool more = true; more;) {
    std::string_view key;
    if (!in.key(&key) || !member(key) || !in.next('}', &more)) return false;
  }
  return true;
}

// The elements of an array from the start of one of them through the
// closing ']'.
template <typename Element>
bool elements_from(Cursor& in, Element&& element) {
  for (bool more = true; more;) {
    if (!element() || !in.next(']', &more)) return false;
  }
  return true;
}

// Elements of an array `[...]` in turn.
template <typename Element>
bool elements(Cursor& in, Element&& element) {
  if (!in.expect('[')) return false;
  if (in.accept(']')) return true;
  return elements_from(in, element);
}

bool read_storage(Cursor& in, TraceBuilder& builder) {
  std::int64_t id = 0, size_bytes = 0;
  bool retained = false;
  unsigned seen = 0;  // bit per member: id, size_bytes, retained
  auto once = [&seen](unsigned bit) {
    if (seen & bit) return false;  // a duplicate: the DOM reader takes the first
    seen |= bit;
    return true;
  };
  const bool read = members(in, [&](std::string_view key) {
    if (key == "id") return once(1) && in.integer(&id);
    if (key == "size_bytes") return once(2) && in.integer(&size_bytes);
    if (key == "retained") return once(4) && in.boolean(&retained);
    return false;
  });
  if (!read || (seen & 3) != 3) return false;
  return builder.add_storage(id, size_bytes, retained ? Retention::kRetained : Retention::kReleasable).has_value();
}

bool read_access(Cursor& in, TraceBuilder& builder) {
  std::int64_t storage = 0;
  std::string_view kind;
  unsigned seen = 0;
  const bool read = members(in, [&](std::string_view key) {
    if (key == "storage" && !(seen & 1)) {
      seen |= 1;
      return in.integer(&storage);
    }
    if (key == "kind" && !(seen & 2)) {
      seen |= 2;
      return in.string(&kind);
    }
    return false;
  });
  if (!read || seen != 3) return false;
  if (kind == "read") {
    builder.add_access(storage, AccessKind::kRead);
  } else if (kind == "write") {
    builder.add_access(storage, AccessKind::kWrite);
  } else {
    return false;
  }
  return true;
}

bool read_op(Cursor& in, TraceBuilder& builder, std::int64_t version) {
  std::string_view name;
  double duration_ms = 0.0;
  bool recomputable = false, rng_replay = false;
  unsigned seen = 0;  // name, duration_ms, recomputable, rng_replay, accesses
  bool added = false;
  // The op is added when its accesses start (they must come last) or at its
  // end; the DOM reader's checks of the flags, here as "not accepted".
  auto add = [&] {
    if ((seen & 4) && version < 2) return false;
    if ((seen & 8) && version < 3) return false;
    if (rng_replay && !recomputable) return false;
    const Recomputable kind = rng_replay      ? Recomputable::kWithRngReplay
                              : recomputable ? Recomputable::kYes
                                             : Recomputable::kNo;
    added = true;
    return builder.add_op(name, duration_ms, kind).has_value();
  };
  auto once = [&seen](unsigned bit) {
    if (seen & bit) return false;
    seen |= bit;
    return true;
  };
  const bool read = members(in, [&](std::string_view key) {
    if (seen & 16) return false;  // a member after "accesses"
    if (key == "name") return once(1) && in.string(&name);
    if (key == "duration_ms") return once(2) && in.number(&duration_ms);
    if (key == "recomputable") return once(4) && in.boolean(&recomputable);
    if (key == "rng_replay") return once(8) && in.boolean(&rng_replay);
    if (key == "accesses") {
      return once(16) && add() && elements(in, [&] { return read_access(in, builder); });
    }
    return false;
  });
  return read && (added || add());
}

// Note [Room for the ops before reading them]
// The builder's arrays of storages, ops and accesses grow by doubling: on the
// 1M-op chain trace they end at 140 MB, and each doubling copies what was
// read into memory never touched before (a page fault per 4 KiB,
// microseconds each on a virtual machine). So before a large array of
// storages or ops (8 MiB of text or more) the builder reserves room for what
// its first MiB extrapolates to, plus a sixteenth. An estimate too low costs
// a doubling as before; one too high costs address space only (pages never
// written are never faulted in). The storages' estimate extrapolates over the
// rest of the document, ops included (where the array ends is not known
// before reading it): too high by the ops' share, at most about the size of
// the text in address space. `plan --planner greedy` on the chain: 203,905
// -> 189,260 page faults with the ops' room, 161,369 with the storages' too;
// reading it about 555-595 -> 500-520 ms (three interleaved rounds).
//
// Text from which an array is large: room is reserved before it, and the
// storages are read beside the ops (Note [Storages and ops read at once]).
constexpr std::size_t kLargeTextBytes = std::size_t{8} << 20;

// How many of each of `keys` the array starting `text` holds, extrapolated
// from its first MiB (+1/16); zeros below kLargeTextBytes of text.
template <std::size_t N>
std::array<std::size_t, N> extrapolate(std::string_view text, const std::array<std::string_view, N>& keys) {
  constexpr std::size_t kSampleBytes = std::size_t{1} << 20;
  std::array<std::size_t, N> counts{};
  if (text.size() < kLargeTextBytes) return counts;
  const std::string_view sample = text.substr(0, kSampleBytes);
  const double scale = static_cast<double>(text.size()) / static_cast<double>(sample.size()) * (1.0 + 1.0 / 16);
  for (std::size_t k = 0; k < N; ++k) {
    std::size_t found = 0;
    for (std::size_t at = sample.find(keys[k]); at != std::string_view::npos;
         at = sample.find(keys[k], at + keys[k].size())) {
      ++found;
    }
    counts[k] = static_cast<std::size_t>(static_cast<double>(found) * scale);
  }
  return counts;
}

// Reserves room as a hint: where the address space is refused (an estimate
// too high on a machine short of memory), the arrays grow as they would
// without it.
void reserve_room(TraceBuilder& builder, std::size_t ops, std::size_t storages, std::size_t accesses) {
  try {
    builder.reserve(ops, storages, accesses);
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
}

// Room for the ops array starting `text` (Note [Room for the ops before
// reading them]).
void reserve_for_ops(std::string_view text, TraceBuilder& builder) {
  const auto [ops, accesses] = extrapolate<2>(text, {"\"accesses\"", "\"storage\""});
  reserve_room(builder, ops, 0, accesses);
}

// Note [Storages and ops read at once]
// A large trace's storages and ops are read on two threads: nothing about an
// op depends on the storages until the builder resolves its accesses' ids in
// build(), and the core the plan will use is idle while the trace is read.
// When the reader reaches the storages (the header's format and version
// read, 8 MiB of text or more left), a second thread finds the ops' key and
// reads the ops into the builder, while this one reads the storages into a
// builder of their own, given to the first after both. The split is checked:
// the member after the storages must be "ops" exactly where the second
// thread started, or the reader stops (and the DOM reader reads the file);
// where it found no key, the ops are read here after the storages.
// The key is found by its first 'o': the storages, in the accepted subset,
// hold none (their keys are "id", "size_bytes" and "retained", their values
// integers and booleans), so it is found after a quick scan. On the 1M-op
// chain the storages are 124 of its 405 MB, and the ops were then the longer
// path (310–357 ms against 110–160), so the ops are split too: the second
// thread stops at an op that starts a line (op_line_after) past as much of
// the ops as the storages plus the rest of the ops take to read (a storage's
// byte counted as three quarters of an op's), and this thread, after the
// storages, reads the ops from that op on into a third builder, whose ops
// the first then takes (TraceBuilder::take_ops: the calls adding them there
// would have made, names interned in order). That split is checked too: the
// second thread must meet it at the start of an element of the ops array;
// where it does not (the line is somewhere else), it reads every op and what
// was read from the line is dropped. The same trace, byte for byte, as one
// thread reads it: the ops and storages are added to the first builder in
// the same order (the taken ops through the same calls), and the room
// reserved there is the same. On the chain, parse 447–499 → 341–455 ms and
// on the 1M-op random trace 408–440 → 278–381 ms (interleaved rounds).
//
// The ops read by the second thread: whether they were read, where their
// value started (after the key's colon) and where the cursor ended.
struct OpsRead {
  bool read = false;
  const char* value = nullptr;
  const char* end = nullptr;
  bool reached_split = false;  // stopped at the split, the ops from it left to the first thread
};

// Where to split a large trace's ops between the threads: the first op that
// starts a line (`\n`, spaces, `{"name"`) at or after `target` in `text`,
// within a MiB of it; null when there is none. A raw newline cannot be
// inside a JSON string, so that brace starts an object whose first key is
// "name": in the accepted subset, an op. (Whether it is an element of the
// ops array is checked: the thread reading the ops must meet it.)
const char* op_line_after(std::string_view text, std::size_t target) {
  constexpr std::size_t kSearchBytes = std::size_t{1} << 20;
  constexpr std::string_view kOpStart = "{\"name\"";
  const std::size_t limit = std::min(text.size(), target + kSearchBytes);
  for (std::size_t at = text.find('\n', target); at != std::string_view::npos && at < limit;
       at = text.find('\n', at + 1)) {
    std::size_t start = at + 1;
    while (start < text.size() && text[start] == ' ') ++start;
    if (text.substr(start, kOpStart.size()) == kOpStart) return text.data() + start;
  }
  return nullptr;
}

// The ops array, as elements() reads it, but stopping at the element that
// starts at `split` (when not null), with *reached_split set.
bool ops_until(Cursor& in, TraceBuilder& builder, std::int64_t version, const char* split, bool* reached_split) {
  if (!in.expect('[')) return false;
  if (in.accept(']')) return true;
  for (bool more = true; more;) {
    if (split != nullptr && in.token() == split) {
      *reached_split = true;
      return true;
    }
    if (!read_op(in, builder, version) || !in.next(']', &more)) return false;
  }
  return true;
}

// Where the value of the first `"ops":` in `text` starts (after the colon);
// null when there is none.
const char* ops_value(std::string_view text) {
  constexpr std::string_view kKey = "\"ops\":";
  for (std::size_t at = text.find('o'); at != std::string_view::npos; at = text.find('o', at + 1)) {
    if (at >= 1 && text.substr(at - 1, kKey.size()) == kKey) return text.data() + at - 1 + kKey.size();
  }
  return nullptr;
}

}  // namespace

std::optional<Trace> read_trace_fast(std::string_view json) {
  // simdjson reads documents up to 4 GiB; a larger one is its error to name.
  if (json.size() > simdjson::SIMDJSON_MAXSIZE_BYTES) return std::nullopt;
  if (!simdjson::validate_utf8(json.data(), json.size())) return std::nullopt;
  Cursor in(json);
  TraceBuilder builder;
  // Note [Storages and ops read at once]: the storages read beside the ops,
  // and the ops' thread (joined before the builders go).
  TraceBuilder storages;
  // Where this thread takes the ops over, as the other thread finds it
  // (Note [Storages and ops read at once]); declared before that thread's
  // future, which joins it, so that it outlives the thread.
  std::promise<const char*> split_found;
  std::future<const char*> split = split_found.get_future();
  std::future<OpsRead> ops_beside;
  std::int64_t version = 0;
  unsigned seen = 0;  // format, version, limit, host limit, d2h, h2d, storages, ops
  auto once = [&seen](unsigned bit) {
    if (seen & bit) return false;
    seen |= bit;
    return true;
  };
  auto limit = [&](auto set) {
    if (in.peek_null()) return in.null();
    std::int64_t bytes = 0;
    if (!in.integer(&bytes)) return false;
    set(bytes);
    return true;
  };
  auto bandwidth = [&](auto set) {
    double value = 0.0;
    if (!in.number(&value) || !(value > 0.0)) return false;
    set(value);
    return true;
  };
  const bool read = members(in, [&](std::string_view key) {
    // Note [Storages and ops read at once]: the ops come right after the
    // storages read beside them (nothing else touches the builder while the
    // ops' thread fills it).
    if (ops_beside.valid() && key != "ops") return false;
    if (key == "format") {
      std::string_view format;
      return once(1) && in.string(&format) && format == kTraceFormat;
    }
    if (key == "version") {
      return once(2) && in.integer(&version) && version >= kOldestTraceVersion && version <= kTraceVersion;
    }
    if (key == "memory_limit_bytes") {
      return once(4) && limit([&](std::int64_t bytes) { builder.set_memory_limit_bytes(bytes); });
    }
    if (key == "host_memory_limit_bytes") {
      return once(8) && limit([&](std::int64_t bytes) { builder.set_host_memory_limit_bytes(bytes); });
    }
    if (key == "d2h_bandwidth_gbps") {
      return once(16) && bandwidth([&](double value) { builder.set_d2h_bandwidth_gib_per_s(value); });
    }
    if (key == "h2d_bandwidth_gbps") {
      return once(32) && bandwidth([&](double value) { builder.set_h2d_bandwidth_gib_per_s(value); });
    }
    if (key == "storages") {
      if (!once(64)) return false;
      TraceBuilder* into = &builder;
      if ((seen & 3) == 3 && in.rest().size() >= kLargeTextBytes) {
        ops_beside = std::async(std::launch::async, [rest = in.rest(), &builder, version, &split_found]() {
          OpsRead ops;
          ops.value = ops_value(rest);
          if (ops.value == nullptr) {
            split_found.set_value(nullptr);
            return ops;
          }
          // The ops from the split on go to the other thread after the
          // storages: about as much work each (Note [Storages and ops read
          // at once]).
          const std::string_view ops_text(ops.value, static_cast<std::size_t>(rest.data() + rest.size() - ops.value));
          const auto storages_bytes = static_cast<std::size_t>(ops.value - rest.data());
          const char* const split_at = op_line_after(ops_text, (ops_text.size() + storages_bytes * 3 / 4) / 2);
          split_found.set_value(split_at);
          Cursor at(ops_text);
          reserve_for_ops(at.rest(), builder);
          ops.read = ops_until(at, builder, version, split_at, &ops.reached_split);
          ops.end = at.position();
          return ops;
        });
        into = &storages;
      }
      // Note [Room for the ops before reading them].
      reserve_room(*into, 0, extrapolate<1>(in.rest(), {"\"id\""})[0], 0);
      return elements(in, [&] { return read_storage(in, *into); });
    }
    if (key == "ops") {
      // The ops' checks need the header, and their accesses the storages.
      if ((seen & 67) != 67) return false;
      if (ops_beside.valid()) {
        // The ops from the split on, read here while the other thread reads
        // those before it; used only when that thread met the split.
        TraceBuilder tail;
        bool tail_read = false;
        const char* tail_end = nullptr;
        if (const char* const from = split.get(); from != nullptr) {
          Cursor at(std::string_view(from, static_cast<std::size_t>(in.rest().data() + in.rest().size() - from)));
          reserve_for_ops(at.rest(), tail);
          tail_read = elements_from(at, [&] { return read_op(at, tail, version); });
          tail_end = at.position();
        }
        const OpsRead ops = ops_beside.get();
        builder.take_storages(std::move(storages));
        // Read there (and here from the split), or (no `"ops":` found,
        // nothing added) read here.
        if (ops.value != nullptr) {
          if (!ops.read || in.position() != ops.value) return false;
          if (ops.reached_split) {
            if (!tail_read || !builder.take_ops(std::move(tail)).has_value()) return false;
            in.jump_to(tail_end);
          } else {
            in.jump_to(ops.end);
          }
          return once(128);
        }
      }
      reserve_for_ops(in.rest(), builder);
      return once(128) && elements(in, [&] { return read_op(in, builder, version); });
    }
    // The DOM reader ignores other members (it takes the first of duplicates,
    // which skipping both agrees with).
    return in.skip_value(kMaxSkippedDepth);
  });
  if (!read || !in.at_end() || (seen & 195) != 195) return std::nullopt;
  Result<Trace> trace = std::move(builder).build();
  if (!trace) return std::nullopt;
  return std::move(*trace);
}

}  // namespace hyperoffload::internal
