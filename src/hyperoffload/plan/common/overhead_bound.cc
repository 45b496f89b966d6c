#include "hyperoffload/plan/common/overhead_bound.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"

namespace hyperoffload {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
// Dead inputs per producer whose keep-or-regenerate choices are enumerated
// (2^4 combinations); a producer with more costs only its own duration, which
// only weakens the bound.
constexpr std::size_t kMaxChoiceInputs = 4;
// Ops evaluated at most, and the work (storages + accesses per op evaluated,
// summed) above which fewer are.
constexpr std::size_t kMaxEvaluatedOps = 32;
constexpr double kWorkPerTrace = 64.0 * (1 << 20);
constexpr int kBisectionSteps = 200;

// What the trace says once, for every op evaluated.
struct TraceFacts {
  StorageAccesses accesses;
  std::vector<std::int64_t> resident_bytes;  // unplanned, per op
  std::vector<OpIndex> producer;             // recompute_producers
  std::vector<double> compute_before_ms;     // ops [0, q): op_start_ms

  explicit TraceFacts(const Trace& trace)
      : accesses(trace),
        resident_bytes(unplanned_resident_bytes(trace, accesses)),
        producer(recompute_producers(trace, accesses)),
        compute_before_ms(op_start_ms(trace)) {}
};

// The bytes of the distinct storages an op accesses.
std::int64_t touched_bytes(const Trace& trace, OpIndex op, std::vector<OpIndex>& seen_at) {
  std::int64_t bytes = 0;
  for (const Access& access : trace.accesses(op)) {
    OpIndex& seen = seen_at[static_cast<std::size_t>(access.storage)];
    if (seen == op) continue;
    seen = op;
    bytes += std::max<std::int64_t>(0, trace.storage(access.storage).size_bytes);
  }
  return bytes;
}

// One producer of 3. (overhead_bound.h): up to `bytes` at `ms_per_byte`.
struct Item {
  double ms_per_byte;
  std::int64_t bytes;
};

// The bound at one op q with excess E(q) > 0 (the argument in overhead_bound.h).
class OpBound {
 public:
  OpBound(const Trace& trace, const TraceFacts& facts, OpIndex q, std::int64_t budget, const StallBoundOptions& options,
          std::int64_t cap_slack)
      : trace_(trace), facts_(facts), q_(q), cap_slack_(cap_slack) {
    excess_ = facts.resident_bytes[static_cast<std::size_t>(q)] - budget;
    collect();
    const double compute = facts.compute_before_ms.back();
    after_ms_ = compute - facts.compute_before_ms[static_cast<std::size_t>(q) + 1];
    before_ms_ = facts.compute_before_ms[static_cast<std::size_t>(q)];
    h2d_bytes_per_ms_ = trace.h2d_bandwidth_gib_per_s() * static_cast<double>(kBytesPerGiB) / 1e3;
    d2h_bytes_per_ms_ = trace.d2h_bandwidth_gib_per_s() * static_cast<double>(kBytesPerGiB) / 1e3;
    capped_ = options.device_memory == DeviceMemory::kBudget;
  }

  // K(E(q)): the least re-run time that takes the whole excess off the
  // device, with no copies (recompute_only_lower_bound_ms).
  double least_recompute_ms() const { return knapsack_ms(static_cast<double>(excess_)); }

  // The least h that is feasible(), by bisection: the knapsack's part only
  // falls as h grows.
  double least_overhead_ms() const {
    if (feasible(0.0)) return 0.0;
    // Enough copy time for every byte: K(0) = 0.
    const auto excess = static_cast<double>(excess_);
    double high = std::max(0.0, excess / h2d_bytes_per_ms_ - after_ms_);
    if (capped_) high = std::max(high, (excess - static_cast<double>(cap_slack_)) / d2h_bytes_per_ms_ - before_ms_);
    double low = 0.0;
    for (int step = 0; step < kBisectionSteps && high - low > 1e-12 * std::max(1.0, high); ++step) {
      const double mid = 0.5 * (low + high);
      (feasible(mid) ? high : low) = mid;
    }
    // `low` is infeasible, so the bound is at least it; `high` may exceed the
    // least h by the last step's width.
    return low;
  }

 private:
  // Whether stall plus recompute h can take E(q) off the device: the copy
  // engines' bytes of 1. and 2. within h, the items' for the rest. On a
  // capped device the bytes of 1. and 2. beyond the cap's slack must also
  // have completed their copies to host.
  bool feasible(double h) const {
    const auto excess = static_cast<double>(excess_);
    const double back = (after_ms_ + h) * h2d_bytes_per_ms_;
    double items = excess - (back + static_cast<double>(retained_bytes_));
    if (capped_) {
      items = std::max(items, excess - static_cast<double>(cap_slack_) - (before_ms_ + h) * d2h_bytes_per_ms_);
    }
    return knapsack_ms(items) <= h;
  }

