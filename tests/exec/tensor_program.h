// Test helper: a tiny tensor-program harness. Ops are plain C++ functions over
// float buffers; the same program runs eagerly (plain vectors, no runtime) or
// through the runtime's hooks (exec/hooks.h), where every op reports its
// inputs and outputs and reads its data through device pointers. Running both
// and comparing bytes shows that offloading never changes a result.
//
// The MLP below is a full training step: forward through `layers` matmul +
// ReLU layers (every other ReLU in place), a mean-squared-error loss, backward
// through every layer, and an SGD update of the (untracked) weights.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "hyperoffload/exec/hooks.h"
#include "hyperoffload/exec/recompute.h"
#include "hyperoffload/ir/status.h"

namespace hyperoffload::testing {

struct Tensor {
  StorageId id = -1;  // tracked storage; -1 for an external tensor
  const float* external = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t bytes() const { return rows * cols * static_cast<std::int64_t>(sizeof(float)); }
};

using Kernel = std::function<void(std::span<const float* const> inputs, std::span<float* const> outputs)>;
struct Shape {
  std::int64_t rows;
  std::int64_t cols;
};

class TensorEngine {
 public:
  virtual ~TensorEngine() = default;
  // Runs an op producing new tensors of the given shapes. Errors throw HyperoffloadError.
  virtual std::vector<Tensor> run(const std::string& name, const std::vector<Tensor>& inputs,
                                  const std::vector<Shape>& outputs, const Kernel& kernel) = 0;
  // Runs an op that writes `target` in place (passed as outputs[0]; inputs[0] is it too).
  virtual void run_in_place(const std::string& name, const Tensor& target, const std::vector<Tensor>& others,
                            const Kernel& kernel) = 0;
  virtual void free(const Tensor& tensor) = 0;
  virtual std::vector<float> read(const Tensor& tensor) = 0;

  static Tensor external(const std::vector<float>& data, std::int64_t rows, std::int64_t cols) {
    return Tensor{-1, data.data(), rows, cols};
  }
};

// Plain vectors, no runtime: the reference results.
class EagerEngine final : public TensorEngine {
 public:
  std::vector<Tensor> run(const std::string&, const std::vector<Tensor>& inputs, const std::vector<Shape>& outputs,
                          const Kernel& kernel) override {
    std::vector<const float*> in;
    for (const Tensor& t : inputs) in.push_back(t.external != nullptr ? t.external : data_.at(t.id).data());
    std::vector<Tensor> result;
    std::vector<float*> out;
    for (const Shape& shape : outputs) {
      const StorageId id = next_id_++;
      auto& buffer = data_[id];
      buffer.assign(static_cast<std::size_t>(shape.rows * shape.cols), 0.0f);
      result.push_back(Tensor{id, nullptr, shape.rows, shape.cols});
    }
    for (const Tensor& t : result) out.push_back(data_.at(t.id).data());
    kernel(in, out);
    return result;
  }
  void run_in_place(const std::string&, const Tensor& target, const std::vector<Tensor>& others,
                    const Kernel& kernel) override {
    std::vector<const float*> in{data_.at(target.id).data()};
    for (const Tensor& t : others) in.push_back(t.external != nullptr ? t.external : data_.at(t.id).data());
    float* out = data_.at(target.id).data();
    kernel(in, std::span<float* const>(&out, 1));
  }
  void free(const Tensor& tensor) override { data_.erase(tensor.id); }
  std::vector<float> read(const Tensor& tensor) override { return data_.at(tensor.id); }

