#include "hyperoffload/plan/optimal/residency_milp.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/budget.h"

namespace hyperoffload::internal {
namespace {

constexpr OpIndex kNever = std::numeric_limits<OpIndex>::max();
// Values within this of 1 count as 1 when decoding binaries.
constexpr double kIntegerTolerance = 1e-6;

// The first op of `ops` (ascending) after `op`, or kNever.
OpIndex next_after(const std::vector<OpIndex>& ops, OpIndex op) {
  const auto it = std::upper_bound(ops.begin(), ops.end(), op);
  return it == ops.end() ? kNever : *it;
}

bool contains(const std::vector<OpIndex>& ops, OpIndex op) { return std::binary_search(ops.begin(), ops.end(), op); }

bool is_one(std::span<const double> values, int column) {
  return column >= 0 && values[static_cast<std::size_t>(column)] > 1.0 - kIntegerTolerance;
}

double value_of(std::span<const double> values, int column) {
  return column >= 0 ? values[static_cast<std::size_t>(column)] : 0.0;
}

void push_unique(std::vector<StorageIndex>& list, StorageIndex s) {
  if (std::find(list.begin(), list.end(), s) == list.end()) list.push_back(s);
}

}  // namespace

const ResidencyMilp::Version* ResidencyMilp::StorageModel::version_before(OpIndex t) const {
  const Version* found = nullptr;
  for (const Version& version : versions) {
    if (version.copy_op >= t) break;
    found = &version;
  }
  return found;
}

Result<ResidencyMilp> ResidencyMilp::build(const Trace& trace, std::int64_t budget_bytes,
                                           const ResidencyMilpOptions& options) {
  if (trace.op_count() > options.max_ops) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("the optimal planner takes traces of at most {} ops; this one has {} "
                                  "(plan it with the hybrid or peak planner)",
                                  options.max_ops, trace.op_count()));
  }
  ResidencyMilp milp;
  milp.trace_ = &trace;
  milp.budget_bytes_ = budget_bytes;
  milp.options_ = options;
  milp.index_trace();
  // Times in the program are in units of the mean op duration, so that its
  // coefficients are near 1 whatever the trace's scale (tiny coefficients slow
  // the LP solves down by orders of magnitude).
  const double mean_ms = trace.op_count() > 0 ? trace.total_compute_ms() / trace.op_count() : 0.0;
  milp.time_unit_ms_ = mean_ms > 0.0 ? mean_ms : 1.0;
  milp.find_floor();
  HO_RETURN_IF_ERROR(milp.check_floor());
  milp.find_free_gaps();
  milp.find_candidates();
  HO_RETURN_IF_ERROR(milp.allocate_cells());
  milp.add_columns();
  milp.add_rows();
  if (static_cast<std::int64_t>(milp.problem_.column_count()) > options.max_columns) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("the optimal planner's program for this trace and budget would have {} variables, "
                                  "more than the {} it takes (plan it with the hybrid or peak planner)",
                                  milp.problem_.column_count(), options.max_columns));
  }
  return milp;
}

void ResidencyMilp::index_trace() {
  const Trace& trace = *trace_;
  const StorageAccesses accesses(trace);
  model_of_.assign(static_cast<std::size_t>(trace.storage_count()), -1);
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (!accesses.accessed(s)) continue;
    StorageModel m;
    m.index = s;
    m.id = trace.storage(s).id;
    m.size_bytes = trace.storage(s).size_bytes;
    m.retained = trace.storage(s).retained();
    for (const StorageAccess& access : accesses.of(s)) {
      if (m.accesses.empty() || m.accesses.back() != access.op) m.accesses.push_back(access.op);
      if (access.kind == AccessKind::kWrite && (m.writes.empty() || m.writes.back() != access.op)) {
        m.writes.push_back(access.op);
      }
    }
    m.first = m.accesses.front();
    m.last = m.accesses.back();
    m.end = m.retained ? trace.op_count() - 1 : m.last;
    model_of_[static_cast<std::size_t>(s)] = static_cast<int>(storages_.size());
    storages_.push_back(std::move(m));
  }
  reads_.assign(static_cast<std::size_t>(trace.op_count()), {});
  writes_.assign(static_cast<std::size_t>(trace.op_count()), {});
  for (OpIndex k = 0; k < trace.op_count(); ++k) {
    if (!trace.op_recomputable(k)) continue;
    for (const Access& access : trace.accesses(k)) {
      push_unique(access.kind == AccessKind::kWrite ? writes_[static_cast<std::size_t>(k)]
                                                    : reads_[static_cast<std::size_t>(k)],
                  access.storage);
    }
  }
  unplanned_ = unplanned_resident_bytes(trace, accesses);
}

void ResidencyMilp::find_floor() {
  // Per op: what it accesses, plus retained storages after their last access
  // (which this model, like the other planners, keeps resident to the end).
  const auto ops = static_cast<std::size_t>(trace_->op_count());
  std::vector<std::int64_t> accessed(ops, 0);
  std::vector<std::int64_t> retained_delta(ops + 1, 0);
  for (const StorageModel& m : storages_) {
    for (const OpIndex t : m.accesses) accessed[static_cast<std::size_t>(t)] += m.size_bytes;
    if (m.retained) {
      retained_delta[static_cast<std::size_t>(m.last) + 1] += m.size_bytes;
      retained_delta[ops] -= m.size_bytes;
    }
  }
  std::int64_t retained = 0;
  floor_ = {};
  floor_retained_bytes_ = 0;
  for (std::size_t t = 0; t < ops; ++t) {
    retained += retained_delta[t];
    const std::int64_t bytes = accessed[t] + retained;
    if (floor_.op < 0 || bytes > floor_.bytes) {
      floor_ = {static_cast<OpIndex>(t), bytes};
      floor_retained_bytes_ = retained;
    }
  }
}

