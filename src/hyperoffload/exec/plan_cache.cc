#include "hyperoffload/exec/plan_cache.h"

#include <algorithm>

namespace hyperoffload {

const CachedPlan* PlanCache::choose(std::optional<std::uint64_t> tag, const StepLog& seen, bool complete,
                                    const Admits& admits) const {
  auto fits = [&](const CachedPlan& cached) {
    return (!tag || cached.program_tag == *tag) && (!admits || admits(cached)) &&
           matches_prefix(*cached.plan, seen, complete);
  };
  if (const CachedPlan* predicted = this->predicted(); predicted != nullptr && fits(*predicted)) return predicted;
  for (const CachedPlan& cached : plans_) {
    if (fits(cached)) return &cached;
  }
  return nullptr;
}

const CachedPlan* PlanCache::find(const ReplayPlan* plan) const {
  const auto it = std::find_if(plans_.begin(), plans_.end(),
                               [plan](const CachedPlan& cached) { return cached.plan.get() == plan; });
  return it != plans_.end() ? &*it : nullptr;
}

bool PlanCache::any_recomputes(std::uint64_t tag, OpIndex op) const {
  return std::any_of(plans_.begin(), plans_.end(), [&](const CachedPlan& cached) {
    return cached.program_tag == tag && op < cached.plan->trace().op_count() && cached.plan->recomputed(op);
  });
}

const CachedPlan& PlanCache::insert(CachedPlan entry) {
  std::uint64_t program = next_program_;
  std::erase_if(plans_, [&](const CachedPlan& cached) {
    const bool same = cached.program_tag == entry.program_tag && same_program(*cached.plan, *entry.plan);
    if (same) program = cached.program;
    return same;
  });
  if (program == next_program_) ++next_program_;
  entry.program = program;
  plans_.push_front(std::move(entry));
  // The warmup ran this program to its end.
  remember_program(program);
  while (size() > max_plans_) {
    plans_.pop_back();
    ++stats_.evictions;
  }
  stats_.plans_cached = size();
  return plans_.front();
}

void PlanCache::completed(const ReplayPlan* plan, std::int64_t host_pool_peak_bytes) {
  const auto ran = std::find_if(plans_.begin(), plans_.end(),
                                [plan](const CachedPlan& cached) { return cached.plan.get() == plan; });
  if (ran == plans_.end()) return;
  ran->host_pool_peak_bytes = std::max(ran->host_pool_peak_bytes, host_pool_peak_bytes);
  remember_program(ran->program);
  plans_.splice(plans_.begin(), plans_, ran);
}

std::int64_t PlanCache::host_pool_footprint_bytes() const {
  std::int64_t bytes = 0;
  for (const CachedPlan& cached : plans_) bytes = std::max(bytes, cached.host_pool_peak_bytes);
  return bytes;
}

void PlanCache::erase(const ReplayPlan* plan) {
  std::erase_if(plans_, [plan](const CachedPlan& cached) { return cached.plan.get() == plan; });
  stats_.plans_cached = size();
}

const CachedPlan* PlanCache::predicted() const {
  // The most recent earlier occurrence of the longest run of recent programs
  // that occurred before; what followed it, if its plan is still cached.
  const std::size_t n = recent_programs_.size();
  for (std::size_t k = std::min(kPredictionContext, n == 0 ? 0 : n - 1); k >= 1; --k) {
    // Occurrences of the last k programs ending at `end` < n - 1, latest first.
    for (std::size_t end = n - 1; end-- >= k;) {
      bool same = true;
      for (std::size_t j = 0; j < k && same; ++j) same = recent_programs_[end - j] == recent_programs_[n - 1 - j];
      if (!same) continue;
      const std::uint64_t next = recent_programs_[end + 1];
      const auto it = std::find_if(plans_.begin(), plans_.end(),
                                   [next](const CachedPlan& cached) { return cached.program == next; });
      if (it != plans_.end()) return &*it;
      break;  // evicted: a shorter run may still name a cached one
    }
  }
  return plans_.empty() ? nullptr : &plans_.front();
}

void PlanCache::remember_program(std::uint64_t program) {
  recent_programs_.push_back(program);
  if (recent_programs_.size() > kRecentPrograms) recent_programs_.pop_front();
}

}  // namespace hyperoffload
