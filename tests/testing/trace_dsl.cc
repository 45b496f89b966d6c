#include "testing/trace_dsl.h"

#include <sstream>

#include <gtest/gtest.h>

namespace hyperoffload::testing {

TraceDsl& TraceDsl::storage(StorageId id, std::int64_t size_bytes, Retention retention) {
  storages_.push_back({id, size_bytes, retention});
  return *this;
}

TraceDsl& TraceDsl::op(std::string name, std::string_view accesses, double duration_ms, Recomputable recomputable) {
  ops_.push_back({std::move(name), std::string(accesses), duration_ms, recomputable});
  return *this;
}

TraceDsl& TraceDsl::limit(std::optional<std::int64_t> bytes) {
  limit_ = bytes;
  return *this;
}

TraceDsl& TraceDsl::bandwidth(double gib_per_s) {
  bandwidth_ = gib_per_s;
  return *this;
}

Trace TraceDsl::build() const {
  TraceBuilder builder;
  builder.set_memory_limit_bytes(limit_);
  builder.set_d2h_bandwidth_gib_per_s(bandwidth_);
  builder.set_h2d_bandwidth_gib_per_s(bandwidth_);
  for (const StorageSpec& s : storages_) {
    Status status = builder.add_storage(s.id, s.size_bytes, s.retention);
    if (!status) ADD_FAILURE() << status.error().message;
  }
  for (const OpSpec& op : ops_) {
    Status status = builder.add_op(op.name, op.duration_ms, op.recomputable);
    if (!status) ADD_FAILURE() << status.error().message;
    std::istringstream tokens(op.accesses);
    std::string token;
    while (tokens >> token) {
      if (token.size() < 2 || (token[0] != 'R' && token[0] != 'W')) {
        ADD_FAILURE() << "bad access token '" << token << "' in op " << op.name;
        continue;
      }
      builder.add_access(std::stoll(token.substr(1)), token[0] == 'W' ? AccessKind::kWrite : AccessKind::kRead);
    }
  }
  Result<Trace> trace = std::move(builder).build();
  if (!trace) {
    ADD_FAILURE() << trace.error().message;
    return Trace();
  }
  return std::move(*trace);
}

std::vector<StorageId> copied_to_host(std::span<const Action> actions) {
  std::vector<StorageId> out;
  for (const Action& action : actions) {
    if (action.kind == ActionKind::kCopyD2H) out.push_back(action.storage);
  }
  return out;
}

std::vector<Action> actions(std::string_view text) {
  std::vector<Action> result;
  std::istringstream items{std::string(text)};
  std::string item;
  while (std::getline(items, item, ';')) {
    std::istringstream fields(item);
    std::string phase, kind;
    long long op = 0, storage = 0;
    if (!(fields >> phase >> op >> kind >> storage)) {
      if (item.find_first_not_of(" \t\n") != std::string::npos) ADD_FAILURE() << "bad action '" << item << "'";
      continue;
    }
    Action action;
    action.op = static_cast<OpIndex>(op);
    action.storage = storage;
    action.phase = phase == "pre" ? Phase::kPre : Phase::kPost;
    if (phase != "pre" && phase != "post") ADD_FAILURE() << "bad phase '" << phase << "'";
    if (kind == "copy_d2h") {
      action.kind = ActionKind::kCopyD2H;
    } else if (kind == "release_device") {
      action.kind = ActionKind::kReleaseDevice;
    } else if (kind == "copy_h2d") {
      action.kind = ActionKind::kCopyH2D;
    } else if (kind == "release_host") {
      action.kind = ActionKind::kReleaseHost;
    } else if (kind == "recompute") {
      action.kind = ActionKind::kRecompute;
      action.source_op = static_cast<OpIndex>(storage);
      action.storage = 0;
    } else {
      ADD_FAILURE() << "bad action kind '" << kind << "'";
    }
    result.push_back(action);
  }
  return result;
}

}  // namespace hyperoffload::testing

namespace hyperoffload {
// Lets gtest print actions readably in failure messages.
void PrintTo(const Action& action, std::ostream* os) { *os << describe(action); }
}  // namespace hyperoffload