  // K(Y): the least cost of Y bytes from the items, cheapest per byte first
  // (infinite beyond their bytes).
  double knapsack_ms(double bytes) const {
    if (bytes <= 0.0) return 0.0;
    double ms = 0.0;
    for (const Item& item : items_) {
      const double take = std::min(bytes, static_cast<double>(item.bytes));
      ms += take * item.ms_per_byte;
      bytes -= take;
      if (bytes <= 0.0) return ms;
    }
    return kInfinity;
  }

  bool dead(StorageIndex s) const {
    const StorageInfo& info = trace_.storage(s);
    return info.size_bytes > 0 && !info.retained() && facts_.accesses.accessed(s) &&
           facts_.accesses.last_op(s) < q_;
  }

  // The storages of 1. and the items of 3. at q.
  void collect() {
    std::vector<bool> touched(static_cast<std::size_t>(trace_.storage_count()), false);
    for (const Access& access : trace_.accesses(q_)) touched[static_cast<std::size_t>(access.storage)] = true;
    std::vector<std::int64_t> item_bytes(static_cast<std::size_t>(trace_.op_count()), 0);
    std::vector<OpIndex> producers;
    for (StorageIndex s = 0; s < trace_.storage_count(); ++s) {
      const StorageInfo& info = trace_.storage(s);
      if (info.size_bytes <= 0 || !facts_.accesses.accessed(s)) continue;
      const OpIndex first = facts_.accesses.first_op(s);
      const OpIndex last = facts_.accesses.last_op(s);
      if (first >= q_ || touched[static_cast<std::size_t>(s)]) continue;
      if (last < q_) {
        if (info.retained()) retained_bytes_ += info.size_bytes;  // 1.
        continue;
      }
      // Accessed before and after q: 2. or 3.
      const OpIndex k = facts_.producer[static_cast<std::size_t>(s)];
      if (k < 0) continue;
      if (item_bytes[static_cast<std::size_t>(k)] == 0) producers.push_back(k);
      item_bytes[static_cast<std::size_t>(k)] += info.size_bytes;
    }
    // Sharing: the items reading each dead input, and the items each re-run
    // serves (its own item, and every item reading a dead output of it).
    std::vector<std::int32_t> readers(static_cast<std::size_t>(trace_.storage_count()), 0);
    std::vector<std::int32_t> served(static_cast<std::size_t>(trace_.op_count()), 0);
    std::vector<OpIndex> counted_for(static_cast<std::size_t>(trace_.op_count()), -1);
    std::vector<std::vector<StorageIndex>> inputs_of;  // per entry of `producers`
    inputs_of.reserve(producers.size());
    for (const OpIndex k : producers) {
      ++served[static_cast<std::size_t>(k)];
      inputs_of.push_back(dead_inputs(k));
      for (const StorageIndex u : inputs_of.back()) {
        ++readers[static_cast<std::size_t>(u)];
        const OpIndex r = facts_.producer[static_cast<std::size_t>(u)];
        if (r >= 0 && counted_for[static_cast<std::size_t>(r)] != k) {
          counted_for[static_cast<std::size_t>(r)] = k;
          ++served[static_cast<std::size_t>(r)];
        }
      }
    }
    for (std::size_t p = 0; p < producers.size(); ++p) {
      const OpIndex k = producers[p];
      const auto bytes = static_cast<double>(item_bytes[static_cast<std::size_t>(k)]);
      const double own_ms = trace_.op_duration_ms(k) / served[static_cast<std::size_t>(k)];
      const std::vector<StorageIndex>& inputs = inputs_of[p];
      double best = own_ms / bytes;
      if (inputs.size() <= kMaxChoiceInputs) {
        // Each dead input is regenerated (its producer's re-run, shared) or
        // kept (its bytes, shared, stay on the device or take copy time).
        best = kInfinity;
        for (std::uint32_t regenerate = 0; regenerate < (1U << inputs.size()); ++regenerate) {
          double ms = own_ms;
          double net = bytes;
          for (std::size_t i = 0; i < inputs.size(); ++i) {
            const StorageIndex u = inputs[i];
            const OpIndex r = facts_.producer[static_cast<std::size_t>(u)];
            if ((regenerate >> i) & 1U) {
              if (r < 0) {
                ms = kInfinity;
                break;
              }
              ms += trace_.op_duration_ms(r) / served[static_cast<std::size_t>(r)];
            } else {
              net -= static_cast<double>(trace_.storage(u).size_bytes) / readers[static_cast<std::size_t>(u)];
            }
          }
          if (ms < kInfinity && net > 0.0) best = std::min(best, ms / net);
        }
      }
      if (best < kInfinity) items_.push_back({best, item_bytes[static_cast<std::size_t>(k)]});
    }
    std::sort(items_.begin(), items_.end(), [](const Item& a, const Item& b) { return a.ms_per_byte < b.ms_per_byte; });
  }