Status ResidencyMilp::check_floor() const {
  if (floor_.op >= 0 && floor_.bytes > budget_bytes_) {
    return make_error(
        ErrorCode::kInvalidArgument,
        fmt::format("budget {} ({} bytes) is below what op {} ({}) needs on the device while it runs: {} ({} bytes{}); "
                    "no schedule fits (raise the budget to at least {} bytes)",
                    format_bytes(budget_bytes_), budget_bytes_, floor_.op, trace_->op_name(floor_.op),
                    format_bytes(floor_.bytes), floor_.bytes,
                    floor_retained_bytes_ > 0
                        ? fmt::format(", of which {} bytes are retained storages after their last access",
                                      floor_retained_bytes_)
                        : std::string(""),
                    floor_.bytes));
  }
  return ok_status();
}

UnavoidableFloor ResidencyMilp::floor_of(const Trace& trace) {
  ResidencyMilp milp;
  milp.trace_ = &trace;
  milp.index_trace();
  milp.find_floor();
  return milp.floor_;
}

void ResidencyMilp::find_free_gaps() {
  // A gap (between consecutive accesses) is worth moving only if it covers an
  // op whose unplanned memory is over the budget: elsewhere keeping the
  // storage costs nothing.
  const auto ops = static_cast<std::size_t>(trace_->op_count());
  std::vector<std::int32_t> over_prefix(ops + 1, 0);
  for (std::size_t t = 0; t < ops; ++t) over_prefix[t + 1] = over_prefix[t] + (unplanned_[t] > budget_bytes_ ? 1 : 0);
  free_gaps_.assign(storages_.size(), {});
  for (std::size_t i = 0; i < storages_.size(); ++i) {
    const StorageModel& m = storages_[i];
    if (m.size_bytes == 0) continue;
    for (std::size_t g = 0; g + 1 < m.accesses.size(); ++g) {
      const OpIndex a = m.accesses[g];
      const OpIndex b = m.accesses[g + 1];
      if (b - a >= 2 && over_prefix[static_cast<std::size_t>(b)] - over_prefix[static_cast<std::size_t>(a) + 1] > 0) {
        free_gaps_[i].push_back({a, b});
      }
    }
  }
}

bool ResidencyMilp::fixed_resident(int model, OpIndex t) const {
  const StorageModel& m = storages_[static_cast<std::size_t>(model)];
  if (m.size_bytes == 0) return true;
  if (t > m.last) return m.retained;
  for (const auto& [a, b] : free_gaps_[static_cast<std::size_t>(model)]) {
    if (a < t && t < b) return false;
  }
  return true;
}

OpIndex ResidencyMilp::creator(int model, OpIndex t) const {
  // The recomputable op whose output is the storage's data before op t: a
  // recomputable op writes only storages it creates, so it is the first access,
  // and no other write may come between it and t.
  const StorageModel& m = storages_[static_cast<std::size_t>(model)];
  if (m.writes.empty() || m.writes.front() != m.first || !trace_->op_recomputable(m.first)) return -1;
  return next_after(m.writes, m.first) >= t ? m.first : -1;
}

bool ResidencyMilp::valid_candidate(OpIndex k, OpIndex t) const {
  if (t < k + 2) return false;  // right after k nothing can have been released
  for (const auto* list : {&reads_[static_cast<std::size_t>(k)], &writes_[static_cast<std::size_t>(k)]}) {
    for (const StorageIndex s : *list) {
      const int model = model_of_[static_cast<std::size_t>(s)];
      if (next_after(storages_[static_cast<std::size_t>(model)].writes, k) < t) return false;  // stale input or output
    }
  }
  return true;
}

void ResidencyMilp::find_candidates() {
  std::map<std::pair<OpIndex, OpIndex>, int> depth_of;  // (at, source) -> depth
  std::deque<Candidate> queue;
  auto offer = [&](OpIndex k, OpIndex t, int depth) {
    if (k < 0 || depth > options_.max_chain_depth || !valid_candidate(k, t)) return;
    if (depth_of.emplace(std::pair{t, k}, depth).second) queue.push_back({k, t, -1, depth});
  };
  for (std::size_t i = 0; i < storages_.size(); ++i) {
    for (const auto& [a, b] : free_gaps_[i]) offer(creator(static_cast<int>(i), b), b, 1);
  }
  extension_end_.assign(storages_.size(), -1);
  while (!queue.empty()) {
    const Candidate c = queue.front();
    queue.pop_front();
    for (const StorageIndex input : reads_[static_cast<std::size_t>(c.source)]) {
      const int model = model_of_[static_cast<std::size_t>(input)];
      const StorageModel& m = storages_[static_cast<std::size_t>(model)];
      if (c.at > m.last && !m.retained) {
        extension_end_[static_cast<std::size_t>(model)] = std::max(extension_end_[static_cast<std::size_t>(model)], c.at);
      }
      if (!fixed_resident(model, c.at)) offer(creator(model, c.at), c.at, c.depth + 1);
    }
  }
  for (const auto& [key, depth] : depth_of) candidates_.push_back({key.second, key.first, -1, depth});
  candidates_at_.assign(static_cast<std::size_t>(trace_->op_count()), {});
  for (std::size_t c = 0; c < candidates_.size(); ++c) {
    candidates_at_[static_cast<std::size_t>(candidates_[c].at)].push_back(static_cast<int>(c));
  }
}

