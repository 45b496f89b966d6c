// Segment re-runs (plan/recompute/segment_reruns.h, Note [Segment re-runs]):
// the segments and their decisions on a hand-built forward and backward pass,
// the pinned decisions removed, and, over random traces and GPT-style steps,
// every segment plan is a valid schedule whose peak is the one measured.
//
// Conventions as in recompute_internals_test.cc: sN is storage id N (and its
// index); "rec" marks a recomputable op; durations in ms.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/gen/transformer_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/hybrid/segment_search.h"
#include "hyperoffload/plan/peak/peak_model.h"
#include "hyperoffload/plan/recompute/augmented_trace.h"
#include "hyperoffload/plan/recompute/recompute_model.h"
#include "hyperoffload/plan/recompute/segment_reruns.h"
#include "hyperoffload/sim/simulator.h"
#include "testing/trace_dsl.h"

namespace hyperoffload::internal {
namespace {

using ::hyperoffload::testing::TraceDsl;
constexpr Recomputable kRec = Recomputable::kYes;

// A forward pass of four recomputable ops (1 ms each) from a retained input
// of size 0, a loss, and a backward pass that reads the activations in
// reverse:
//   op0 load W0 | op k (1..4) f_k R(k-1) Wk, rec | op5 loss R4 W5
//   op6 b4 R4 R5 | op7 b3 R3 R5 | op8 b2 R2 R5 | op9 b1 R1 R5
// s1..s4 100 bytes, s5 50 (not recomputable). Unplanned, s_k lives from op k
// to its backward read, s5 from op 5:
//   op:  0   1    2    3    4    5    6    7    8    9
//   res: 0  100  200  300  400  450  450  350  250  150
// The pivot is op 5 (the first 450). Candidates (gaps of two ops or more):
// s1 (2, 9), s2 (3, 8), s3 (4, 7); s4's (4, 5) and (5, 6) are too short. All
// three span the pivot. Sources f1, f2, f3 at ops 1, 2, 3; compute before
// them 0, 1, 2 ms of the 4 ms before the pivot: positions 0, 1/4, 1/2.
Trace forward_backward() {
  return TraceDsl()
      .storage(0, 0, Retention::kRetained)
      .storage(1, 100)
      .storage(2, 100)
      .storage(3, 100)
      .storage(4, 100)
      .storage(5, 50)
      .op("load", "W0", 0.0)
      .op("f1", "R0 W1", 1.0, kRec)
      .op("f2", "R1 W2", 1.0, kRec)
      .op("f3", "R2 W3", 1.0, kRec)
      .op("f4", "R3 W4", 1.0, kRec)
      .op("loss", "R4 W5", 1.0)
      .op("b4", "R4 R5", 1.0)
      .op("b3", "R3 R5", 1.0)
      .op("b2", "R2 R5", 1.0)
      .op("b1", "R1 R5", 1.0)
      .build();
}

struct Storages {
  StorageIndex storage;
  OpIndex point;
  bool operator==(const Storages&) const = default;
};

std::vector<Storages> storages_of(const RecomputeModel& model, const std::vector<RecomputeDecision>& decisions) {
  std::vector<Storages> out;
  for (const RecomputeDecision& d : decisions) {
    out.push_back({model.candidates[static_cast<std::size_t>(d.candidate)].storage, d.regenerate_before});
  }
  return out;
}

TEST(SegmentReruns, SplitsTheCandidatesSpanningThePeakIntoSegmentsRegeneratedWhereTheBackwardFirstNeedsThem) {
  const Trace trace = forward_backward();
  const StorageAccesses accesses(trace);
  const RecomputeModel model = build_recompute_model(trace, accesses);
  const std::vector<std::int64_t> resident = build_peak_model(trace, accesses).resident_bytes;
  const SegmentReruns segments(trace, model, resident, SegmentBalance::kCompute);
  EXPECT_EQ(segments.pivot(), 5);
  EXPECT_EQ(segments.max_segments(), 3);
  // Two segments of equal compute: positions 0 and 1/4 go to segment 0, 1/2
  // to segment 1. Segment 0 is regenerated before the first backward read of
  // s1 or s2 (ops 9, 8): op 8; segment 1 before op 7. In point order.
  EXPECT_EQ(storages_of(model, segments.decisions(2, 2)),
            (std::vector<Storages>{{3, 7}, {1, 8}, {2, 8}}));
  EXPECT_EQ(storages_of(model, segments.decisions(2, 1)), (std::vector<Storages>{{1, 8}, {2, 8}}));
  EXPECT_TRUE(segments.decisions(2, 0).empty());
  // One segment: all three, before op 7, in the order of their sources.
  EXPECT_EQ(storages_of(model, segments.decisions(1, 1)), (std::vector<Storages>{{1, 7}, {2, 7}, {3, 7}}));
  // Equal bytes (100 each): positions 0, 1/3, 2/3; with three segments each
  // storage has its own, regenerated before its own backward read.
  const SegmentReruns by_bytes(trace, model, resident, SegmentBalance::kBytes);
  EXPECT_EQ(storages_of(model, by_bytes.decisions(3, 3)), (std::vector<Storages>{{3, 7}, {2, 8}, {1, 9}}));
}

TEST(SegmentReruns, ADroppedStorageAnotherSegmentsReRunReadsIsKeptAndTheSegmentRegeneratedWhenItsRestIsNeeded) {
  const Trace trace = forward_backward();
  const StorageAccesses accesses(trace);
  const RecomputeModel model = build_recompute_model(trace, accesses);
  const SegmentReruns segments(trace, model, build_peak_model(trace, accesses).resident_bytes,
                               SegmentBalance::kCompute);
  // decisions(2, 2) = s3 before 7, s1 and s2 before 8. The re-run of f3
  // before op 7 reads s2, which is off the device until op 8: pinned, so
  // kept (checkpointing keeps a segment's input). Segment 0 is then s1
  // alone, regenerated before its own read, op 9.
  std::vector<RecomputeDecision> decisions = segments.decisions(2, 2);
  const UnpinnedSegments plan = without_pinned(trace, model, decisions);
  EXPECT_EQ(storages_of(model, decisions), (std::vector<Storages>{{3, 7}, {1, 9}}));
  // Two re-runs, f3 and f1: 2 ms. Resident bytes (s1 off after op 2, s3
  // after op 4; s3' from its re-run to op 7, s1' from its re-run to op 9):
  //   op:  1    2    3    4    5    6   f3'   7    8   f1'   9
  //   res: 100  200  200  300  250  250  250  250  150  150  150
  // Peak 300 at op 4 (augmented index 4: nothing is inserted before it).
  EXPECT_EQ(plan.augmented.recompute_count, 2);
  EXPECT_DOUBLE_EQ(plan.augmented.recompute_ms, 2.0);
  EXPECT_EQ(plan.peak.bytes, 300);
  EXPECT_EQ(plan.peak.op, 4);
  // Segment 0 alone (s1, s2 before op 8, f1 then f2 there, f2 reading the
  // regenerated s1): nothing pinned; peak 250 at op 5 (s3, s4, s5).
  std::vector<RecomputeDecision> first = segments.decisions(2, 1);
  const UnpinnedSegments first_plan = without_pinned(trace, model, first);
  EXPECT_EQ(storages_of(model, first), (std::vector<Storages>{{1, 8}, {2, 8}}));
  EXPECT_EQ(first_plan.peak.bytes, 250);
  EXPECT_EQ(first_plan.peak.op, 5);
  EXPECT_DOUBLE_EQ(first_plan.augmented.recompute_ms, 2.0);
}

// SegmentSearch (plan/hybrid/segment_search.h) on forward_backward(). W = 10
// ops + 19 accesses: 60 evaluations, so every count up to max_segments = 3
// for both balances. The shapes with every segment dropped (decisions after
// pinning; derivations as above and below):
//   compute 1 (= bytes 1): s1, s2, s3 before op 7, re-run f1, f2, f3 there:
//     s1' s2' s3' s5 at op 7 = 350 (first at the re-run of f3, before op 7);
//     3 ms.
//   compute 2 (= bytes 2, = compute 3: positions 0, 3/4, 3/2 put s1 and s2
//     together again): s3 before 7, s1 before 9 (s2 pinned): 300 at op 4; 2 ms.
//   bytes 3: s1, s2, s3 each its own segment: f3's re-run before 7 reads s2
//     (off until 8), f2's before 8 reads s1 (off until 9): both pinned; s3
//     alone: s1 s2 s3 s4 at op 4 = 400; 1 ms.
// The floor is the lowest of these: 300 at op 4.
TEST(SegmentSearch, TakesTheFewestSegmentsThatFitWithTheFewestReRuns) {
  const Trace trace = forward_backward();
  const StorageAccesses accesses(trace);
  const RecomputeModel model = build_recompute_model(trace, accesses);
  const std::vector<std::int64_t> resident = build_peak_model(trace, accesses).resident_bytes;
  const auto shape_of = [&](const SegmentSearch::Best& best) {
    return std::tuple(best.shape->balance, best.shape->count, best.shape->dropped, best.shape->peak.bytes,
                      best.shape->peak.op, best.shape->recompute_ms);
  };
  SegmentSearch fresh;
  // At 300, bytes 2, compute 2 and compute 3 fit with 2 ms (bytes first: it
  // was measured first). Its bisection tries 1 of 2 segments: s1 and s2
  // before op 8 (f1, f2), 250 at op 5, 2 ms: as quick, lower peak.
  const SegmentSearch::Best at_300 = fresh.best(trace, model, resident, 300);
  EXPECT_EQ(shape_of(at_300), std::tuple(SegmentBalance::kBytes, 2, 1, std::int64_t{250}, OpIndex{5}, 2.0));
  EXPECT_EQ(at_300.floor.bytes, 300);
  EXPECT_EQ(at_300.floor.op, 4);
  // At 400 all fit; bytes 3 re-runs least (1 ms), and 1 of its 3 segments
  // (s1 before op 9, f1 alone) holds s2 s3 s4 s5 at op 5 = 350: it fits,
  // as quick, lower peak.
  SegmentSearch used;
  const SegmentSearch::Best at_400 = used.best(trace, model, resident, 400);
  EXPECT_EQ(shape_of(at_400), std::tuple(SegmentBalance::kBytes, 3, 1, std::int64_t{350}, OpIndex{5}, 1.0));
  // At 250 no shape with every segment dropped fits, so none is bisected:
  // the lowest peak, bytes 2 (300), though 1 of its 2 segments would fit.
  const SegmentSearch::Best at_250 = used.best(trace, model, resident, 250);
  EXPECT_EQ(shape_of(at_250), std::tuple(SegmentBalance::kBytes, 2, 2, std::int64_t{300}, OpIndex{4}, 2.0));
  // What was measured before does not change the choice.
  EXPECT_EQ(shape_of(used.best(trace, model, resident, 300)), shape_of(at_300));
}

// Plays every segment plan of `trace` (both balances, up to six segments,
// every number dropped) and checks that it is a valid schedule with no
// faults whose op-granular peak is the one without_pinned measured. Returns
// how many plans re-ran something.
int check_every_shape(const Trace& trace) {
  const StorageAccesses accesses(trace);
  const RecomputeModel model = build_recompute_model(trace, accesses);
  const std::vector<std::int64_t> resident = build_peak_model(trace, accesses).resident_bytes;
  int with_reruns = 0;
  for (const SegmentBalance balance : {SegmentBalance::kBytes, SegmentBalance::kCompute}) {
    const SegmentReruns segments(trace, model, resident, balance);
    for (int count = 1; count <= std::min(segments.max_segments(), 6); ++count) {
      for (int dropped = 0; dropped <= count; ++dropped) {
        SCOPED_TRACE(::testing::Message() << "segments " << count << ", dropped " << dropped);
        std::vector<RecomputeDecision> decisions = segments.decisions(count, dropped);
        const UnpinnedSegments plan = without_pinned(trace, model, decisions);
        const std::vector<Action> actions =
            map_back(plan.augmented, end_of_life_releases(plan.augmented.trace, StorageAccesses(plan.augmented.trace)));
        Schedule schedule;
        schedule.actions = actions;
        SimulatorOptions options;
        options.budget_bytes = plan.peak.bytes;
        options.device_memory = DeviceMemory::kBudget;
        const SimulationResult simulation = simulate(trace, schedule, options);
        EXPECT_TRUE(simulation.validation.valid())
            << (simulation.validation.problems.empty() ? "" : simulation.validation.problems.front());
        EXPECT_TRUE(simulation.validation.faults.empty());
        EXPECT_EQ(simulation.validation.peak_bytes, plan.peak.bytes);
        with_reruns += plan.augmented.recompute_count > 0 ? 1 : 0;
      }
    }
  }
  return with_reruns;
}

TEST(SegmentRerunsProperty, EverySegmentPlanOfARandomTraceIsValidWithThePeakMeasured) {
  int with_reruns = 0;
  for (std::uint64_t seed = 1; seed <= 150; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    std::mt19937_64 rng(seed * 6151 + 5);
    auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
    RandomTraceOptions o;
    o.seed = seed;
    o.op_count = static_cast<std::int32_t>(uniform(1, 90));
    o.storage_count = static_cast<std::int32_t>(uniform(1, 70));
    o.min_size_bytes = 1;
    o.max_size_bytes = static_cast<std::int64_t>(uniform(1, 1 << 20));
    o.retained_fraction = uniform(0.0, 0.3);
    o.max_extra_accesses = static_cast<std::int32_t>(uniform(0, 8));
    o.write_fraction = uniform(0.0, 0.4);
    o.in_place_fraction = uniform(0.0, 0.3);
    o.recomputable_fraction = uniform(0.3, 1.0);
    o.limit_fraction = std::nullopt;
    with_reruns += check_every_shape(generate_random_trace(o));
  }
  // The cases exercise re-runs: not every plan is empty.
  EXPECT_GT(with_reruns, 150);  // 200 at the time of writing
}

TEST(SegmentRerunsProperty, EverySegmentPlanOfAGptStepIsValidWithThePeakMeasured) {
  int with_reruns = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    TransformerOptions o;
    o.layers = static_cast<std::int32_t>(1 + seed % 4);
    o.heads = 2;
    o.hidden = 16;
    o.seq = 8 + static_cast<std::int64_t>(seed);
    o.batch = 2;
    o.vocab = 50;
    o.dropout = seed % 3 == 0 ? Dropout::kOn : Dropout::kOff;
    o.attention = seed % 2 == 0 ? AttentionKernel::kMaterialized : AttentionKernel::kFlash;
    with_reruns += check_every_shape(value_or_throw(generate_transformer_trace(o)));
  }
  EXPECT_GT(with_reruns, 400);  // 504 at the time of writing
}

}  // namespace
}  // namespace hyperoffload::internal
