#include "hyperoffload/gen/stress_trace.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "hyperoffload/ir/memory_profile.h"

namespace hyperoffload {
namespace {

class StressBuilder {
 public:
  explicit StressBuilder(const StressTraceOptions& options) : options_(options), rng_(options.seed) {}

  Trace build() && {
    shared_ = new_storage();
    op("load", {}, {shared_}, Recomputable::kNo);
    x_ = new_storage();
    op("aten::embedding", {shared_}, {x_}, Recomputable::kNo);
    activations_.push_back(x_);
    for (std::int32_t layer = 0; layer < options_.layers; ++layer) block();
    backward();
    TraceBuilder builder;
    builder.reserve(ops_.size(), sizes_.size(), access_count_);
    for (std::size_t s = 0; s < sizes_.size(); ++s) {
      (void)builder.add_storage(static_cast<StorageId>(s), sizes_[s]);
    }
    for (const Op& op : ops_) {
      (void)builder.add_op(op.name, op.duration_ms, op.recomputable);
      for (const auto& [storage, kind] : op.accesses) builder.add_access(storage, kind);
    }
    Trace trace = value_or_throw(std::move(builder).build());  // valid by construction
    if (options_.limit_fraction) {
      const PeakBytes peak = unplanned_peak(trace);
      trace.set_memory_limit_bytes(
          static_cast<std::int64_t>(std::floor(static_cast<double>(peak.bytes) * *options_.limit_fraction)));
    }
    return trace;
  }

 private:
  struct Op {
    const char* name;
    double duration_ms;
    Recomputable recomputable;
    std::vector<std::pair<StorageId, AccessKind>> accesses;
  };

  double unit() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  std::size_t below(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

  StorageId new_storage() {
    const double log_min = std::log(static_cast<double>(std::max<std::int64_t>(1, options_.min_size_bytes)));
    const double log_max = std::log(static_cast<double>(std::max(options_.min_size_bytes, options_.max_size_bytes)));
    sizes_.push_back(static_cast<std::int64_t>(std::exp(log_min + (log_max - log_min) * unit())));
    return static_cast<StorageId>(sizes_.size() - 1);
  }

  Recomputable maybe_recomputable() {
    return unit() < options_.recomputable_fraction ? Recomputable::kYes : Recomputable::kNo;
  }

  // An op reading `reads` (in order, duplicates dropped) and writing `writes`.
  void op(const char* name, const std::vector<StorageId>& reads, const std::vector<StorageId>& writes,
          Recomputable recomputable) {
    Op made{name, options_.max_duration_ms * unit(), recomputable, {}};
    for (const StorageId s : reads) {
      const auto same = [&](const auto& access) { return access.first == s; };
      if (std::none_of(made.accesses.begin(), made.accesses.end(), same)) made.accesses.emplace_back(s, AccessKind::kRead);
    }
    for (const StorageId s : writes) made.accesses.emplace_back(s, AccessKind::kWrite);
    access_count_ += made.accesses.size();
    ops_.push_back(std::move(made));
  }

  // A new activation written by an op reading `reads`.
  void produce(const char* name, std::vector<StorageId> reads) {
    const StorageId y = new_storage();
    op(name, reads, {y}, maybe_recomputable());
    x_ = y;
    activations_.push_back(y);
    if (unit() < options_.save_fraction) saved_.push_back(y);
  }

  void block() {
    const StorageId block_input = x_;
    const std::int32_t ops = std::max(1, options_.ops_per_layer);
    for (std::int32_t i = 0; i < ops; ++i) {
      const double roll = unit();
      double edge = options_.residual_fraction;
      if (roll < edge) {
        produce("aten::add.Tensor", {x_, block_input});
        continue;
      }
      if (roll < (edge += options_.view_fraction)) {
        for (std::int32_t v = 0; v < std::max(1, options_.view_depth); ++v) op("aten::view", {x_}, {}, Recomputable::kNo);
        continue;
      }
      if (roll < (edge += options_.in_place_fraction)) {
        op("aten::add_.Tensor", {x_}, {x_}, Recomputable::kNo);
        continue;
      }
      if (roll < (edge += options_.shared_fraction)) {
        op("aten::masked_fill", {x_, shared_}, {}, Recomputable::kNo);
        continue;
      }
      std::vector<StorageId> reads{x_};
      const bool wide = unit() < options_.wide_fan_in_fraction;
      const std::int32_t fan_in = wide ? 64 : options_.max_fan_in;
      const auto extra = fan_in > 0 ? below(static_cast<std::size_t>(fan_in) + 1) : 0;
      for (std::size_t k = 0; k < extra; ++k) reads.push_back(activations_[below(activations_.size())]);
      produce(wide ? "aten::cat" : "aten::mm", std::move(reads));
    }
  }

  void backward() {
    std::vector<StorageId> buffers;
    for (std::int32_t b = 0; b < std::max(0, options_.gradient_buffers); ++b) {
      buffers.push_back(new_storage());
      op("aten::zeros", {}, {buffers.back()}, Recomputable::kNo);
    }
    StorageId gradient = new_storage();
    op("aten::ones_like", {x_}, {gradient}, Recomputable::kNo);
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      const StorageId next = new_storage();
      op("aten::mm_backward", {gradient, *it}, {next}, maybe_recomputable());
      gradient = next;
      if (!buffers.empty()) {
        const StorageId buffer = buffers[below(buffers.size())];
        op("aten::add_.Tensor", {buffer, gradient}, {buffer}, Recomputable::kNo);
      }
    }
    for (const StorageId buffer : buffers) op("optimizer", {buffer}, {}, Recomputable::kNo);
  }

  const StressTraceOptions& options_;
  std::mt19937_64 rng_;
  std::vector<std::int64_t> sizes_;
  std::vector<Op> ops_;
  std::size_t access_count_ = 0;
  StorageId shared_ = 0;
  StorageId x_ = 0;
  std::vector<StorageId> activations_;
  std::vector<StorageId> saved_;
};

}  // namespace

Trace generate_stress_trace(const StressTraceOptions& options) { return StressBuilder(options).build(); }

}  // namespace hyperoffload