 private:
  std::unordered_map<StorageId, std::vector<float>> data_;
  StorageId next_id_ = 0;
};

// Where a hooked engine's outputs live.
enum class OutputMemory : std::uint8_t {
  kRuntime,  // allocate_output(): the runtime's device memory
  kCaller,   // the engine's own buffers, adopted with a release callback (like PyTorch)
};

// Drives every op through StepHooks. Ids start at `first_id` so consecutive
// steps use different ids (the replay executor must map them to the trace's).
// Every op that makes new tensors is deterministic and marked recomputable;
// recompute() re-runs one for a replay (a RecomputeFn): its kernel again, on
// the inputs the runtime made resident, into runtime memory or (kCaller) new
// caller buffers — what a framework does. The external inputs it reads (the
// weights) are updated only after the backward pass no longer needs the
// forward activations, so re-running a forward op reads the same weights.
class HookedEngine final : public TensorEngine {
 public:
  HookedEngine(StepHooks& hooks, StorageId first_id, OutputMemory memory = OutputMemory::kRuntime)
      : hooks_(hooks), next_id_(first_id), memory_(memory) {}

  // For OutputMemory::kCaller: gives the runtime fresh caller memory when it
  // brings an adopted storage back (ResidencyManager's rematerialize hook).
  Result<AdoptedBuffer> rematerialize(StorageId id, std::int64_t size_bytes) {
    void* ptr = new_buffer(id, size_bytes);
    return AdoptedBuffer{ptr, releaser(id)};
  }
  std::size_t caller_buffers() const { return buffers_.size(); }

  std::vector<Tensor> run(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Shape>& outputs,
                          const Kernel& kernel) override {
    std::vector<StorageId> tracked;
    for (const Tensor& t : inputs) {
      if (t.external == nullptr) tracked.push_back(t.id);
    }
    value_or_throw(hooks_.on_op_begin(name, tracked, {}));
    const std::size_t op = static_cast<std::size_t>(ops_run_++);
    if (!outputs.empty()) {
      value_or_throw(hooks_.mark_recomputable());
      if (recorded_.size() <= op) recorded_.resize(op + 1);
      RecordedOp& record = recorded_[op];
      record.external.clear();
      for (const Tensor& t : inputs) record.external.push_back(t.external);
      record.outputs = outputs;
      record.kernel = kernel;
    }
    std::vector<const float*> in;
    for (const Tensor& t : inputs) in.push_back(t.external != nullptr ? t.external : pointer(t.id));
    std::vector<Tensor> result;
    std::vector<float*> out;
    std::vector<OpOutput> reported;
    for (const Shape& shape : outputs) {
      const Tensor t{next_id_++, nullptr, shape.rows, shape.cols};
      void* ptr = nullptr;
      if (memory_ == OutputMemory::kRuntime) {
        ptr = value_or_throw(hooks_.allocate_output(t.id, t.bytes()));
        reported.push_back(OpOutput{t.id, t.bytes(), nullptr, {}});
      } else {
        ptr = new_buffer(t.id, t.bytes());
        reported.push_back(OpOutput{t.id, t.bytes(), ptr, releaser(t.id)});
      }
      result.push_back(t);
      out.push_back(static_cast<float*>(ptr));
    }
    kernel(in, out);
    value_or_throw(hooks_.on_op_end(reported, {}));
    return result;
  }

  void run_in_place(const std::string& name, const Tensor& target, const std::vector<Tensor>& others,
                    const Kernel& kernel) override {
    std::vector<StorageId> tracked{target.id};
    for (const Tensor& t : others) {
      if (t.external == nullptr) tracked.push_back(t.id);
    }
    const StorageId written[] = {target.id};
    value_or_throw(hooks_.on_op_begin(name, tracked, written));
    ++ops_run_;
    std::vector<const float*> in{pointer(target.id)};
    for (const Tensor& t : others) in.push_back(t.external != nullptr ? t.external : pointer(t.id));
    float* out = pointer(target.id);
    kernel(in, std::span<float* const>(&out, 1));
    value_or_throw(hooks_.on_op_end({}, written));
  }

  // Like a framework dropping a tensor: the runtime forgets it, then the
  // caller's buffer (if it holds one) is freed.
  void free(const Tensor& tensor) override {
    value_or_throw(hooks_.on_storage_freed(tensor.id));
    if (auto it = current_.find(tensor.id); it != current_.end()) {
      buffers_.erase(it->second);
      current_.erase(it);
    }
  }

