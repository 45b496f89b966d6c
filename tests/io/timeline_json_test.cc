// Chrome trace-event JSON of a timeline: parsed back with nlohmann and checked
// event by event.
#include "hyperoffload/io/timeline_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/trace_dsl.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAre;
using json = nlohmann::json;
using testing::TraceDsl;

// Two ops named "fwd" and "bwd"; the timeline is written by hand so the test
// does not depend on the simulator.
//   compute: [fwd 0-1 ms][stall 1-1.5][fault s7 1.5-2][bwd 2-3.25]
//   copy 0:  [D2H s7 1-1.5]
//   copy 1:  (nothing)
Timeline hand_timeline() {
  Timeline timeline;
  timeline.spans = {
      {SpanKind::kOp, Lane::kCompute, 0, -1, 0, 0.0, 1.0},
      {SpanKind::kCopyD2H, Lane::kCopy0, 0, 7, 4096, 1.0, 1.5},
      {SpanKind::kStall, Lane::kCompute, 1, -1, 0, 1.0, 1.5},
      {SpanKind::kFault, Lane::kCompute, 1, 7, 4096, 1.5, 2.0},
      {SpanKind::kOp, Lane::kCompute, 1, -1, 0, 2.0, 3.25},
  };
  timeline.memory = {{0.5, 4096}, {1.5, 0}, {1.5, 4096}};
  timeline.budget_bytes = 6000;
  return timeline;
}

Trace two_op_trace() { return TraceDsl().storage(7, 4096).op("fwd", "W7", 1.0).op("bwd", "R7", 1.25).build(); }

std::vector<json> events_with(const json& doc, const std::string& ph) {
  std::vector<json> out;
  for (const json& event : doc.at("traceEvents")) {
    if (event.at("ph") == ph) out.push_back(event);
  }
  return out;
}

TEST(TimelineJson, NamesTheProcessAndEveryUsedLane) {
  const json doc = json::parse(timeline_to_chrome_json(two_op_trace(), hand_timeline()));
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  std::vector<std::string> names;
  for (const json& event : events_with(doc, "M")) {
    if (event.at("name") == "process_name") {
      EXPECT_EQ(event.at("args").at("name"), "hyperoffload");
    } else if (event.at("name") == "thread_name") {
      names.push_back(std::to_string(event.at("tid").get<int>()) + " " + event.at("args").at("name").get<std::string>());
    }
  }
  // Copy engine 1 has no spans, so it gets no track.
  EXPECT_THAT(names, ElementsAre("1 compute", "2 copy engine 0 (D2H)"));
}

TEST(TimelineJson, WritesSpansAsCompleteEventsInMicroseconds) {
  const json doc = json::parse(timeline_to_chrome_json(two_op_trace(), hand_timeline()));
  const std::vector<json> spans = events_with(doc, "X");
  ASSERT_EQ(spans.size(), 5u);
  // fwd: 0-1 ms on the compute track.
  EXPECT_EQ(spans[0].at("name"), "fwd");
  EXPECT_EQ(spans[0].at("cat"), "op");
  EXPECT_EQ(spans[0].at("tid"), 1);
  EXPECT_EQ(spans[0].at("ts"), 0.0);
  EXPECT_EQ(spans[0].at("dur"), 1000.0);
  EXPECT_EQ(spans[0].at("args").at("op"), 0);
  // The D2H of storage 7 on copy engine 0 (tid 2).
  EXPECT_EQ(spans[1].at("name"), "D2H storage 7");
  EXPECT_EQ(spans[1].at("cat"), "copy");
  EXPECT_EQ(spans[1].at("tid"), 2);
  EXPECT_EQ(spans[1].at("ts"), 1000.0);
  EXPECT_EQ(spans[1].at("dur"), 500.0);
  EXPECT_EQ(spans[1].at("args"), json({{"op", 0}, {"storage", 7}, {"bytes", 4096}}));
  EXPECT_EQ(spans[2].at("name"), "stall");
  EXPECT_EQ(spans[2].at("args").at("op"), 1);
  EXPECT_EQ(spans[3].at("name"), "fault storage 7");
  EXPECT_EQ(spans[3].at("cat"), "fault");
  EXPECT_EQ(spans[3].at("args"), json({{"op", 1}, {"storage", 7}, {"bytes", 4096}}));
  // bwd: 2-3.25 ms.
  EXPECT_EQ(spans[4].at("name"), "bwd");
  EXPECT_EQ(spans[4].at("ts"), 2000.0);
  EXPECT_EQ(spans[4].at("dur"), 1250.0);
}