Status ResidencyMilp::allocate_cells() {
  free_cells_ = 0;
  for (std::size_t i = 0; i < storages_.size(); ++i) {
    StorageModel& m = storages_[i];
    m.end = std::max(m.end, extension_end_[i]);
    const auto cells = static_cast<std::size_t>(m.end - m.first + 1);
    m.x.assign(cells, -1);
    m.h.assign(cells, -1);
    m.pending.assign(cells, -1);
    m.work_pre.assign(cells, -1);
    m.work_mid.assign(cells, -1);
    m.work_rest.assign(cells, -1);
    if (m.size_bytes == 0) continue;
    // Free cells get their columns in add_columns(); mark them with -2 here.
    for (const auto& [a, b] : free_gaps_[i]) {
      for (OpIndex t = a + 1; t < b; ++t) m.x[static_cast<std::size_t>(m.cell(t))] = -2;
      free_cells_ += b - a - 1;
    }
    if (!m.retained) {
      for (OpIndex t = m.last + 1; t <= m.end; ++t) m.x[static_cast<std::size_t>(m.cell(t))] = -2;
      free_cells_ += m.end - m.last;
    }
    // Versions: the data after each write op, and the first data if it is read first.
    if (!contains(m.writes, m.first)) m.versions.push_back({m.first, 0, -1, -1, 0});
    for (const OpIndex w : m.writes) m.versions.push_back({w, 0, -1, -1, 0});
    for (std::size_t v = 0; v < m.versions.size(); ++v) {
      m.versions[v].end_op = v + 1 < m.versions.size() ? m.versions[v + 1].copy_op : m.end;
    }
  }
  // Each free cell costs at most six columns (residency, reload, pending H2D,
  // two H2D work parts, D2H progress), plus one more D2H part on a capped device.
  const std::int64_t estimate = 7 * free_cells_ + static_cast<std::int64_t>(candidates_.size()) + trace_->op_count();
  if (estimate > 4 * options_.max_columns) {
    return make_error(ErrorCode::kInvalidArgument,
                      fmt::format("the optimal planner's program for this trace and budget would have about {} "
                                  "variables, more than the {} it takes (plan it with the hybrid or peak planner)",
                                  estimate, options_.max_columns));
  }
  return ok_status();
}

void ResidencyMilp::add_columns() {
  const Trace& trace = *trace_;
  const bool capped = options_.device_memory == DeviceMemory::kBudget;
  stall_col_.resize(static_cast<std::size_t>(trace.op_count()));
  for (OpIndex t = 0; t < trace.op_count(); ++t) {
    problem_.cost_offset += duration(t);
    stall_col_[static_cast<std::size_t>(t)] = problem_.add_column(0.0, kMilpInfinity, 1.0, false);
  }
  for (Candidate& c : candidates_) c.column = problem_.add_binary(duration(c.source));
  for (StorageModel& m : storages_) {
    for (int& x : m.x) {
      if (x == -2) x = problem_.add_binary();
    }
    // Reloads: before op t, when s may be off the device during op t-1 and the
    // data current then can have been copied to host in a slot before t.
    std::vector<OpIndex> last_reload(m.versions.size(), -1);
    for (OpIndex t = m.first + 1; t <= m.end; ++t) {
      if (m.x_at(t - 1) < 0) continue;
      const Version* version = m.version_before(t);
      if (version == nullptr || version->copy_op > t - 2) continue;
      m.h[static_cast<std::size_t>(m.cell(t))] = problem_.add_binary();
      last_reload[static_cast<std::size_t>(version - m.versions.data())] = t;
    }
    const double d2h_ms = d2h(m.size_bytes);
    for (std::size_t v = 0; v < m.versions.size(); ++v) {
      if (last_reload[v] < 0) continue;
      Version& version = m.versions[v];
      version.d2h_slots = last_reload[v] - 1 - version.copy_op;
      version.d2h_first_col = static_cast<int>(problem_.column_count());
      for (int i = 0; i < version.d2h_slots; ++i) problem_.add_column(0.0, d2h_ms, 0.0, false);
      if (capped) {
        version.d2h_pre_first_col = static_cast<int>(problem_.column_count());
        for (int i = 0; i < version.d2h_slots; ++i) problem_.add_column(0.0, d2h_ms, 0.0, false);
      }
    }
    // H2D progress, from a possible reload to the need point that closes its run.
    const double h2d_ms = h2d(m.size_bytes);
    bool active = false;
    for (OpIndex t = m.first; t <= m.end; ++t) {
      const auto cell = static_cast<std::size_t>(m.cell(t));
      if (m.h[cell] >= 0) active = true;
      if (!active) continue;
      m.pending[cell] = problem_.add_column(0.0, h2d_ms, 0.0, false);
      m.work_pre[cell] = problem_.add_column(0.0, h2d_ms, 0.0, false);
      if (!candidates_at_[static_cast<std::size_t>(t)].empty()) {
        m.work_mid[cell] = problem_.add_column(0.0, h2d_ms, 0.0, false);
      }
      if (m.x[cell] < 0) {
        active = false;  // a fixed cell is an access: the run ends here, nothing left after the stall window
      } else {
        m.work_rest[cell] = problem_.add_column(0.0, h2d_ms, 0.0, false);
      }
    }
  }
}