  std::vector<float> read(const Tensor& tensor) override {
    const float* p = pointer(tensor.id);
    return std::vector<float>(p, p + tensor.rows * tensor.cols);
  }

  // The RecomputeFn (see above). `fail_at_recompute` makes the n-th call
  // (from 1) fail as a kernel that throws would.
  Status recompute(RecomputeCall& call) {
    ++recomputes_;
    if (recomputes_ == fail_at_recompute_) {
      return make_error(ErrorCode::kInternal, fmt::format("injected failure re-running {}", call.op_name()));
    }
    const auto op = static_cast<std::size_t>(call.source_op());
    if (op >= recorded_.size() || !recorded_[op].kernel) {
      return make_error(ErrorCode::kInternal, fmt::format("op {} was not recorded", op));
    }
    const RecordedOp& record = recorded_[op];
    std::vector<const float*> in;
    std::size_t tracked = 0;
    for (const float* external : record.external) {
      in.push_back(external != nullptr ? external : static_cast<const float*>(call.input_ptrs()[tracked++]));
    }
    std::vector<float*> out;
    std::vector<std::unique_ptr<float[]>> scratch;
    std::vector<std::pair<std::size_t, void*>> adopt;
    for (std::size_t j = 0; j < record.outputs.size(); ++j) {
      const std::int64_t bytes = record.outputs[j].rows * record.outputs[j].cols * std::int64_t{sizeof(float)};
      void* ptr = nullptr;
      if (!call.output_needed(j)) {
        scratch.push_back(std::make_unique<float[]>(static_cast<std::size_t>(bytes) / sizeof(float) + 1));
        ptr = scratch.back().get();
      } else if (memory_ == OutputMemory::kRuntime) {
        HO_ASSIGN_OR_RETURN(ptr, call.allocate_output(j));
      } else {
        ptr = new_buffer(call.output_id(j), bytes);
        adopt.emplace_back(j, ptr);
      }
      out.push_back(static_cast<float*>(ptr));
    }
    record.kernel(in, out);
    for (const auto& [j, ptr] : adopt) {
      HO_RETURN_IF_ERROR(call.adopt_output(j, ptr, releaser(call.output_id(j))));
    }
    return ok_status();
  }
  std::int64_t recomputes() const { return recomputes_; }
  void fail_at_recompute(std::int64_t n) { fail_at_recompute_ = n; }

 private:
  float* pointer(StorageId id) { return static_cast<float*>(value_or_throw(hooks_.device_ptr(id))); }
  void* new_buffer(StorageId id, std::int64_t bytes) {
    auto buffer = std::make_unique<float[]>(static_cast<std::size_t>(bytes) / sizeof(float) + 1);
    void* ptr = buffer.get();
    buffers_.emplace(ptr, std::move(buffer));
    current_[id] = ptr;
    return ptr;
  }
  // The release callback of a caller buffer: the runtime offloaded the storage.
  ReleaseCallback releaser(StorageId id) {
    return [this, id](void* ptr) {
      buffers_.erase(ptr);
      if (auto it = current_.find(id); it != current_.end() && it->second == ptr) current_.erase(it);
    };
  }

  struct RecordedOp {
    std::vector<const float*> external;  // per input: its data, or null for a tracked one
    std::vector<Shape> outputs;
    Kernel kernel;
  };

  StepHooks& hooks_;
  StorageId next_id_;
  OutputMemory memory_;
  OpIndex ops_run_ = 0;
  std::vector<RecordedOp> recorded_;  // by op index
  std::int64_t recomputes_ = 0;
  std::int64_t fail_at_recompute_ = -1;
  std::unordered_map<void*, std::unique_ptr<float[]>> buffers_;  // caller memory alive now
  std::unordered_map<StorageId, void*> current_;                 // a storage's current caller buffer
};

// ---- The MLP ---------------------------------------------------------------------

struct MlpConfig {
  std::int64_t batch = 256;
  std::int64_t width = 64;  // hidden width
  std::int64_t outputs = 16;
  int layers = 6;  // matmuls; layers-1 hidden ReLUs
  float learning_rate = 0.01f;
};

struct MlpModel {
  MlpConfig config;
  std::vector<std::vector<float>> weights;  // layer l: in_l x out_l, row-major
  std::vector<float> x;                     // batch x width
  std::vector<float> target;                // batch x outputs

