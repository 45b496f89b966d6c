#include "hyperoffload/io/timeline_json.h"

#include <array>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hyperoffload {
namespace {

// Note [Trace-event layout]: one process (pid 1) with a thread per lane —
// compute (tid 1), copy engine 0 (tid 2), copy engine 1 (tid 3) — holding
// complete ("X") events, and a process-level counter ("C") named "device memory"
// with two series, allocated_bytes and budget_bytes. Chrome's format counts time
// in microseconds; fractions are allowed. The document is written directly
// rather than through a JSON DOM because a 1M-op step has millions of events.
constexpr int kPid = 1;

int tid_of(Lane lane) { return static_cast<int>(lane) + 1; }

// A JSON string literal; bytes that are not UTF-8 become U+FFFD rather than an
// error, because op names come from user files.
std::string json_string(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

double to_us(double ms) { return ms * 1000.0; }

const char* kind_name(SpanKind kind) {
  switch (kind) {
    case SpanKind::kOp: return "op";
    case SpanKind::kStall: return "stall";
    case SpanKind::kFault: return "fault";
    case SpanKind::kCopyD2H: return "D2H";
    case SpanKind::kCopyH2D: return "H2D";
    case SpanKind::kRecompute: return "recompute";
  }
  return "?";
}

std::string lane_name(Lane lane, bool has_d2h, bool has_h2d) {
  if (lane == Lane::kCompute) return "compute";
  std::string name = fmt::format("copy engine {}", lane == Lane::kCopy0 ? 0 : 1);
  if (has_d2h && has_h2d) return name + " (D2H, H2D)";
  if (has_d2h) return name + " (D2H)";
  if (has_h2d) return name + " (H2D)";
  return name;
}

}  // namespace

std::string timeline_to_chrome_json(const Trace& trace, const Timeline& timeline) {
  std::array<bool, 3> lane_used = {true, false, false};  // the compute track is always drawn
  std::array<bool, 3> lane_d2h = {false, false, false};
  std::array<bool, 3> lane_h2d = {false, false, false};
  for (const TimelineSpan& span : timeline.spans) {
    const auto lane = static_cast<std::size_t>(span.lane);
    lane_used[lane] = true;
    lane_d2h[lane] = lane_d2h[lane] || span.kind == SpanKind::kCopyD2H;
    lane_h2d[lane] = lane_h2d[lane] || span.kind == SpanKind::kCopyH2D;
  }
  std::vector<std::string> op_names;
  op_names.reserve(trace.op_names().size());
  for (const std::string_view name : trace.op_names()) op_names.push_back(json_string(name));

  fmt::memory_buffer out;
  out.reserve(160 * (timeline.spans.size() + timeline.memory.size()) + 1024);
  fmt::appender it(out);
  auto append = [&](std::string_view text) { out.append(text); };
  bool first = true;
  auto begin_event = [&] {
    append(first ? "\n" : ",\n");
    first = false;
  };

  append("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  begin_event();
  fmt::format_to(it, R"({{"ph":"M","pid":{},"name":"process_name","args":{{"name":"hyperoffload"}}}})", kPid);
  for (const Lane lane : {Lane::kCompute, Lane::kCopy0, Lane::kCopy1}) {
    const auto index = static_cast<std::size_t>(lane);
    if (!lane_used[index]) continue;
    begin_event();
    fmt::format_to(it, R"({{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{"name":{}}}}})", kPid,
                   tid_of(lane), json_string(lane_name(lane, lane_d2h[index], lane_h2d[index])));
    begin_event();
    fmt::format_to(it, R"({{"ph":"M","pid":{},"tid":{},"name":"thread_sort_index","args":{{"sort_index":{}}}}})",
                   kPid, tid_of(lane), index);
  }

  for (const TimelineSpan& span : timeline.spans) {
    begin_event();
    const double ts = to_us(span.start_ms);
    const double dur = to_us(span.end_ms - span.start_ms);
    const int tid = tid_of(span.lane);
    switch (span.kind) {
      case SpanKind::kOp: {
        const bool known = span.op >= 0 && span.op < trace.op_count();
        fmt::format_to(it, R"({{"ph":"X","pid":{},"tid":{},"cat":"op","name":{},"ts":{},"dur":{},"args":{{"op":{}}}}})",
                       kPid, tid, known ? std::string_view(op_names[trace.op_name_index(span.op)]) : "\"op\"", ts, dur,
                       span.op);
        break;
      }
      case SpanKind::kRecompute: {
        // Named after the op re-run, so it reads as a second run of that op.
        const bool known = span.op >= 0 && span.op < trace.op_count();
        const std::string name = json_string(
            fmt::format("recompute {}", known ? std::string(trace.op_name(span.op)) : fmt::format("op {}", span.op)));
        fmt::format_to(it,
                       R"({{"ph":"X","pid":{},"tid":{},"cat":"recompute","name":{},"ts":{},"dur":{},)"
                       R"("args":{{"op":{},"bytes":{}}}}})",
                       kPid, tid, name, ts, dur, span.op, span.bytes);
        break;
      }
      case SpanKind::kStall:
        fmt::format_to(it,
                       R"({{"ph":"X","pid":{},"tid":{},"cat":"stall","name":"stall","ts":{},"dur":{},"args":{{"op":{}}}}})",
                       kPid, tid, ts, dur, span.op);
        break;
      case SpanKind::kFault:
      case SpanKind::kCopyD2H:
      case SpanKind::kCopyH2D:
        fmt::format_to(it,
                       R"({{"ph":"X","pid":{},"tid":{},"cat":"{}","name":"{} storage {}","ts":{},"dur":{},)"
                       R"("args":{{"op":{},"storage":{},"bytes":{}}}}})",
                       kPid, tid, span.kind == SpanKind::kFault ? "fault" : "copy", kind_name(span.kind),
                       span.storage, ts, dur, span.op, span.storage, span.bytes);
        break;
    }
  }

  // The counter starts at zero so the track begins with the step.
  auto counter = [&](double time_ms, std::int64_t bytes) {
    begin_event();
    if (timeline.budget_bytes >= 0) {
      fmt::format_to(it,
                     R"({{"ph":"C","pid":{},"name":"device memory","ts":{},"args":{{"allocated_bytes":{},"budget_bytes":{}}}}})",
                     kPid, to_us(time_ms), bytes, timeline.budget_bytes);
    } else {
      fmt::format_to(it, R"({{"ph":"C","pid":{},"name":"device memory","ts":{},"args":{{"allocated_bytes":{}}}}})",
                     kPid, to_us(time_ms), bytes);
    }
  };
  if (timeline.memory.empty() || timeline.memory.front().time_ms > 0.0) counter(0.0, 0);
  for (const MemorySample& sample : timeline.memory) counter(sample.time_ms, sample.device_bytes);
  append("\n]}\n");
  return fmt::to_string(out);
}

}  // namespace hyperoffload