TEST(TimelineJson, DrawsDeviceMemoryAndTheBudgetAsCounterSeries) {
  const json doc = json::parse(timeline_to_chrome_json(two_op_trace(), hand_timeline()));
  std::vector<std::string> samples;
  for (const json& event : events_with(doc, "C")) {
    EXPECT_EQ(event.at("name"), "device memory");
    EXPECT_EQ(event.at("args").at("budget_bytes"), 6000);
    samples.push_back(std::to_string(event.at("ts").get<double>()) + ":" +
                      std::to_string(event.at("args").at("allocated_bytes").get<std::int64_t>()));
  }
  // A zero sample starts the track at 0 because the first change is at 0.5 ms.
  EXPECT_THAT(samples, ElementsAre("0.000000:0", "500.000000:4096", "1500.000000:0", "1500.000000:4096"));
}

TEST(TimelineJson, LeavesTheBudgetOutWhenUnknown) {
  Timeline timeline = hand_timeline();
  timeline.budget_bytes = -1;
  const json doc = json::parse(timeline_to_chrome_json(two_op_trace(), timeline));
  for (const json& event : events_with(doc, "C")) EXPECT_FALSE(event.at("args").contains("budget_bytes"));
}

TEST(TimelineJson, NamesBothDirectionsOfASharedEngine) {
  Timeline timeline;
  timeline.spans = {{SpanKind::kCopyD2H, Lane::kCopy0, 0, 7, 4096, 1.0, 1.5},
                    {SpanKind::kCopyH2D, Lane::kCopy0, 1, 7, 4096, 1.5, 2.0}};
  const json doc = json::parse(timeline_to_chrome_json(two_op_trace(), timeline));
  std::vector<std::string> names;
  for (const json& event : events_with(doc, "M")) {
    if (event.at("name") == "thread_name") names.push_back(event.at("args").at("name"));
  }
  EXPECT_THAT(names, ElementsAre("compute", "copy engine 0 (D2H, H2D)"));
  // Only the zero sample: nothing was allocated.
  EXPECT_EQ(events_with(doc, "C").size(), 1u);
}

TEST(TimelineJson, EscapesOpNames) {
  const Trace trace = TraceDsl().op("say \"hi\"\\\n\xff", "", 1.0).build();
  Timeline timeline;
  timeline.spans = {{SpanKind::kOp, Lane::kCompute, 0, -1, 0, 0.0, 1.0}};
  const json doc = json::parse(timeline_to_chrome_json(trace, timeline));
  // The invalid UTF-8 byte becomes U+FFFD.
  EXPECT_EQ(events_with(doc, "X").at(0).at("name"), "say \"hi\"\\\n\xEF\xBF\xBD");
}

TEST(TimelineJson, NamesARecomputeSpanAfterTheOpItReRuns) {
  // A recompute of op 0 ("fwd", whose name needs no escaping; a quote would be
  // escaped like any op name) regenerating 4096 bytes, 3.25-4.25 ms.
  Timeline timeline;
  timeline.spans = {{SpanKind::kRecompute, Lane::kCompute, 0, -1, 4096, 3.25, 4.25}};
  const json doc = json::parse(timeline_to_chrome_json(two_op_trace(), timeline));
  const std::vector<json> spans = events_with(doc, "X");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].at("name"), "recompute fwd");
  EXPECT_EQ(spans[0].at("cat"), "recompute");
  EXPECT_EQ(spans[0].at("tid"), 1);
  EXPECT_EQ(spans[0].at("ts"), 3250.0);
  EXPECT_EQ(spans[0].at("dur"), 1000.0);
  EXPECT_EQ(spans[0].at("args").at("op"), 0);
  EXPECT_EQ(spans[0].at("args").at("bytes"), 4096);
  const Trace quoted = TraceDsl().storage(7, 8).op("say \"hi\"", "W7").build();
  const json escaped = json::parse(timeline_to_chrome_json(quoted, timeline));
  EXPECT_EQ(events_with(escaped, "X").at(0).at("name"), "recompute say \"hi\"");
}

}  // namespace
}  // namespace hyperoffload
