// The device a schedule runs on, as every layer that plans, times or executes
// one sees it: how its memory behaves and how many copy engines it has. The
// planners tune for it (plan/), the simulator and the planners' estimates time
// with it (sim/, model/), the runtime backends report it (runtime/backend.h),
// and the command line spells it `--memory-cap` and `--copy-engines`.
#pragma once

#include <cstdint>
#include <optional>

namespace hyperoffload {

// How device memory behaves (`--memory-cap`):
//  kUnlimited  memory is freed whenever the copies allow and nothing waits for
//              it, so only the copies back to the device can stall compute;
//  kBudget     the device holds only the budget: an allocation (an op's first
//              accesses, a prefetch or a recompute when it is issued) waits
//              until releases have freed room, and a release frees memory only
//              once its storage's copies (and recomputes using it) have
//              completed. model/capped_memory.h is the allocator.
enum class DeviceMemory : std::uint8_t { kUnlimited, kBudget };

// The device every option struct, command and binding assumes unless told
// otherwise: the one that holds only the budget, since that is the device a
// user's out-of-memory error comes from. kUnlimited is the reference system's
// semantics, kept as an explicit choice (`--memory-cap unlimited`).
inline constexpr DeviceMemory kDefaultDeviceMemory = DeviceMemory::kBudget;

// "unlimited" / "budget": the spelling of `--memory-cap` and of the JSON
// reports' "memory_cap" field.
constexpr const char* to_string(DeviceMemory memory) {
  return memory == DeviceMemory::kBudget ? "budget" : "unlimited";
}

// The copy engines (`--copy-engines`): kTwo, one FIFO queue per direction
// (D2H and H2D run concurrently); kOne, both directions share one FIFO queue
// in program order. model/copy_engines.h times them.
enum class CopyEngines : std::uint8_t { kOne = 1, kTwo = 2 };
// The default of every entry point (backends, the CLI's comparisons, the
// Python session): a GPU's two copy engines.
inline constexpr CopyEngines kDefaultCopyEngines = CopyEngines::kTwo;

// What a step is planned for and held to, as one value: the device budget,
// the host budget, how device memory behaves and the copy engines. A session
// builds it once (exec/session.h, Session::target) and passes it whole to the
// planner and to the plan's summary, so a budget cannot reach one and not the
// other.
struct StepTarget {
  std::optional<std::int64_t> budget_bytes;       // device bytes; nullopt: unlimited
  std::optional<std::int64_t> host_budget_bytes;  // pinned host bytes; nullopt: unlimited
  DeviceMemory device_memory = kDefaultDeviceMemory;
  CopyEngines copy_engines = kDefaultCopyEngines;
};

}  // namespace hyperoffload