void ResidencyMilp::add_rows() {
  const Trace& trace = *trace_;
  const bool capped = options_.device_memory == DeviceMemory::kBudget;
  const auto ops = static_cast<std::size_t>(trace.op_count());
  std::vector<MilpTerm> terms;
  auto row = [&](double lower, double upper) {
    problem_.add_row(terms, lower, upper);
    terms.clear();
  };
  // Per slot: D2H work, D2H work in the stall window (capped), H2D work, H2D
  // work in the stall window, H2D work during the recomputes.
  std::vector<std::vector<MilpTerm>> d2h_slot(ops), d2h_pre_slot(ops), h2d_slot(ops), h2d_pre_slot(ops),
      h2d_mid_slot(ops);

  for (const StorageModel& m : storages_) {
    const double d2h_ms = d2h(m.size_bytes);
    const double h2d_ms = h2d(m.size_bytes);
    // Residency: a storage becomes resident only by a reload or a recompute.
    for (OpIndex t = m.first + 1; t <= m.end; ++t) {
      const int before = m.x_at(t - 1);
      if (before < 0) continue;  // resident during op t-1: nothing to constrain
      const int now = m.x_at(t);
      const int reload = m.h[static_cast<std::size_t>(m.cell(t))];
      if (now >= 0) terms.push_back({now, 1.0});
      terms.push_back({before, -1.0});
      if (reload >= 0) terms.push_back({reload, -1.0});
      for (const int c : candidates_at_[static_cast<std::size_t>(t)]) {
        const auto& outputs = writes_[static_cast<std::size_t>(candidates_[static_cast<std::size_t>(c)].source)];
        if (std::find(outputs.begin(), outputs.end(), m.index) != outputs.end()) {
          terms.push_back({candidates_[static_cast<std::size_t>(c)].column, -1.0});
        }
      }
      row(-kMilpInfinity, now >= 0 ? 0.0 : -1.0);
      if (reload >= 0) {
        terms = {{reload, 1.0}, {before, 1.0}};  // no reload of a storage still resident
        row(-kMilpInfinity, 1.0);
      }
    }
    // On unlimited memory a release frees at once and its copy to host runs on
    // regardless, so releasing later than the gap's first op never helps:
    // within a free gap the storage is off, then back (x does not decrease).
    // The same optimum with far fewer equivalent solutions to search.
    if (!capped) {
      for (std::size_t g = 0; g < free_gaps_[static_cast<std::size_t>(&m - storages_.data())].size(); ++g) {
        const auto [a, b] = free_gaps_[static_cast<std::size_t>(&m - storages_.data())][g];
        for (OpIndex t = a + 1; t + 1 < b; ++t) {
          terms = {{m.x_at(t), 1.0}, {m.x_at(t + 1), -1.0}};
          row(-kMilpInfinity, 0.0);
        }
      }
    }
    // D2H progress of each version that some reload restores.
    for (const Version& version : m.versions) {
      if (version.d2h_first_col < 0) continue;
      for (int i = 0; i < version.d2h_slots; ++i) {
        const OpIndex u = version.copy_op + 1 + i;
        const int done = version.d2h_first_col + i;
        const int done_before = i > 0 ? done - 1 : -1;
        // Work in slot u: done - done_before.
        d2h_slot[static_cast<std::size_t>(u)].push_back({done, 1.0});
        if (done_before >= 0) d2h_slot[static_cast<std::size_t>(u)].push_back({done_before, -1.0});
        const int pre = capped ? version.d2h_pre_first_col + i : -1;
        terms.push_back({done, 1.0});
        if (done_before >= 0) terms.push_back({done_before, -1.0});
        if (pre >= 0) terms.push_back({pre, -1.0});
        row(0.0, kMilpInfinity);  // work (after the stall window, when capped) is not negative
        if (!capped) continue;
        d2h_pre_slot[static_cast<std::size_t>(u)].push_back({pre, 1.0});
        // On a capped device a release frees memory only once its D2H is done:
        // work during op u needs s resident during op u, work in the stall
        // window before op u needs it resident during op u-1.
        if (m.x_at(u) >= 0) {
          terms = {{done, 1.0}, {pre, -1.0}, {m.x_at(u), -d2h_ms}};
          if (done_before >= 0) terms.push_back({done_before, -1.0});
          row(-kMilpInfinity, 0.0);
        }
        if (m.x_at(u - 1) >= 0) {
          terms = {{pre, 1.0}, {m.x_at(u - 1), -d2h_ms}};
          row(-kMilpInfinity, 0.0);
        }
      }
    }
    // A reload needs its version's whole D2H done in the slots before it.
    for (OpIndex t = m.first + 1; t <= m.end; ++t) {
      const int reload = m.h[static_cast<std::size_t>(m.cell(t))];
      if (reload < 0) continue;
      const Version& version = *m.version_before(t);
      terms = {{reload, d2h_ms}, {version.d2h_first_col + (t - 1 - (version.copy_op + 1)), -1.0}};
      row(-kMilpInfinity, 0.0);
    }
    // H2D progress.
    for (OpIndex t = m.first; t <= m.end; ++t) {
      const auto cell = static_cast<std::size_t>(m.cell(t));
      const int pending = m.pending[cell];
      if (pending < 0) continue;
      const int reload = m.h[cell];
      const int pre = m.work_pre[cell];
      const int mid = m.work_mid[cell];
      const int rest = m.work_rest[cell];
      // pending = pending before - work before + this slot's reload.
      terms = {{pending, 1.0}};
      if (reload >= 0) terms.push_back({reload, -h2d_ms});
      if (t > m.first && m.pending[cell - 1] >= 0) {
        terms.push_back({m.pending[cell - 1], -1.0});
        for (const int work : {m.work_pre[cell - 1], m.work_mid[cell - 1], m.work_rest[cell - 1]}) {
          if (work >= 0) terms.push_back({work, 1.0});
        }
      }
      row(0.0, 0.0);
      // Work is at most what is outstanding.
      terms = {{pending, -1.0}};
      for (const int work : {pre, mid, rest}) {
        if (work >= 0) terms.push_back({work, 1.0});
      }
      row(-kMilpInfinity, 0.0);
      for (const int work : {pre, mid, rest}) {
        if (work >= 0) h2d_slot[static_cast<std::size_t>(t)].push_back({work, 1.0});
      }
      h2d_pre_slot[static_cast<std::size_t>(t)].push_back({pre, 1.0});
      if (mid >= 0) h2d_mid_slot[static_cast<std::size_t>(t)].push_back({mid, 1.0});
      if (m.x[cell] >= 0) {
        terms = {{pending, 1.0}, {m.x[cell], -h2d_ms}};  // an outstanding copy has its memory
        row(-kMilpInfinity, 0.0);
      } else {
        // An access: done once the stall and the recomputes before the op have passed.
        terms = {{pending, 1.0}, {pre, -1.0}};
        if (mid >= 0) terms.push_back({mid, -1.0});
        row(-kMilpInfinity, 0.0);
      }
    }
  }

  // Recompute candidates: inputs resident and their H2D done before the re-run.
  for (const Candidate& c : candidates_) {
    for (const StorageIndex input : reads_[static_cast<std::size_t>(c.source)]) {
      const StorageModel& m = storages_[static_cast<std::size_t>(model_of_[static_cast<std::size_t>(input)])];
      const auto cell = static_cast<std::size_t>(m.cell(c.at));
      if (m.x[cell] >= 0) {
        terms = {{c.column, 1.0}, {m.x[cell], -1.0}};
        row(-kMilpInfinity, 0.0);
      }
      if (m.pending[cell] >= 0 && m.x[cell] >= 0) {
        const double h2d_ms = h2d(m.size_bytes);
        terms = {{m.pending[cell], 1.0}, {m.work_pre[cell], -1.0}, {c.column, h2d_ms}};
        row(-kMilpInfinity, h2d_ms);
      }
    }
  }

  // Memory during each op and while each candidate re-runs, in units of the
  // budget (so coefficients are at most about 1).
  const double scale = 1.0 / static_cast<double>(std::max<std::int64_t>(budget_bytes_, 1));
  std::vector<std::vector<std::pair<int, std::int64_t>>> free_at(ops);  // (column, bytes)
  std::vector<std::int64_t> fixed_at(ops, 0), fixed_first_at(ops, 0), free_bytes_at(ops, 0);
  for (const StorageModel& m : storages_) {
    for (OpIndex t = m.first; t <= m.end; ++t) {
      const int x = m.x_at(t);
      if (x >= 0) {
        free_at[static_cast<std::size_t>(t)].push_back({x, m.size_bytes});
        free_bytes_at[static_cast<std::size_t>(t)] += m.size_bytes;
      } else {
        fixed_at[static_cast<std::size_t>(t)] += m.size_bytes;
      }
    }
    fixed_first_at[static_cast<std::size_t>(m.first)] += m.size_bytes;
  }
  for (std::size_t t = 0; t < ops; ++t) {
    if (fixed_at[t] + free_bytes_at[t] <= budget_bytes_ || free_at[t].empty()) continue;
    for (const auto& [x, bytes] : free_at[t]) terms.push_back({x, static_cast<double>(bytes) * scale});
    row(-kMilpInfinity, static_cast<double>(budget_bytes_ - fixed_at[t]) * scale);
  }
  for (const Candidate& c : candidates_) {
    const auto t = static_cast<std::size_t>(c.at);
    const auto& outputs = writes_[static_cast<std::size_t>(c.source)];
    // Resident while k re-runs: all of op t's cells except what op t first
    // allocates and k's outputs, plus all of k's outputs.
    std::int64_t fixed = fixed_at[t] - fixed_first_at[t];
    std::int64_t outputs_bytes = 0;
    for (const StorageIndex o : outputs) {
      const StorageModel& m = storages_[static_cast<std::size_t>(model_of_[static_cast<std::size_t>(o)])];
      outputs_bytes += m.size_bytes;
      if (m.in_horizon(c.at) && m.x_at(c.at) < 0) fixed -= m.size_bytes;
    }
    std::int64_t free_bytes = 0;
    for (const auto& [x, bytes] : free_at[t]) {
      bool is_output = false;
      for (const StorageIndex o : outputs) {
        const StorageModel& m = storages_[static_cast<std::size_t>(model_of_[static_cast<std::size_t>(o)])];
        is_output = is_output || (m.in_horizon(c.at) && m.x_at(c.at) == x);
      }
      if (is_output) continue;
      terms.push_back({x, static_cast<double>(bytes) * scale});
      free_bytes += bytes;
    }
    if (fixed + free_bytes + outputs_bytes <= budget_bytes_) {
      terms.clear();
      continue;
    }
    terms.push_back({c.column, static_cast<double>(outputs_bytes) * scale});
    row(-kMilpInfinity, static_cast<double>(budget_bytes_ - fixed) * scale);
  }

  // Copy engines: per slot, work at most the slot's length (op + recomputes +
  // stall), and work in the stall window at most the stall.
  for (std::size_t t = 0; t < ops; ++t) {
    const int stall = stall_col_[t];
    const double duration_ms = duration(static_cast<OpIndex>(t));
    auto add_length = [&] {
      terms.push_back({stall, -1.0});
      for (const int c : candidates_at_[t]) {
        terms.push_back({candidates_[static_cast<std::size_t>(c)].column,
                         -duration(candidates_[static_cast<std::size_t>(c)].source)});
      }
    };
    for (auto* slot : {&d2h_slot[t], &h2d_slot[t]}) {
      if (slot->empty()) continue;
      terms = *slot;
      add_length();
      row(-kMilpInfinity, duration_ms);
    }
    if (capped && !d2h_pre_slot[t].empty()) {
      // Note [Capped stall window]: a copy to host finishing in the stall
      // before op t frees memory that a copy back issued before op t may be
      // waiting for (a capped device allocates a prefetch when it is issued),
      // so the two share the window instead of overlapping in it.
      terms = d2h_pre_slot[t];
      terms.insert(terms.end(), h2d_pre_slot[t].begin(), h2d_pre_slot[t].end());
      terms.push_back({stall, -1.0});
      row(-kMilpInfinity, 0.0);
    } else if (!h2d_pre_slot[t].empty()) {
      terms = h2d_pre_slot[t];
      terms.push_back({stall, -1.0});
      row(-kMilpInfinity, 0.0);
    }
    if (!h2d_mid_slot[t].empty()) {
      // Before op t starts: the stall and its recomputes.
      terms = h2d_pre_slot[t];
      terms.insert(terms.end(), h2d_mid_slot[t].begin(), h2d_mid_slot[t].end());
      add_length();
      row(-kMilpInfinity, 0.0);
    }
  }
}