  std::int64_t in_of(int /*layer*/) const { return config.width; }
  std::int64_t out_of(int l) const { return l == config.layers - 1 ? config.outputs : config.width; }

  static MlpModel random(const MlpConfig& config, std::uint32_t seed) {
    MlpModel m;
    m.config = config;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int l = 0; l < config.layers; ++l) {
      std::vector<float> w(static_cast<std::size_t>(m.in_of(l) * m.out_of(l)));
      const float scale = 1.0f / std::sqrt(static_cast<float>(m.in_of(l)));
      for (float& v : w) v = normal(rng) * scale * 1.4f;
      m.weights.push_back(std::move(w));
    }
    m.x.resize(static_cast<std::size_t>(config.batch * config.width));
    for (float& v : m.x) v = normal(rng);
    m.target.resize(static_cast<std::size_t>(config.batch * config.outputs));
    for (float& v : m.target) v = normal(rng);
    return m;
  }
};

namespace mlp_kernels {
// c[n x m] = a[n x k] * b[k x m]
inline void mm(const float* a, const float* b, float* c, std::int64_t n, std::int64_t k, std::int64_t m) {
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < m; ++j) c[i * m + j] = 0.0f;
    for (std::int64_t p = 0; p < k; ++p) {
      const float av = a[i * k + p];
      for (std::int64_t j = 0; j < m; ++j) c[i * m + j] += av * b[p * m + j];
    }
  }
}
// c[k x m] = a[n x k]^T * b[n x m]
inline void mm_tn(const float* a, const float* b, float* c, std::int64_t n, std::int64_t k, std::int64_t m) {
  for (std::int64_t i = 0; i < k * m; ++i) c[i] = 0.0f;
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t p = 0; p < k; ++p) {
      const float av = a[r * k + p];
      for (std::int64_t j = 0; j < m; ++j) c[p * m + j] += av * b[r * m + j];
    }
  }
}
// c[n x k] = a[n x m] * b[k x m]^T
inline void mm_nt(const float* a, const float* b, float* c, std::int64_t n, std::int64_t m, std::int64_t k) {
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t p = 0; p < k; ++p) {
      float sum = 0.0f;
      for (std::int64_t j = 0; j < m; ++j) sum += a[i * m + j] * b[p * m + j];
      c[i * k + p] = sum;
    }
  }
}
}  // namespace mlp_kernels

