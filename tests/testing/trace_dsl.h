// Test helper: builds small traces readably.
//
//   Trace t = TraceDsl()
//                 .storage(1, 100)                       // id 1, 100 bytes
//                 .storage(2, 50, Retention::kRetained)
//                 .op("fwd", "W1")                       // op 0 writes storage 1
//                 .op("use", "R1 W2", /*duration_ms=*/0.5)
//                 .op("remat", "R1 W3", 0.5, Recomputable::kYes)  // trace format v2
//                 .limit(120)
//                 .build();
//
// Access strings are space-separated tokens: R<id> (read), W<id> (write).
// build() fails the current test (and returns an empty trace) on invalid input.
#pragma once

#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hyperoffload/ir/schedule.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload::testing {

class TraceDsl {
 public:
  TraceDsl& storage(StorageId id, std::int64_t size_bytes, Retention retention = Retention::kReleasable);
  TraceDsl& op(std::string name, std::string_view accesses, double duration_ms = 0.0,
               Recomputable recomputable = Recomputable::kNo);
  TraceDsl& limit(std::optional<std::int64_t> bytes);
  TraceDsl& bandwidth(double gib_per_s);  // both directions
  Trace build() const;

 private:
  struct StorageSpec {
    StorageId id;
    std::int64_t size_bytes;
    Retention retention;
  };
  struct OpSpec {
    std::string name;
    std::string accesses;
    double duration_ms;
    Recomputable recomputable;
  };
  std::vector<StorageSpec> storages_;
  std::vector<OpSpec> ops_;
  std::optional<std::int64_t> limit_;
  double bandwidth_ = kDefaultBandwidthGiBPerS;
};

// Parses "post 0 copy_d2h 1; pre 3 copy_h2d 1" into actions (phase op kind
// storage); for a recompute the last number is the source op: "pre 3 recompute 1".
std::vector<Action> actions(std::string_view text);

// The storages a schedule copies to host, in schedule order.
std::vector<StorageId> copied_to_host(std::span<const Action> actions);

}  // namespace hyperoffload::testing

namespace hyperoffload {
// Prints actions readably in gtest failure messages ("op 3 pre copy_h2d storage 7").
void PrintTo(const Action& action, std::ostream* os);
}  // namespace hyperoffload
