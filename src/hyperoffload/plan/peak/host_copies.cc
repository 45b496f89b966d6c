#include "hyperoffload/plan/peak/host_copies.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "hyperoffload/model/copy_engines.h"
#include "hyperoffload/plan/peak/engine_jobs.h"

namespace hyperoffload::internal {

std::vector<HostCopy> issue_host_copies(const PeakModel& model, std::span<const std::int32_t> versions,
                                        std::span<const OpIndex> latest) {
  std::vector<HostCopy> copies(model.versions.size());
  OpIndex issued_up_to = 0;
  std::int64_t rank = 0;
  for (const std::int32_t v : versions) {
    const OpIndex last = latest[static_cast<std::size_t>(v)];
    if (last == kNoRelease) continue;
    const OpIndex copy_op = model.versions[static_cast<std::size_t>(v)].copy_op;
    OpIndex issue = std::max(copy_op, issued_up_to);
    if (issue > last) {
      issue = last;
    } else {
      issued_up_to = issue;
    }
    copies[static_cast<std::size_t>(v)] = {issue, rank++};
  }
  return copies;
}

std::vector<double> host_copy_ready_ms(const Trace& trace, const PeakModel& model, std::span<const HostCopy> copies,
                                       std::span<const double> start_ms) {
  std::vector<std::size_t> issued;
  for (std::size_t v = 0; v < copies.size(); ++v) {
    if (copies[v].issue_op >= 0) issued.push_back(v);
  }
  std::sort(issued.begin(), issued.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(copies[a].issue_op, copies[a].rank) < std::tie(copies[b].issue_op, copies[b].rank);
  });
  std::vector<double> ready_ms(model.versions.size(), 0.0);
  CopyEngineClock engines(CopyEngines::kTwo);  // the D2H queue, as the simulator times it
  for (const std::size_t v : issued) {
    ready_ms[v] = engines
                      .run(CopyDirection::kToHost, start_ms[static_cast<std::size_t>(copies[v].issue_op) + 1],
                           trace.d2h_ms(trace.storage(model.versions[v].storage).size_bytes))
                      .end_ms;
  }
  return ready_ms;
}

std::vector<double> copy_op_ready_ms(const Trace& trace, const PeakModel& model, std::span<const std::int32_t> selected,
                                     std::span<const double> start_ms) {
  std::vector<HostCopy> copies(model.versions.size());
  for (const std::int32_t k : selected) {
    const auto v = static_cast<std::size_t>(model.interior[static_cast<std::size_t>(k)].version);
    copies[v] = {model.versions[v].copy_op, static_cast<std::int64_t>(v)};
  }
  return host_copy_ready_ms(trace, model, copies, start_ms);
}

std::vector<OpIndex> first_releases(const PeakModel& model, std::span<const Placement> placements,
                                    std::span<const std::int32_t> boundary_picks) {
  std::vector<OpIndex> latest(model.versions.size(), kNoRelease);
  for (const Placement& p : placements) {
    OpIndex& at = latest[static_cast<std::size_t>(model.interior[static_cast<std::size_t>(p.candidate)].version)];
    at = std::min(at, p.release_op);
  }
  for (const std::int32_t k : boundary_picks) {
    const PeakCandidate& c = model.boundary[static_cast<std::size_t>(k)];
    OpIndex& at = latest[static_cast<std::size_t>(c.version)];
    at = std::min(at, c.start_op);
  }
  return latest;
}

HostCopyOrder order_host_copies(const PeakPass& pass, std::span<const Placement> placements,
                                HostCopySequencing sequencing) {
  const Trace& trace = pass.trace;
  const PeakModel& model = pass.model;
  const std::span<const double> start_ms = pass.start_ms;
  const DeviceMemory device = pass.device;
  // Unlimited memory: when each copy back must start at the latest so that it
  // and every copy back needed after it still make their uses on the FIFO H2D
  // engine (scheduled backwards from the last use). In a transfer-bound stretch
  // that is well before its own use minus its own copy time.
  std::vector<double> latest_start_ms;
  if (device == DeviceMemory::kUnlimited) {
    latest_start_ms.resize(placements.size());
    std::vector<std::size_t> by_use(placements.size());
    std::iota(by_use.begin(), by_use.end(), std::size_t{0});
    auto use_op = [&](std::size_t i) {
      return model.interior[static_cast<std::size_t>(placements[i].candidate)].end_op;
    };
    std::stable_sort(by_use.begin(), by_use.end(), [&](std::size_t a, std::size_t b) { return use_op(a) > use_op(b); });
    double next_ms = std::numeric_limits<double>::infinity();
    for (const std::size_t i : by_use) {
      const PeakCandidate& c = model.interior[static_cast<std::size_t>(placements[i].candidate)];
      next_ms = std::min(next_ms, start_ms[static_cast<std::size_t>(c.end_op)]) - trace.h2d_ms(c.size_bytes);
      latest_start_ms[i] = next_ms;
    }
  }
  std::vector<std::int32_t> job_of(model.versions.size(), -1);
  std::vector<std::int32_t> version_of_job;
  std::vector<EngineJob> jobs;
  for (std::size_t pi = 0; pi < placements.size(); ++pi) {
    const Placement& p = placements[pi];
    const PeakCandidate& c = model.interior[static_cast<std::size_t>(p.candidate)];
    std::int32_t& job = job_of[static_cast<std::size_t>(c.version)];
    if (job < 0) {
      const OpIndex copy_op = model.versions[static_cast<std::size_t>(c.version)].copy_op;
      job = static_cast<std::int32_t>(jobs.size());
      version_of_job.push_back(c.version);
      jobs.push_back({start_ms[static_cast<std::size_t>(copy_op) + 1], std::numeric_limits<double>::infinity(),
                      tie_key(copy_op, c.version), trace.d2h_ms(c.size_bytes)});
    }
    // On a capped device the copies back wait for room rather than for the
    // engine; there a version is needed by its first copy back's own latest
    // start, and by the op after each release.
    const double needed_ms =
        device == DeviceMemory::kUnlimited
            ? latest_start_ms[pi]
            : std::min(start_ms[static_cast<std::size_t>(c.end_op)] - trace.h2d_ms(c.size_bytes),
                       start_ms[static_cast<std::size_t>(p.release_op) + 1]);
    EngineJob& entry = jobs[static_cast<std::size_t>(job)];
    entry.deadline_ms = std::min(entry.deadline_ms, needed_ms);
  }
  HostCopyOrder result;
  result.versions.reserve(jobs.size());
  const EngineRule rule =
      sequencing == HostCopySequencing::kLeastLateness ? EngineRule::kLeastLateness : EngineRule::kWorkConserving;
  for (const std::size_t j : sequence_jobs(jobs, rule)) {
    result.versions.push_back(version_of_job[j]);
  }
  // Boundary candidates only matter below the floor: the estimate leaves them out.
  const std::vector<OpIndex> latest = first_releases(model, placements, {});
  result.ready_ms = host_copy_ready_ms(trace, model, issue_host_copies(model, result.versions, latest), start_ms);
  return result;
}

}  // namespace hyperoffload::internal
