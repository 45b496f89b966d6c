#include "hyperoffload/plan/internal/engine_jobs.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace hyperoffload::internal {

std::vector<std::size_t> sequence_jobs(std::span<const EngineJob> jobs, EngineRule rule,
                                       std::vector<double>* finish_ms) {
  auto sooner = [&](std::size_t a, std::size_t b) {
    return std::tie(jobs[a].deadline_ms, jobs[a].tie) < std::tie(jobs[b].deadline_ms, jobs[b].tie);
  };
  std::vector<std::size_t> by_deadline(jobs.size()), by_availability(jobs.size());
  std::iota(by_deadline.begin(), by_deadline.end(), std::size_t{0});
  std::iota(by_availability.begin(), by_availability.end(), std::size_t{0});
  std::sort(by_deadline.begin(), by_deadline.end(), sooner);
  std::stable_sort(by_availability.begin(), by_availability.end(),
                   [&](std::size_t a, std::size_t b) { return jobs[a].available_ms < jobs[b].available_ms; });
  auto later = [&](std::size_t a, std::size_t b) { return sooner(b, a); };
  std::vector<std::size_t> startable;  // heap, soonest-needed on top; may hold done jobs
  std::vector<bool> done(jobs.size(), false);
  std::vector<std::size_t> order;
  order.reserve(jobs.size());
  if (finish_ms != nullptr) finish_ms->assign(jobs.size(), 0.0);
  double now_ms = 0.0;          // the sequencing clock
  double engine_free_ms = 0.0;  // the engine's estimated clock, which also waits for availability
  std::size_t next_available = 0, next_due = 0;
  while (order.size() < jobs.size()) {
    for (; next_available < jobs.size() && jobs[by_availability[next_available]].available_ms <= now_ms;
         ++next_available) {
      startable.push_back(by_availability[next_available]);
      std::push_heap(startable.begin(), startable.end(), later);
    }
    while (done[by_deadline[next_due]]) ++next_due;
    const std::size_t due = by_deadline[next_due];
    std::size_t run = due;
    if (rule != EngineRule::kSoonestNeeded && jobs[due].available_ms > now_ms) {
      while (!startable.empty() && done[startable.front()]) {
        std::pop_heap(startable.begin(), startable.end(), later);
        startable.pop_back();
      }
      const bool fills_gap =
          !startable.empty() && (rule == EngineRule::kWorkConserving ||
                                 now_ms + jobs[startable.front()].duration_ms <= jobs[due].available_ms);
      if (!fills_gap) {
        // Idle until the due copy, or an earlier one that might fill the gap,
        // can start.
        double wake_ms = jobs[due].available_ms;
        if (startable.empty() && next_available < jobs.size()) {
          wake_ms = std::min(wake_ms, jobs[by_availability[next_available]].available_ms);
        }
        now_ms = wake_ms;
        continue;
      }
      run = startable.front();
    }
    done[run] = true;
    order.push_back(run);
    now_ms += jobs[run].duration_ms;
    engine_free_ms = std::max(engine_free_ms, jobs[run].available_ms) + jobs[run].duration_ms;
    if (finish_ms != nullptr) (*finish_ms)[run] = engine_free_ms;
  }
  return order;
}

}  // namespace hyperoffload::internal