  // The distinct storages op k reads that are dead at q.
  std::vector<StorageIndex> dead_inputs(OpIndex k) const {
    std::vector<StorageIndex> inputs;
    for (const Access& access : trace_.accesses(k)) {
      if (access.kind != AccessKind::kRead || !dead(access.storage)) continue;
      if (std::find(inputs.begin(), inputs.end(), access.storage) == inputs.end()) inputs.push_back(access.storage);
    }
    return inputs;
  }

  const Trace& trace_;
  const TraceFacts& facts_;
  OpIndex q_;
  std::int64_t cap_slack_ = 0;  // the device's bytes beyond the budget
  std::int64_t excess_ = 0;
  std::int64_t retained_bytes_ = 0;  // 1.
  std::vector<Item> items_;          // 3., cheapest per byte first
  double after_ms_ = 0.0;
  double before_ms_ = 0.0;
  double h2d_bytes_per_ms_ = 0.0;
  double d2h_bytes_per_ms_ = 0.0;
  bool capped_ = false;
};

// The ops evaluated: the largest excess overall and in each slice.
std::vector<OpIndex> ops_to_evaluate(const Trace& trace, const TraceFacts& facts, std::int64_t budget) {
  const OpIndex ops = trace.op_count();
  const double work = static_cast<double>(trace.storage_count()) + static_cast<double>(trace.access_count());
  const auto count = static_cast<std::size_t>(
      std::clamp(kWorkPerTrace / std::max(work, 1.0), 1.0, static_cast<double>(kMaxEvaluatedOps)));
  std::vector<OpIndex> chosen;
  auto largest_in = [&](OpIndex begin, OpIndex end) {
    OpIndex best = -1;
    for (OpIndex op = begin; op < end; ++op) {
      const std::int64_t bytes = facts.resident_bytes[static_cast<std::size_t>(op)];
      if (bytes > budget && (best < 0 || bytes > facts.resident_bytes[static_cast<std::size_t>(best)])) best = op;
    }
    return best;
  };
  if (const OpIndex peak = largest_in(0, ops); peak >= 0) chosen.push_back(peak);
  if (count > 1) {
    const std::size_t slices = count - 1;
    for (std::size_t i = 0; i < slices; ++i) {
      const auto begin = static_cast<OpIndex>(static_cast<std::int64_t>(ops) * static_cast<std::int64_t>(i) /
                                              static_cast<std::int64_t>(slices));
      const auto end = static_cast<OpIndex>(static_cast<std::int64_t>(ops) * static_cast<std::int64_t>(i + 1) /
                                            static_cast<std::int64_t>(slices));
      const OpIndex op = largest_in(begin, end);
      if (op >= 0 && std::find(chosen.begin(), chosen.end(), op) == chosen.end()) chosen.push_back(op);
    }
  }
  return chosen;
}

// The largest of `at_op(facts, q)` over the ops q evaluated: the argument of
// overhead_bound.h at each, the bound at the worst. nullopt when some op
// touches more than the budget (then no plan fits it).
template <typename AtOp>
std::optional<double> largest_over_evaluated_ops(const Trace& trace, std::int64_t budget_bytes, AtOp at_op) {
  if (trace.op_count() == 0) return 0.0;
  std::vector<OpIndex> seen_at(static_cast<std::size_t>(trace.storage_count()), -1);
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    if (touched_bytes(trace, op, seen_at) > budget_bytes) return std::nullopt;
  }
  const TraceFacts facts(trace);
  double bound = 0.0;
  for (const OpIndex q : ops_to_evaluate(trace, facts, budget_bytes)) bound = std::max(bound, at_op(facts, q));
  return bound;
}

}  // namespace

std::optional<double> overhead_lower_bound_ms(const Trace& trace, std::int64_t budget_bytes,
                                              const StallBoundOptions& options,
                                              std::optional<std::int64_t> memory_cap_bytes) {
  const std::int64_t cap_slack = std::max<std::int64_t>(0, memory_cap_bytes.value_or(budget_bytes) - budget_bytes);
  return largest_over_evaluated_ops(trace, budget_bytes, [&](const TraceFacts& facts, OpIndex q) {
    return OpBound(trace, facts, q, budget_bytes, options, cap_slack).least_overhead_ms();
  });
}

std::optional<double> recompute_only_lower_bound_ms(const Trace& trace, std::int64_t budget_bytes) {
  return largest_over_evaluated_ops(trace, budget_bytes, [&](const TraceFacts& facts, OpIndex q) {
    return OpBound(trace, facts, q, budget_bytes, {}, 0).least_recompute_ms();
  });
}

}  // namespace hyperoffload