std::vector<double> ResidencyMilp::offload_everything() const {
  const Trace& trace = *trace_;
  const bool capped = options_.device_memory == DeviceMemory::kBudget;
  std::vector<double> values(problem_.column_count(), 0.0);
  auto set = [&](int column, double value) { values[static_cast<std::size_t>(column)] = value; };
  const auto ops = static_cast<std::size_t>(trace.op_count());
  std::vector<double> stall(ops, 0.0);
  for (std::size_t i = 0; i < storages_.size(); ++i) {
    const StorageModel& m = storages_[i];
    const double d2h_ms = d2h(m.size_bytes);
    const double h2d_ms = h2d(m.size_bytes);
    std::vector<bool> copied(m.versions.size(), false);
    for (const auto& [a, b] : free_gaps_[i]) {
      // Off the device during (a, b); back by a reload before b, after the
      // version's D2H, which runs in the stall window right after a.
      const auto cell_b = static_cast<std::size_t>(m.cell(b));
      set(m.h[cell_b], 1.0);
      set(m.pending[cell_b], h2d_ms);
      set(m.work_pre[cell_b], h2d_ms);
      stall[static_cast<std::size_t>(b)] += h2d_ms;
      const Version& version = *m.version_before(b);
      const auto v = static_cast<std::size_t>(&version - m.versions.data());
      if (copied[v]) continue;
      copied[v] = true;
      const int from = a + 1 - (version.copy_op + 1);
      for (int k = from; k < version.d2h_slots; ++k) set(version.d2h_first_col + k, d2h_ms);
      if (capped) set(version.d2h_pre_first_col + from, d2h_ms);
      stall[static_cast<std::size_t>(a) + 1] += d2h_ms;
    }
  }
  for (std::size_t t = 0; t < ops; ++t) set(stall_col_[t], stall[t]);
  return values;
}