// The loss (16 partial sums over row groups) of one step. The weights are
// updated in place (they are external, like parameters in PyTorch).
inline std::vector<float> mlp_step(TensorEngine& engine, MlpModel& model) {
  using namespace mlp_kernels;
  const MlpConfig& c = model.config;
  const std::int64_t n = c.batch;
  const int layers = c.layers;
  struct Saved {
    Tensor input;  // h_{l-1} (external x for l = 0)
    Tensor pre;    // z_l (for an in-place ReLU, the same storage as the output)
    bool separate_pre = false;
  };
  std::vector<Saved> saved(static_cast<std::size_t>(layers));
  Tensor h = TensorEngine::external(model.x, n, c.width);
  for (int l = 0; l < layers; ++l) {
    const std::int64_t k = model.in_of(l), m = model.out_of(l);
    const Tensor w = TensorEngine::external(model.weights[static_cast<std::size_t>(l)], k, m);
    Tensor z = engine.run("mm", {h, w}, {{n, m}}, [=](auto in, auto out) { mm(in[0], in[1], out[0], n, k, m); })[0];
    saved[static_cast<std::size_t>(l)].input = h;
    saved[static_cast<std::size_t>(l)].pre = z;
    if (l == layers - 1) {
      h = z;
      break;
    }
    const std::int64_t count = n * m;
    if (l % 2 == 1) {
      engine.run_in_place("relu_", z, {}, [=](auto, auto out) {
        for (std::int64_t i = 0; i < count; ++i) out[0][i] = out[0][i] > 0.0f ? out[0][i] : 0.0f;
      });
      h = z;
    } else {
      h = engine.run("relu", {z}, {{n, m}}, [=](auto in, auto out) {
        for (std::int64_t i = 0; i < count; ++i) out[0][i] = in[0][i] > 0.0f ? in[0][i] : 0.0f;
      })[0];
      saved[static_cast<std::size_t>(l)].separate_pre = true;
    }
  }
  const Tensor target = TensorEngine::external(model.target, n, c.outputs);
  const std::int64_t groups = 16;
  const Tensor loss = engine.run("mse_loss", {h, target}, {{1, groups}}, [=](auto in, auto out) {
    for (std::int64_t g = 0; g < groups; ++g) out[0][g] = 0.0f;
    for (std::int64_t i = 0; i < n * c.outputs; ++i) {
      const float d = in[0][i] - in[1][i];
      out[0][(i / c.outputs) % groups] += d * d / static_cast<float>(n);
    }
  })[0];
  Tensor grad = engine.run("mse_loss_backward", {h, target}, {{n, c.outputs}}, [=](auto in, auto out) {
    for (std::int64_t i = 0; i < n * c.outputs; ++i) out[0][i] = 2.0f * (in[0][i] - in[1][i]) / static_cast<float>(n);
  })[0];
  engine.free(h);  // the last layer's output
  for (int l = layers - 1; l >= 0; --l) {
    Saved& s = saved[static_cast<std::size_t>(l)];
    const std::int64_t k = model.in_of(l), m = model.out_of(l);
    auto& weights = model.weights[static_cast<std::size_t>(l)];
    const Tensor w = TensorEngine::external(weights, k, m);
    const Tensor dw = engine.run("mm_tn", {s.input, grad}, {{k, m}},
                                 [=](auto in, auto out) { mm_tn(in[0], in[1], out[0], n, k, m); })[0];
    Tensor dh;
    if (l > 0) {
      dh =
          engine.run("mm_nt", {grad, w}, {{n, k}}, [=](auto in, auto out) { mm_nt(in[0], in[1], out[0], n, m, k); })[0];
    }
    // SGD: the weights are external; the op reads the tracked gradient.
    const float lr = c.learning_rate;
    float* wp = weights.data();
    engine.run("sgd_update", {dw}, {}, [=](auto in, auto) {
      for (std::int64_t i = 0; i < k * m; ++i) wp[i] -= lr * in[0][i];
    });
    engine.free(dw);
    engine.free(grad);
    if (l == 0) break;
    // ReLU backward of layer l-1: the mask comes from its pre-activation.
    Saved& prev = saved[static_cast<std::size_t>(l - 1)];
    const std::int64_t count = n * k;
    grad = engine.run("relu_backward", {dh, prev.pre}, {{n, k}}, [=](auto in, auto out) {
      for (std::int64_t i = 0; i < count; ++i) out[0][i] = in[1][i] > 0.0f ? in[0][i] : 0.0f;
    })[0];
    engine.free(dh);
    if (prev.separate_pre) engine.free(prev.pre);
    engine.free(s.input);  // h_{l-1}: the output of layer l-1's ReLU
  }
  // The caller reads the loss at the end of the step (loss.item()), inside an
  // op: after its last access a storage may already be released.
  std::vector<float> result(static_cast<std::size_t>(groups));
  float* out = result.data();
  engine.run("loss_item", {loss}, {}, [=](auto in, auto) { std::memcpy(out, in[0], groups * sizeof(float)); });
  engine.free(loss);
  return result;
}

}  // namespace hyperoffload::testing
