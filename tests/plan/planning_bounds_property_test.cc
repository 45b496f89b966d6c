// Every planner's work and memory stay within the bounds its header states
// (issue 34), on random training steps built to stress them
// (gen/stress_trace.h: long recomputable chains with residual adds, deep view
// runs, many in-place writes, wide fan-in and fan-out) and on plain random
// traces: the schedule is valid, within the budget where the planner
// guarantees it, and planning holds at most kMemoryMultiple times the trace's
// in-memory size (plus a constant) and takes at most kMicrosPerWork µs per op
// or access (plus a constant) — the planner.h bound (Note [Planning bounds]).
//
// Memory is measured by counting this binary's heap: operator new and delete
// are replaced below to keep the bytes live now and their high-water mark.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/gen/random_trace.h"
#include "hyperoffload/gen/stress_trace.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/dtr_planner.h"
#include "hyperoffload/plan/planner.h"
#include "hyperoffload/plan/recompute/recompute_model.h"

namespace {

std::atomic<std::int64_t> live_heap_bytes{0};
std::atomic<std::int64_t> peak_heap_bytes{0};

void* counted_alloc(std::size_t size, std::size_t alignment) {
  void* p = alignment > alignof(std::max_align_t) ? std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)
                                                  : std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) return nullptr;
  const auto bytes = static_cast<std::int64_t>(malloc_usable_size(p));
  const std::int64_t now = live_heap_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = peak_heap_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_heap_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void counted_free(void* p) {
  if (p == nullptr) return;
  live_heap_bytes.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

void* throwing_alloc(std::size_t size, std::size_t alignment) {
  void* p = counted_alloc(size, alignment);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t size) { return throwing_alloc(size, 0); }
void* operator new[](std::size_t size) { return throwing_alloc(size, 0); }
void* operator new(std::size_t size, std::align_val_t align) { return throwing_alloc(size, static_cast<std::size_t>(align)); }
void* operator new[](std::size_t size, std::align_val_t align) { return throwing_alloc(size, static_cast<std::size_t>(align)); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size, 0); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size, 0); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }

namespace hyperoffload {
namespace {

// Heap bytes held from now on above what is held now, at their most.
class HeapWatermark {
 public:
  HeapWatermark() : base_(live_heap_bytes.load()) { peak_heap_bytes.store(base_); }
  std::int64_t peak_above_start() const { return peak_heap_bytes.load() - base_; }
  std::int64_t live_above_start() const { return live_heap_bytes.load() - base_; }

 private:
  std::int64_t base_;
};

struct Measured {
  PlanResult plan;
  std::int64_t heap_bytes = 0;
  double seconds = 0.0;
};

Measured plan_measured(const Planner& planner, const Trace& trace, std::int64_t budget) {
  Measured measured;
  const HeapWatermark watermark;
  const auto start = std::chrono::steady_clock::now();
  Result<PlanResult> plan = planner.plan(trace, budget);
  measured.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  measured.heap_bytes = watermark.peak_above_start();
  EXPECT_TRUE(plan.has_value()) << plan.error().message;
  if (plan) measured.plan = std::move(*plan);
  return measured;
}

// What planner.h's Note [Planning bounds] states: planning holds at most
// kMemoryMultiple × the trace's heap bytes + kMemoryConstantBytes, and takes
// at most kMicrosPerWork µs per op or access + kConstantSeconds (generous:
// ctest runs two tests at once on a shared machine).
constexpr double kMemoryMultiple = 128.0;
constexpr std::int64_t kMemoryConstantBytes = 1 << 20;
constexpr double kMicrosPerWork = 1000.0;
constexpr double kConstantSeconds = 0.5;

struct Case {
  Trace trace;
  std::int64_t trace_bytes = 0;  // the trace's heap bytes once built
};

template <typename Generate>
Case measured_trace(Generate generate) {
  const HeapWatermark watermark;
  Case made{generate()};
  made.trace_bytes = watermark.live_above_start();
  return made;
}

Case stress_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 104729 + 7);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  StressTraceOptions options;
  options.seed = seed;
  options.layers = static_cast<std::int32_t>(uniform(1, 24));
  options.ops_per_layer = static_cast<std::int32_t>(uniform(4, 40));
  options.recomputable_fraction = uniform(0.3, 1.0);
  options.residual_fraction = uniform(0.0, 0.5);
  options.view_fraction = uniform(0.0, 0.3);
  options.view_depth = static_cast<std::int32_t>(uniform(1, 32));
  options.in_place_fraction = uniform(0.0, 0.3);
  options.shared_fraction = uniform(0.0, 0.2);
  options.max_fan_in = static_cast<std::int32_t>(uniform(0, 6));
  options.wide_fan_in_fraction = uniform(0.0, 0.05);
  // Every fourth trace saves little for the backward: long dead chains.
  options.save_fraction = seed % 4 == 3 ? uniform(0.01, 0.1) : uniform(0.3, 1.0);
  options.gradient_buffers = static_cast<std::int32_t>(uniform(0, 6));
  options.max_duration_ms = seed % 7 == 0 ? 0.0 : uniform(0.01, 2.0);
  return measured_trace([&] { return generate_stress_trace(options); });
}

