// Text and JSON renderings of a hand-made comparison.
#include "hyperoffload/report/comparison_table.h"

#include <gtest/gtest.h>

#include <limits>

#include <nlohmann/json.hpp>

namespace hyperoffload {
namespace {

constexpr std::int64_t kGiB = kBytesPerGiB;

// Budget 1 GiB = 50% of a 2 GiB unplanned peak; 12.5 ms of compute; the
// offload-only stall bound is 4 ms. greedy: 1 GiB op peak, 1.5 GiB in time
// (over: "!"), 12.3456 ms of stall (8.3456 above the bound); peak: 768 MiB both
// ways, 4.5 ms of stall (0.5 above, 36%), a floor of 512 MiB at op 3; hybrid:
// 0.25 ms of stall and 1.5 ms of recompute in 3 re-runs, 1.75 ms in all: 2.25
// ms below the offload-only bound (14%). No plan can add less than 1.25 ms
// (10% of the compute), no plan that copies nothing less than 2.5 ms (20%).
Comparison sample() {
  Comparison c;
  // Greedy's timed peak runs above the budget: a device with unlimited memory.
  c.device_memory = DeviceMemory::kUnlimited;
  c.op_count = 1234;
  c.storage_count = 56;
  c.compute_ms = 12.5;
  c.unplanned_peak_bytes = 2 * kGiB;
  c.unplanned_peak_op = 7;
  c.d2h_bandwidth_gib_per_s = 16;
  c.h2d_bandwidth_gib_per_s = 16;
  c.copy_engines = CopyEngines::kTwo;
  c.budgets_bytes = {kGiB};
  c.stall_bounds_ms = {4.0};
  c.overhead_bounds_ms = {1.25};
  c.recompute_only_bounds_ms = {2.5};
  c.planner_count = 3;
  ComparisonRow greedy;
  greedy.planner = "greedy";
  greedy.budget_bytes = kGiB;
  greedy.valid = true;
  greedy.op_peak_bytes = kGiB;
  greedy.timed_peak_bytes = 3 * kGiB / 2;
  greedy.stall_ms = 12.3456;
  greedy.overhead_percent = 98.7648;
  greedy.d2h_bytes = kGiB / 2;
  greedy.h2d_bytes = kGiB / 2;
  greedy.planning_ms = 0.123;
  ComparisonRow peak;
  peak.planner = "peak";
  peak.budget_bytes = kGiB;
  peak.valid = true;
  peak.op_peak_bytes = 768 * (kGiB / 1024);
  peak.timed_peak_bytes = peak.op_peak_bytes;
  peak.stall_ms = 4.5;
  peak.overhead_percent = 36.0;
  peak.d2h_bytes = 3 * kGiB / 4;
  peak.h2d_bytes = 3 * kGiB / 4;
  peak.planning_ms = 1.5;
  peak.floor = UnavoidableFloor{3, kGiB / 2};
  ComparisonRow hybrid;
  hybrid.planner = "hybrid";
  hybrid.budget_bytes = kGiB;
  hybrid.valid = true;
  hybrid.op_peak_bytes = kGiB;
  hybrid.timed_peak_bytes = kGiB;
  hybrid.stall_ms = 0.25;
  hybrid.recompute_ms = 1.5;
  hybrid.recompute_count = 3;
  hybrid.overhead_percent = 14.0;
  hybrid.d2h_bytes = kGiB / 4;
  hybrid.h2d_bytes = kGiB / 4;
  hybrid.planning_ms = 4.25;
  c.rows = {greedy, peak, hybrid};
  return c;
}

TEST(ComparisonTable, AlignsOneRowPerPlannerUnderABudgetHeader) {
  EXPECT_EQ(format_comparison_table(sample(), "model.json"),
            "trace      model.json: 1,234 ops, 56 storages, 12.500 ms of compute\n"
            "unplanned  2.00 GiB op-granular peak (op 7)\n"
            "copies     2 engines, one per direction, D2H 16 GiB/s, H2D 16 GiB/s\n"
            "memory     unlimited (--memory-cap unlimited): freed whenever copies allow, nothing waits for it; the "
            "timed peak may exceed the budget\n"
            "\n"
            "budget 1.00 GiB (50.0% of the unplanned peak), floor 512.00 MiB at op 3; offload-only stall bound "
            "4.000 ms\n"
            "any plan adds at least 1.250 ms of stall plus recompute (10.00% of compute); a recompute-only plan at "
            "least 2.500 ms (20.00%)\n"
            "planner  feasible     op peak    timed peak  stall ms  recompute ms (n)  above bound  overhead %  bytes "
            "moved  planning ms\n"
            "greedy   yes         1.00 GiB    1.50 GiB !    12.346                 -        8.346      98.76%     1.00 "
            "GiB         0.12\n"
            "peak     yes       768.00 MiB  768.00 MiB       4.500                 -        0.500      36.00%     1.50 "
            "GiB         1.50\n"
            "hybrid   yes         1.00 GiB    1.00 GiB       0.250         1.500 (3)       -2.250      14.00%   512.00 "
            "MiB         4.25\n"
            "\n"
            "feasible: valid, no faults and op-granular peak within the budget; ! marks a timed peak above the "
            "budget; recompute: time re-running ops (count); above bound: stall plus recompute minus the least stall "
            "any offload-only plan within the budget can have (feasible plans; negative where recompute beats it; "
            "docs/PEAK_PLANNER.md); overhead: stall plus recompute as a percentage of compute; any plan adds at "
            "least: a lower bound on stall plus recompute for plans that offload, recompute or both, and on the "
            "re-runs of plans that copy nothing (docs/HYBRID_PLANNER.md)\n");
}

TEST(ComparisonTable, ListsProblemsAndNotesUnderTheTable) {
  Comparison c = sample();
  c.copy_engines = CopyEngines::kOne;
  c.rows[0].valid = false;
  c.rows[0].problem_count = 2;
  c.rows[0].first_problem = "op 4 read of storage 9: data lost";
  c.rows[1].notes = {"budget is below the floor"};
  c.rows[1].op_peak_bytes = c.rows[1].budget_bytes + 1;  // over the budget: not feasible
  const std::string text = format_comparison_table(c, "t.json");
  EXPECT_NE(text.find("copies     1 engine shared by both directions"), std::string::npos) << text;
  EXPECT_NE(text.find("greedy   INVALID"), std::string::npos) << text;
  EXPECT_NE(text.find("\npeak     no "), std::string::npos) << text;
  // The bound covers feasible plans only: no "above bound" for either row
  // (and no recompute column entry for plans without recomputes).
  EXPECT_NE(text.find("12.346                 -            -"), std::string::npos) << text;
  EXPECT_NE(text.find("4.500                 -            -"), std::string::npos) << text;
  EXPECT_NE(text.find("1.500 (3)       -2.250"), std::string::npos) << text;
  EXPECT_NE(text.find("problem (greedy): 2 problem(s); first: op 4 read of storage 9: data lost\n"), std::string::npos);
  EXPECT_NE(text.find("note (peak): budget is below the floor\n"), std::string::npos);
}

TEST(ComparisonTable, WritesEveryRowAsJson) {
  const nlohmann::json json = nlohmann::json::parse(comparison_to_json(sample(), "model.json"));
  EXPECT_EQ(json["trace"]["label"], "model.json");
  EXPECT_EQ(json["trace"]["ops"], 1234);
  EXPECT_EQ(json["trace"]["unplanned_peak_bytes"], 2 * kGiB);
  EXPECT_EQ(json["copy_engines"], 2);
  ASSERT_EQ(json["results"].size(), 3U);
  const nlohmann::json& greedy = json["results"][0];
  EXPECT_EQ(greedy["planner"], "greedy");
  EXPECT_EQ(greedy["budget_bytes"], kGiB);
  EXPECT_DOUBLE_EQ(greedy["budget_percent"].get<double>(), 50.0);
  EXPECT_EQ(greedy["feasible"], true);
  EXPECT_EQ(greedy["timed_within_budget"], false);
  EXPECT_EQ(greedy["bytes_moved"], kGiB);
  EXPECT_DOUBLE_EQ(greedy["stall_ms"].get<double>(), 12.3456);
  EXPECT_DOUBLE_EQ(greedy["stall_lower_bound_ms"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(greedy["stall_above_bound_ms"].get<double>(), 8.3456);
  EXPECT_DOUBLE_EQ(greedy["overhead_lower_bound_ms"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(greedy["recompute_only_lower_bound_ms"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(greedy["recompute_ms"].get<double>(), 0.0);
  EXPECT_FALSE(greedy.contains("floor"));
  const nlohmann::json& peak = json["results"][1];
  EXPECT_EQ(peak["floor"]["op"], 3);
  EXPECT_EQ(peak["floor"]["bytes"], kGiB / 2);
  EXPECT_TRUE(peak["notes"].is_array());
  // The hybrid row: its stall alone is 3.75 ms below the bound, its stall
  // plus recompute 2.25 ms below.
  const nlohmann::json& hybrid = json["results"][2];
  EXPECT_DOUBLE_EQ(hybrid["recompute_ms"].get<double>(), 1.5);
  EXPECT_EQ(hybrid["recompute_count"], 3);
  EXPECT_DOUBLE_EQ(hybrid["stall_above_bound_ms"].get<double>(), -3.75);
  EXPECT_DOUBLE_EQ(hybrid["overhead_above_bound_ms"].get<double>(), -2.25);
  EXPECT_DOUBLE_EQ(hybrid["overhead_percent"].get<double>(), 14.0);
}

TEST(ComparisonTable, SaysWhenNoRecomputeOnlyPlanFitsTheBudget) {
  Comparison c = sample();
  c.recompute_only_bounds_ms = {std::numeric_limits<double>::infinity()};
  const std::string text = format_comparison_table(c, "t.json");
  EXPECT_NE(text.find("(10.00% of compute); no recompute-only plan fits it\n"), std::string::npos) << text;
  const nlohmann::json json = nlohmann::json::parse(comparison_to_json(c, "t.json"));
  EXPECT_TRUE(json["results"][0]["recompute_only_lower_bound_ms"].is_null());
}

TEST(ComparisonTable, SaysWhenNoPlanFitsTheBudget) {
  Comparison c = sample();
  c.stall_bounds_ms = {std::nullopt};
  c.overhead_bounds_ms = {std::nullopt};
  c.recompute_only_bounds_ms = {std::nullopt};
  const std::string text = format_comparison_table(c, "t.json");
  EXPECT_NE(text.find("floor 512.00 MiB at op 3; no offload-only plan fits it\n"
                      "no plan fits it: an op touches more than the budget\n"),
            std::string::npos)
      << text;
  const nlohmann::json json = nlohmann::json::parse(comparison_to_json(c, "t.json"));
  EXPECT_TRUE(json["results"][0]["stall_lower_bound_ms"].is_null());
  EXPECT_TRUE(json["results"][0]["overhead_lower_bound_ms"].is_null());
  EXPECT_TRUE(json["results"][0]["recompute_only_lower_bound_ms"].is_null());
  EXPECT_TRUE(json["results"][0]["stall_above_bound_ms"].is_null());
}

}  // namespace
}  // namespace hyperoffload
