// Internal: copy-engine time committed to stretches of compute — the peak
// planner's neighbour-impact term. Each selected candidate spreads its transfer
// time evenly over the compute inside its gap; load(first, last) is how much of
// that committed time falls inside ops [first, last]. Two Fenwick trees give
// O(log n) range adds and range queries.
//
// With p(x) the compute before op x, a candidate adding density d over ops
// [a, b] contributes d * (p(min(x, b) + 1) - p(a)) to the load of ops [0, x]; the
// trees keep the sums of d and of d * p at the range ends.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hyperoffload::internal {

class TransferLoad {
 public:
  // compute_before[x] = compute ms of ops [0, x), for x in [0, ops].
  explicit TransferLoad(std::span<const double> compute_before)
      : compute_before_(compute_before), sums_(compute_before.size() + 1) {}

  // Spreads `transfer_ms` over the compute of ops [first, last]. No effect when
  // those ops have no compute (there is nothing to overlap with).
  void add(std::size_t first, std::size_t last, double transfer_ms) {
    const double compute = compute_before_[last + 1] - compute_before_[first];
    if (compute <= 0.0 || transfer_ms <= 0.0) return;
    const double density = transfer_ms / compute;
    update(first, density, density * compute_before_[first]);
    update(last + 1, -density, -density * compute_before_[last + 1]);
  }

  // Committed transfer ms inside ops [first, last].
  double load(std::size_t first, std::size_t last) const {
    return load(first, last, compute_before_[first], compute_before_[last + 1]);
  }
  // The same, given compute_before[first] and compute_before[last + 1], for a
  // caller that keeps them beside its other data (one cache miss less each).
  double load(std::size_t first, std::size_t last, double before_first_ms, double before_end_ms) const {
    return prefix(last + 1, before_end_ms) - prefix(first, before_first_ms);
  }

 private:
  // Load of ops [0, count); `before_ms` = compute_before[count].
  double prefix(std::size_t count, double before_ms) const {
    if (count == 0) return 0.0;
    double density = 0.0, weighted = 0.0;
    for (std::size_t i = count; i > 0; i -= i & (~i + 1)) {  // entries at positions < count
      density += sums_[i].density;
      weighted += sums_[i].weighted;
    }
    return density * before_ms - weighted;
  }
  void update(std::size_t position, double density, double weighted) {
    for (std::size_t i = position + 1; i < sums_.size(); i += i & (~i + 1)) {
      sums_[i].density += density;
      sums_[i].weighted += weighted;
    }
  }

  std::span<const double> compute_before_;
  // A Fenwick tree over range starts and ends of two sums side by side (every
  // query and update reads both at the same entries: one cache line, not two).
  struct Sums {
    double density = 0.0;   // of the densities
    double weighted = 0.0;  // of the densities, each weighted by the compute before its position
  };
  std::vector<Sums> sums_;
};

}  // namespace hyperoffload::internal