std::vector<std::vector<std::uint8_t>> ResidencyMilp::effective_residency(std::span<const double> values,
                                                                           std::vector<std::vector<int>>& used_at) const {
  // Start from the solution's cells, then drop what serves nothing: a stretch
  // of free cells that holds no need point (no access, no chosen recompute
  // reading it) is a reload or a recompute output kept for nothing, and a
  // chosen recompute that regenerates nothing resident afterwards is dropped.
  // Dropping one can make another useless (a chain's input), so repeat until
  // nothing changes. Only memory and time go down.
  std::vector<std::vector<std::uint8_t>> res(storages_.size());
  for (std::size_t i = 0; i < storages_.size(); ++i) {
    const StorageModel& m = storages_[i];
    res[i].resize(m.x.size());
    for (std::size_t c = 0; c < m.x.size(); ++c) res[i][c] = m.x[c] < 0 || is_one(values, m.x[c]) ? 1 : 0;
  }
  auto resident = [&](int model, OpIndex t) {
    const StorageModel& m = storages_[static_cast<std::size_t>(model)];
    return m.in_horizon(t) && res[static_cast<std::size_t>(model)][static_cast<std::size_t>(m.cell(t))] != 0;
  };
  const auto ops = static_cast<std::size_t>(trace_->op_count());
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t t = 0; t < ops; ++t) {
      used_at[t].clear();
      for (const int c : candidates_at_[t]) {
        const Candidate& candidate = candidates_[static_cast<std::size_t>(c)];
        if (!is_one(values, candidate.column)) continue;
        bool regenerates = false;
        for (const StorageIndex o : writes_[static_cast<std::size_t>(candidate.source)]) {
          const int model = model_of_[static_cast<std::size_t>(o)];
          regenerates = regenerates || (resident(model, candidate.at) && !resident(model, candidate.at - 1));
        }
        if (regenerates) used_at[t].push_back(c);
      }
    }
    for (std::size_t i = 0; i < storages_.size(); ++i) {
      const StorageModel& m = storages_[i];
      for (OpIndex t = m.first; t <= m.end;) {
        if (!resident(static_cast<int>(i), t) || m.x_at(t) < 0) {
          ++t;
          continue;
        }
        // A maximal stretch of resident free cells [t, u).
        OpIndex u = t;
        bool needed = false;
        while (u <= m.end && resident(static_cast<int>(i), u) && m.x_at(u) >= 0) {
          for (const int c : used_at[static_cast<std::size_t>(u)]) {
            const auto& inputs = reads_[static_cast<std::size_t>(candidates_[static_cast<std::size_t>(c)].source)];
            needed = needed || std::find(inputs.begin(), inputs.end(), m.index) != inputs.end();
          }
          ++u;
        }
        // It ends at an access (a fixed cell) when u is resident: then it is needed.
        needed = needed || (u <= m.end && resident(static_cast<int>(i), u));
        if (!needed) {
          for (OpIndex v = t; v < u; ++v) res[i][static_cast<std::size_t>(m.cell(v))] = 0;
          changed = true;
        }
        t = u;
      }
    }
  }
  return res;
}