Case random_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + 3);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  RandomTraceOptions options;
  options.seed = seed;
  options.op_count = static_cast<std::int32_t>(uniform(1, 1500));
  options.storage_count = static_cast<std::int32_t>(uniform(0, 800));
  options.max_extra_accesses = static_cast<std::int32_t>(uniform(0, 12));
  options.write_fraction = uniform(0.0, 0.4);
  options.in_place_fraction = uniform(0.0, 0.4);
  options.recomputable_fraction = uniform(0.0, 1.0);
  options.limit_fraction = std::nullopt;
  return measured_trace([&] { return generate_random_trace(options); });
}

// The most heap a plan held, as a multiple of its trace's heap bytes, and the
// most planning time per op or access, over a test's plans.
struct Most {
  double heap_multiple = 0.0;
  double micros_per_work = 0.0;
};

// Plans `c` with every planner at a tight, a middle and a loose budget and
// checks validity, the budget where the planner guarantees it, and the bounds;
// with `host_fraction`, also under a host budget of that share of the
// unplanned peak (every schedule trimmed to it: plan/common/host_budget.h).
void check_every_planner(const Case& c, const std::string& what, Most& most,
                         std::optional<double> host_fraction = std::nullopt) {
  const Trace& trace = c.trace;
  const std::int64_t unplanned = unplanned_peak(trace).bytes;
  const std::int64_t work = trace.op_count() + static_cast<std::int64_t>(trace.access_count());
  const std::int64_t memory_bound =
      static_cast<std::int64_t>(kMemoryMultiple * static_cast<double>(c.trace_bytes)) + kMemoryConstantBytes;
  const double seconds_bound = kMicrosPerWork * 1e-6 * static_cast<double>(work) + kConstantSeconds;
  PlannerOptions options;
  if (host_fraction) {
    options.host_budget_bytes = static_cast<std::int64_t>(static_cast<double>(unplanned) * *host_fraction);
  }
  for (const double fraction : {0.1, 0.35, 0.7}) {
    const auto budget = static_cast<std::int64_t>(static_cast<double>(unplanned) * fraction);
    for (const std::string_view name : {"greedy", "peak", "hybrid", "recompute", "dtr"}) {
      SCOPED_TRACE(::testing::Message() << what << ", " << name << " at " << fraction << " of " << unplanned
                                        << " bytes, " << trace.op_count() << " ops, " << work << " work, host budget "
                                        << options.host_budget_bytes.value_or(-1));
      const Result<std::unique_ptr<Planner>> planner = make_planner(name, options);
      ASSERT_TRUE(planner.has_value());
      const Measured m = plan_measured(**planner, trace, budget);
      const ValidationReport report = validate_schedule(trace, m.plan.schedule);
      EXPECT_TRUE(report.valid()) << (report.problems.empty() ? "" : report.problems.front());
      EXPECT_TRUE(report.faults.empty());
      // Within the budget wherever the planner guarantees it: at or above its
      // floor for the peak, hybrid and recompute planners; DTR says when not.
      if (name == "dtr") {
        const bool missed = !m.plan.notes.empty() && m.plan.notes.front().find("is not met") != std::string::npos;
        EXPECT_EQ(missed, report.peak_bytes > budget);
        // Note [The walk's work bound]: re-runs ≤ 4 W + 2 S.
        EXPECT_LE(report.recompute_count, kDtrRerunWorkFactor * work + 2 * trace.storage_count());
      } else if (name != "greedy" && m.plan.floor && budget >= m.plan.floor->bytes && !host_fraction) {
        EXPECT_LE(report.peak_bytes, budget);
      }
      // A trimmed schedule keeps the host budget unless faulting storages
      // hold the host peak (the planners here make fault-free schedules).
      if (options.host_budget_bytes) {
        EXPECT_LE(report.peak_host_bytes, *options.host_budget_bytes);
      }
      EXPECT_LE(m.heap_bytes, memory_bound) << "trace " << c.trace_bytes << " bytes";
      most.heap_multiple =
          std::max(most.heap_multiple, static_cast<double>(m.heap_bytes) / static_cast<double>(c.trace_bytes));
      most.micros_per_work = std::max(most.micros_per_work, 1e6 * m.seconds / static_cast<double>(work));
      EXPECT_LE(m.seconds, seconds_bound);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

void record(const Most& most) {
  ::testing::Test::RecordProperty("most_heap_multiple", fmt::format("{:.1f}", most.heap_multiple));
  ::testing::Test::RecordProperty("most_micros_per_work", fmt::format("{:.1f}", most.micros_per_work));
  std::printf("most heap %.1f x the trace, most time %.1f us per op or access\n", most.heap_multiple,
              most.micros_per_work);
}

TEST(PlanningBoundsProperty, StressTracesPlanValidWithinTheBudgetAndTheStatedBounds) {
  Most most;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    check_every_planner(stress_case(seed), fmt::format("stress trace {}", seed), most);
    if (::testing::Test::HasFailure()) return;
  }
  record(most);  // 34.4x and 250 us when written (hybrid)
}

// The same with a host budget of 5% of the unplanned peak: every schedule is
// trimmed, and the trim's rounds (one per storage kept) are bounded too.
TEST(PlanningBoundsProperty, StressTracesUnderAHostBudgetStayWithinTheStatedBounds) {
  Most most;
  for (std::uint64_t seed = 0; seed < 24; seed += 2) {
    check_every_planner(stress_case(seed), fmt::format("stress trace {}", seed), most, 0.05);
    if (::testing::Test::HasFailure()) return;
  }
  record(most);
}

TEST(PlanningBoundsProperty, RandomTracesPlanValidWithinTheBudgetAndTheStatedBounds) {
  Most most;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    check_every_planner(random_case(seed), fmt::format("random trace {}", seed), most);
    if (::testing::Test::HasFailure()) return;
  }
  record(most);  // 28.5x and 131 us when written (hybrid)
}

// The chain searches of the recompute model stay within their budget (Note
// [Chain work], recompute_model.h).
TEST(PlanningBoundsProperty, TheRecomputeModelsChainWorkStaysWithinItsBudget) {
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    const Case c = stress_case(seed);
    const Trace& trace = c.trace;
    const StorageAccesses accesses(trace);
    const internal::RecomputeModel model = internal::build_recompute_model(trace, accesses);
    const std::int64_t work = trace.op_count() + static_cast<std::int64_t>(trace.access_count());
    std::int64_t most_accesses = 0;
    for (OpIndex op = 0; op < trace.op_count(); ++op) {
      most_accesses = std::max(most_accesses, static_cast<std::int64_t>(trace.accesses(op).size()));
    }
    const auto candidates = static_cast<std::int64_t>(model.candidates.size());
    // The budget, the search that spends it (≤ kMaxChainOps producers) and
    // then each candidate's producer alone.
    EXPECT_LE(model.chain_work, internal::kChainWorkFactor * work +
                                    (internal::kMaxChainOps + candidates) * (1 + most_accesses))
        << "seed " << seed;
    EXPECT_FALSE(model.chain_work_cut) << "seed " << seed;  // these traces need far less
  }
}

}  // namespace
}  // namespace hyperoffload
