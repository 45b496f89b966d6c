// Test helper: a HostBackend with its event pool, pinned pool and residency
// manager, plus leak checks.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "hyperoffload/runtime/host_backend.h"
#include "hyperoffload/runtime/residency_manager.h"

namespace hyperoffload::testing {

struct HostRuntime {
  explicit HostRuntime(std::int64_t device_capacity_bytes = 64 << 20,
                       std::int64_t host_capacity_bytes = std::int64_t{1} << 40,
                       CopyEngines engines = CopyEngines::kTwo, std::int64_t spin_before_sleep_us = 50,
                       std::optional<double> emulated_link_gib_per_s = std::nullopt)
      : backend(std::move(*HostBackend::create({.device_capacity_bytes = device_capacity_bytes,
                                                .device_alignment_bytes = 64,
                                                .copy_engines = engines,
                                                .spin_before_sleep_us = spin_before_sleep_us,
                                                .emulated_copy_bandwidth_gib_per_s = emulated_link_gib_per_s}))),
        events(*backend),
        pool(*backend, {.capacity_bytes = host_capacity_bytes}),
        residency(*backend, pool, events) {}

  // Resets the residency manager and checks that no device memory, host block
  // or storage is left.
  void expect_nothing_held() {
    ASSERT_TRUE(residency.reset());
    ASSERT_TRUE(pool.drain());
    EXPECT_EQ(backend->device_memory_stats().in_use_bytes, 0);
    EXPECT_EQ(pool.stats().current_bytes, 0);
    EXPECT_EQ(pool.stats().pending_bytes, 0);
    EXPECT_EQ(residency.stats().storages, 0);
  }

  std::unique_ptr<HostBackend> backend;
  EventPool events;
  PinnedHostPool pool;
  ResidencyManager residency;
};

}  // namespace hyperoffload::testing