Result<MilpPlan> ResidencyMilp::decode(std::span<const double> values) const {
  const Trace& trace = *trace_;
  const auto ops = static_cast<std::size_t>(trace.op_count());
  if (values.size() != problem_.column_count()) {
    return make_error(ErrorCode::kInternal, fmt::format("optimal planner: the solver returned {} values for {} columns",
                                                        values.size(), problem_.column_count()));
  }
  std::vector<std::vector<int>> used_at(ops);
  const std::vector<std::vector<std::uint8_t>> res = effective_residency(values, used_at);
  auto resident = [&](const StorageModel& m, OpIndex t) {
    return m.in_horizon(t) && res[static_cast<std::size_t>(&m - storages_.data())][static_cast<std::size_t>(m.cell(t))] != 0;
  };
  auto storage_model = [&](StorageIndex s) -> const StorageModel& {
    return storages_[static_cast<std::size_t>(model_of_[static_cast<std::size_t>(s)])];
  };
  auto used_recompute_lists = [&](const StorageModel& m, OpIndex t, bool outputs) {
    for (const int c : used_at[static_cast<std::size_t>(t)]) {
      const OpIndex source = candidates_[static_cast<std::size_t>(c)].source;
      const auto& list = outputs ? writes_[static_cast<std::size_t>(source)] : reads_[static_cast<std::size_t>(source)];
      if (std::find(list.begin(), list.end(), m.index) != list.end()) return true;
    }
    return false;
  };

  // Copies, with the slots their work occupies in the solution; they are
  // issued in the order the fluid engines finish them (the simulator's engines
  // are FIFO queues in issue order).
  struct Copy {
    StorageId id = 0;
    OpIndex earliest = 0, latest = 0;  // where it may be issued (after the op for D2H, before it for H2D)
    OpIndex first_work = 0, last_work = 0;
    OpIndex issue = 0;
  };
  std::vector<Copy> d2h, h2d;
  std::vector<std::pair<OpIndex, StorageId>> releases, host_releases;  // after the op
  constexpr double kWorkEpsilonMs = 1e-9;
  MilpPlan plan;

  for (const StorageModel& m : storages_) {
    std::vector<bool> version_reloaded(m.versions.size(), false);
    for (OpIndex t = m.first; t <= m.end; ++t) {
      const bool now = resident(m, t);
      const bool kept_to_the_end = m.retained && t == trace.op_count() - 1;
      if (now && !resident(m, t + 1) && !kept_to_the_end) releases.push_back({t, m.id});
      if (t == m.first || !now || resident(m, t - 1) || used_recompute_lists(m, t, true)) continue;
      // Resident again during op t and not regenerated: a reload before t.
      if (!is_one(values, m.h[static_cast<std::size_t>(m.cell(t))])) {
        return make_error(ErrorCode::kInternal,
                          fmt::format("optimal planner: storage {} is resident during op {} with nothing bringing it back",
                                      m.id, t));
      }
      const Version& version = *m.version_before(t);
      version_reloaded[static_cast<std::size_t>(&version - m.versions.data())] = true;
      // Its need point: the access closing the stretch, or a recompute reading it.
      OpIndex need = t;
      while (m.x_at(need) >= 0 && !used_recompute_lists(m, need, false)) ++need;
      Copy copy{m.id, t, need, need, need, need};
      bool started = false;
      for (OpIndex u = t; u <= need; ++u) {
        const auto c = static_cast<std::size_t>(m.cell(u));
        const double work =
            value_of(values, m.work_pre[c]) + value_of(values, m.work_mid[c]) + value_of(values, m.work_rest[c]);
        if (work <= kWorkEpsilonMs) continue;
        if (!started) copy.first_work = u;
        started = true;
        copy.last_work = u;
      }
      h2d.push_back(copy);
      ++plan.reload_count;
    }
    for (std::size_t v = 0; v < m.versions.size(); ++v) {
      if (!version_reloaded[v]) continue;
      const Version& version = m.versions[v];
      // Issued after the version's copy op, no later than its first release.
      OpIndex first_release = version.copy_op;
      while (resident(m, first_release + 1)) ++first_release;
      Copy copy{m.id, version.copy_op, first_release, version.copy_op + 1, version.copy_op + 1, 0};
      bool started = false;
      for (int i = 0; i < version.d2h_slots; ++i) {
        const double work = values[static_cast<std::size_t>(version.d2h_first_col + i)] -
                            (i > 0 ? values[static_cast<std::size_t>(version.d2h_first_col + i - 1)] : 0.0);
        if (work <= kWorkEpsilonMs) continue;
        if (!started) copy.first_work = version.copy_op + 1 + i;
        started = true;
        copy.last_work = version.copy_op + 1 + i;
      }
      d2h.push_back(copy);
      host_releases.push_back({version.end_op, m.id});
    }
  }

  // Issue points: in the order the fluid solution finishes the copies, each no
  // earlier than the one before it (FIFO), within its own window.
  auto sequence = [](std::vector<Copy>& copies, OpIndex issue_of_first_work_shift) {
    // Ties (the same last slot) go to the copy needed first: an H2D whose op is
    // the next one before one that only uses the slot to get ahead.
    std::stable_sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) {
      return std::tie(a.last_work, a.latest, a.first_work) < std::tie(b.last_work, b.latest, b.first_work);
    });
    OpIndex previous = 0;
    for (Copy& copy : copies) {
      copy.issue = std::clamp(std::max(copy.first_work - issue_of_first_work_shift, previous), copy.earliest, copy.latest);
      previous = copy.issue;
    }
  };
  sequence(d2h, 1);  // work from slot u: issued after op u-1
  sequence(h2d, 0);  // work from slot u: issued before op u
  std::sort(releases.begin(), releases.end());
  std::sort(host_releases.begin(), host_releases.end());

  // Execution order. Before op t: copies to the device (engine order), then
  // recomputes by source op, each followed by releases of the outputs not kept.
  // After op t: host copies no longer needed (stale, or the storage is done),
  // copies to host (engine order), releases.
  std::vector<std::vector<Action>> pre(ops), post(ops);
  for (const Copy& copy : h2d) {
    pre[static_cast<std::size_t>(copy.issue)].push_back({copy.issue, Phase::kPre, ActionKind::kCopyH2D, copy.id, -1});
  }
  for (std::size_t t = 0; t < ops; ++t) {
    for (const int c : used_at[t]) {
      const Candidate& candidate = candidates_[static_cast<std::size_t>(c)];
      pre[t].push_back({candidate.at, Phase::kPre, ActionKind::kRecompute, 0, candidate.source});
      ++plan.recompute_count;
      plan.recompute_ms += trace.op_duration_ms(candidate.source);
      for (const StorageIndex o : writes_[static_cast<std::size_t>(candidate.source)]) {
        if (!resident(storage_model(o), candidate.at)) {
          pre[t].push_back({candidate.at, Phase::kPre, ActionKind::kReleaseDevice, trace.storage(o).id, -1});
        }
      }
    }
  }
  for (const auto& [op, id] : host_releases) {
    post[static_cast<std::size_t>(op)].push_back({op, Phase::kPost, ActionKind::kReleaseHost, id, -1});
  }
  for (const Copy& copy : d2h) {
    post[static_cast<std::size_t>(copy.issue)].push_back({copy.issue, Phase::kPost, ActionKind::kCopyD2H, copy.id, -1});
  }
  for (const auto& [op, id] : releases) {
    post[static_cast<std::size_t>(op)].push_back({op, Phase::kPost, ActionKind::kReleaseDevice, id, -1});
  }
  for (std::size_t t = 0; t < ops; ++t) {
    plan.actions.insert(plan.actions.end(), pre[t].begin(), pre[t].end());
    plan.actions.insert(plan.actions.end(), post[t].begin(), post[t].end());
  }

  // The schedule's op-granular peak by this model, in exact bytes: during each
  // op, and while each recompute re-runs (what is resident before op t except
  // what op t first allocates, plus all of the recompute's outputs).
  std::vector<std::int64_t> during(ops, 0), first_at(ops, 0);
  for (const StorageModel& m : storages_) {
    for (OpIndex t = m.first; t <= m.end; ++t) {
      if (resident(m, t)) during[static_cast<std::size_t>(t)] += m.size_bytes;
    }
    first_at[static_cast<std::size_t>(m.first)] += m.size_bytes;
  }
  for (std::size_t t = 0; t < ops; ++t) {
    plan.peak_bytes = std::max(plan.peak_bytes, during[t]);
    for (const int c : used_at[t]) {
      std::int64_t bytes = during[t] - first_at[t];
      for (const StorageIndex o : writes_[static_cast<std::size_t>(candidates_[static_cast<std::size_t>(c)].source)]) {
        if (!resident(storage_model(o), static_cast<OpIndex>(t))) bytes += trace.storage(o).size_bytes;
      }
      plan.peak_bytes = std::max(plan.peak_bytes, bytes);
    }
  }
  for (std::size_t t = 0; t < ops; ++t) plan.stall_ms += values[static_cast<std::size_t>(stall_col_[t])] * time_unit_ms_;
  plan.makespan_ms = trace.total_compute_ms() + plan.recompute_ms + plan.stall_ms;
  return plan;
}

}  // namespace hyperoffload::internal
