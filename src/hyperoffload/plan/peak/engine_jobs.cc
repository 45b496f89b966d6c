#include "hyperoffload/plan/peak/engine_jobs.h"

#include <algorithm>
#include <tuple>

namespace hyperoffload::internal {

namespace {

// Job indices by available_ms, ties by index (what a stable sort of the
// indices gives), sorted on the keys copied beside the indices: an indirect
// comparison read two jobs at random (on the 1M-op chain, 416k jobs of a
// 13 MB array, most comparisons two cache misses).
std::vector<std::size_t> by_availability_of(std::span<const EngineJob> jobs) {
  std::vector<std::pair<double, std::size_t>> keyed(jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) keyed[j] = {jobs[j].available_ms, j};
  std::sort(keyed.begin(), keyed.end());
  std::vector<std::size_t> order(jobs.size());
  for (std::size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
  return order;
}

// EngineRule::kLeastLateness. A job that can start is on time while now +
// duration <= deadline, keyed by its deadline, and late after that, keyed by
// now + duration: among late jobs, by duration. The clock only advances, so a
// late job stays late; a heap by deadline - duration moves jobs from the
// on-time heap (lazily) to the late one as the clock passes them.
std::vector<std::size_t> sequence_by_least_lateness(std::span<const EngineJob> jobs, std::vector<double>* finish_ms) {
  const std::vector<std::size_t> by_availability = by_availability_of(jobs);
  // Min-heaps by (key, tie): std's heaps keep the largest by `comes_after` on top.
  auto heap_by = [&jobs](auto key) {
    return [&jobs, key](std::size_t a, std::size_t b) {
      const double ka = key(jobs[a]), kb = key(jobs[b]);
      return ka != kb ? ka > kb : jobs[a].tie > jobs[b].tie;
    };
  };
  const auto by_deadline = heap_by([](const EngineJob& j) { return j.deadline_ms; });
  const auto by_slack = heap_by([](const EngineJob& j) { return j.deadline_ms - j.duration_ms; });
  const auto by_duration = heap_by([](const EngineJob& j) { return j.duration_ms; });
  auto push = [](std::vector<std::size_t>& heap, std::size_t j, const auto& comes_after) {
    heap.push_back(j);
    std::push_heap(heap.begin(), heap.end(), comes_after);
  };
  auto pop = [](std::vector<std::size_t>& heap, const auto& comes_after) {
    std::pop_heap(heap.begin(), heap.end(), comes_after);
    const std::size_t j = heap.back();
    heap.pop_back();
    return j;
  };
  enum class State : std::uint8_t { kOnTime, kLate, kDone };
  std::vector<State> state(jobs.size(), State::kOnTime);
  std::vector<std::size_t> on_time, slack, late;  // on_time and slack also hold jobs that left them (lazy)
  std::vector<std::size_t> order;
  order.reserve(jobs.size());
  if (finish_ms != nullptr) finish_ms->assign(jobs.size(), 0.0);
  double now_ms = 0.0;
  std::size_t next_available = 0;
  while (order.size() < jobs.size()) {
    if (next_available == order.size()) {  // none can start: idle until one can
      now_ms = std::max(now_ms, jobs[by_availability[next_available]].available_ms);
    }
    for (; next_available < jobs.size() && jobs[by_availability[next_available]].available_ms <= now_ms;
         ++next_available) {
      push(on_time, by_availability[next_available], by_deadline);
      push(slack, by_availability[next_available], by_slack);
    }
    while (!slack.empty() && now_ms + jobs[slack.front()].duration_ms > jobs[slack.front()].deadline_ms) {
      const std::size_t j = pop(slack, by_slack);
      if (state[j] != State::kOnTime) continue;
      state[j] = State::kLate;
      push(late, j, by_duration);
    }
    while (!on_time.empty() && state[on_time.front()] != State::kOnTime) pop(on_time, by_deadline);
    bool take_late = !late.empty();
    if (take_late && !on_time.empty()) {
      const EngineJob& due = jobs[on_time.front()];
      const EngineJob& shortest_late = jobs[late.front()];
      const double late_key = now_ms + shortest_late.duration_ms;
      take_late = late_key != due.deadline_ms ? late_key < due.deadline_ms : shortest_late.tie < due.tie;
    }
    const std::size_t run = take_late ? pop(late, by_duration) : pop(on_time, by_deadline);
    state[run] = State::kDone;
    order.push_back(run);
    now_ms += jobs[run].duration_ms;
    if (finish_ms != nullptr) (*finish_ms)[run] = now_ms;
  }
  return order;
}

}  // namespace

std::vector<std::size_t> sequence_jobs(std::span<const EngineJob> jobs, EngineRule rule,
                                       std::vector<double>* finish_ms) {
  if (rule == EngineRule::kLeastLateness) return sequence_by_least_lateness(jobs, finish_ms);
  auto sooner = [&](std::size_t a, std::size_t b) {
    return std::tie(jobs[a].deadline_ms, jobs[a].tie) < std::tie(jobs[b].deadline_ms, jobs[b].tie);
  };
  // By (deadline, tie), unique keys: sorted on copies of the keys, as above.
  std::vector<std::size_t> by_deadline(jobs.size());
  {
    std::vector<std::tuple<double, std::int64_t, std::size_t>> keyed(jobs.size());
    for (std::size_t j = 0; j < jobs.size(); ++j) keyed[j] = {jobs[j].deadline_ms, jobs[j].tie, j};
    std::sort(keyed.begin(), keyed.end());
    for (std::size_t i = 0; i < keyed.size(); ++i) by_deadline[i] = std::get<2>(keyed[i]);
  }
  if (rule == EngineRule::kSoonestNeeded) {
    // Each job runs when it is the soonest needed: the order is by deadline,
    // each starting once it is available and the engine is free.
    double engine_free_ms = 0.0;
    if (finish_ms != nullptr) {
      finish_ms->assign(jobs.size(), 0.0);
      for (const std::size_t j : by_deadline) {
        engine_free_ms = std::max(engine_free_ms, jobs[j].available_ms) + jobs[j].duration_ms;
        (*finish_ms)[j] = engine_free_ms;
      }
    }
    return by_deadline;
  }
  const std::vector<std::size_t> by_availability = by_availability_of(jobs);
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
    if (jobs[due].available_ms > now_ms) {
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
