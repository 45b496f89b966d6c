#include "hyperoffload/gen/transformer_trace.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace hyperoffload {
namespace {

// Element sizes that do not follow dtype_bytes (see the header).
constexpr std::int64_t kStatBytes = 4;     // layer-norm mean/rstd and the logsumexp: fp32
constexpr std::int64_t kMaskBytes = 1;     // dropout masks: one bool per element
constexpr std::int64_t kTokenIdBytes = 8;  // input ids and targets: int64
constexpr std::int64_t kLossBytes = 4;     // the scalar loss: fp32

// More layers than this would make a trace of tens of millions of ops, far past
// any model anyone trains; the cap also keeps op and access counts in range.
constexpr std::int32_t kMaxLayers = 100'000;

constexpr StorageIndex kAbsent = -1;

// Whether an op draws random numbers (dropout): such an op is recomputable by
// RNG replay (the runtime restores its generator state for the re-run; trace
// format v3, `rng_replay`), as the capture marks it.
enum class Randomness : std::uint8_t { kDeterministic, kSeeded };

// ---------------------------------------------------------------------------
// Option checks

__extension__ using Wide = unsigned __int128;

// Products of option values saturate far above 2^63 instead of wrapping, so
// "does this size fit in int64" is one comparison.
constexpr Wide kSaturated = Wide{1} << 100;
Wide saturating_product(std::initializer_list<std::int64_t> factors) {
  Wide product = 1;
  for (std::int64_t factor : factors) {
    product *= static_cast<Wide>(factor);  // both < 2^101 before, so no wrap
    product = std::min(product, kSaturated);
  }
  return product;
}
constexpr Wide kMaxBytes = static_cast<Wide>(std::numeric_limits<std::int64_t>::max());

std::unexpected<Error> option_error(std::string message) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message));
}

Status check_positive(std::string_view name, std::int64_t value) {
  if (value > 0) return ok_status();
  return option_error(fmt::format("{} must be positive (got {})", name, value));
}

Status check_rate(std::string_view name, double value, std::string_view unit) {
  if (std::isfinite(value) && value > 0.0) return ok_status();
  return option_error(fmt::format("{} must be a positive number of {} (got {})", name, unit, value));
}

struct SizeCheck {
  std::string_view what;     // "the logits (batch × seq × vocab × dtype_bytes)"
  std::string_view reduce;   // "batch, seq or vocab"
  Wide bytes;
};

}  // namespace

namespace {

struct Preset {
  std::string_view name;
  std::int32_t layers;
  std::int64_t hidden;
  std::int64_t heads;
  std::int64_t seq;
  std::int64_t batch;
  AttentionKernel attention;
};
// GPT-2 at seq 1024, batch 8 with materialized attention; GPT-3-sized models at
// seq 2048, batch 16 with fused (flash) attention, the usual setting for them.
constexpr Preset kPresets[] = {
    {"gpt2-small", 12, 768, 12, 1024, 8, AttentionKernel::kMaterialized},
    {"gpt2-medium", 24, 1024, 16, 1024, 8, AttentionKernel::kMaterialized},
    {"gpt2-large", 36, 1280, 20, 1024, 8, AttentionKernel::kMaterialized},
    {"gpt2-xl", 48, 1600, 25, 1024, 8, AttentionKernel::kMaterialized},
    {"gpt3-1.3b", 24, 2048, 16, 2048, 16, AttentionKernel::kFlash},
    {"gpt3-2.7b", 32, 2560, 32, 2048, 16, AttentionKernel::kFlash},
    {"gpt3-6.7b", 32, 4096, 32, 2048, 16, AttentionKernel::kFlash},
};
constexpr std::string_view kPresetNames[] = {"gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl",
                                             "gpt3-1.3b",  "gpt3-2.7b",   "gpt3-6.7b"};

TransformerOptions options_of(const Preset& preset) {
  TransformerOptions options;
  options.layers = preset.layers;
  options.hidden = preset.hidden;
  options.heads = preset.heads;
  options.seq = preset.seq;
  options.batch = preset.batch;
  options.vocab = 50257;
  options.max_positions = preset.seq;
  options.dtype_bytes = 2;
  options.attention = preset.attention;
  options.dropout = Dropout::kOff;
  options.recompute = Recompute::kNone;
  options.optimizer = OptimizerStep::kNone;
  options.embeddings = EmbeddingTying::kTied;
  return options;
}

}  // namespace

std::span<const std::string_view> transformer_preset_names() { return kPresetNames; }

Result<TransformerOptions> transformer_preset(std::string_view name) {
  for (const Preset& preset : kPresets) {
    if (preset.name == name) return options_of(preset);
  }
  return make_error(ErrorCode::kNotFound, fmt::format("unknown transformer preset \"{}\"; known: {}", name,
                                                      fmt::join(kPresetNames, ", ")));
}

TransformerOptions demo_transformer_options() { return *transformer_preset("gpt3-1.3b"); }

Status validate_transformer_options(const TransformerOptions& o) {
  if (o.layers <= 0 || o.layers > kMaxLayers) {
    return option_error(fmt::format("layers must be between 1 and {} (got {})", kMaxLayers, o.layers));
  }
  HO_RETURN_IF_ERROR(check_positive("hidden", o.hidden));
  HO_RETURN_IF_ERROR(check_positive("heads", o.heads));
  HO_RETURN_IF_ERROR(check_positive("seq", o.seq));
  HO_RETURN_IF_ERROR(check_positive("batch", o.batch));
  HO_RETURN_IF_ERROR(check_positive("vocab", o.vocab));
  HO_RETURN_IF_ERROR(check_positive("mlp_ratio", o.mlp_ratio));
  if (o.hidden % o.heads != 0) {
    return option_error(fmt::format("hidden ({}) must be divisible by heads ({})", o.hidden, o.heads));
  }
  if (o.max_positions < 0 || (o.max_positions > 0 && o.max_positions < o.seq)) {
    return option_error(
        fmt::format("max_positions ({}) must be 0 (= seq) or at least seq ({})", o.max_positions, o.seq));
  }
  if (o.dtype_bytes < 1 || o.dtype_bytes > 8) {
    return option_error(fmt::format("dtype_bytes must be between 1 and 8 (got {})", o.dtype_bytes));
  }
  if (o.optimizer_state_bytes < 1 || o.optimizer_state_bytes > 8) {
    return option_error(
        fmt::format("optimizer_state_bytes must be between 1 and 8 (got {})", o.optimizer_state_bytes));
  }
  HO_RETURN_IF_ERROR(check_rate("tflops", o.tflops, "10^12 FLOP/s"));
  if (!(std::isfinite(o.matmul_efficiency) && o.matmul_efficiency > 0.0 && o.matmul_efficiency <= 1.0)) {
    return option_error(fmt::format("matmul_efficiency must be in (0, 1] (got {})", o.matmul_efficiency));
  }
  HO_RETURN_IF_ERROR(check_rate("memory_bandwidth_gb_per_s", o.memory_bandwidth_gb_per_s, "GB/s"));
  HO_RETURN_IF_ERROR(check_rate("d2h_bandwidth_gib_per_s", o.d2h_bandwidth_gib_per_s, "GiB/s"));
  HO_RETURN_IF_ERROR(check_rate("h2d_bandwidth_gib_per_s", o.h2d_bandwidth_gib_per_s, "GiB/s"));
  if (o.memory_limit_bytes && *o.memory_limit_bytes < 0) {
    return option_error(fmt::format("memory_limit_bytes must be non-negative (got {})", *o.memory_limit_bytes));
  }
  if (static_cast<int>(o.attention) > 1 || static_cast<int>(o.dropout) > 1 || static_cast<int>(o.recompute) > 1 ||
      static_cast<int>(o.optimizer) > 1 || static_cast<int>(o.embeddings) > 1) {
    return option_error("attention, dropout, recompute, optimizer or embeddings holds a value outside its enum");
  }

  // Every storage's size must fit in int64, and so must their sum (memory
  // profiles add them up). All shape fields are now >= 1, so each product
  // bounds the sizes built from it.
  const std::int64_t positions = o.max_positions > 0 ? o.max_positions : o.seq;
  const std::int64_t widest = std::max(o.dtype_bytes, o.optimizer_state_bytes);
  const std::array<SizeCheck, 7> checks = {{
      {"the MLP activations (batch × seq × hidden × mlp_ratio × dtype_bytes)", "batch, seq, hidden or mlp_ratio",
       saturating_product({o.batch, o.seq, o.hidden, o.mlp_ratio, o.dtype_bytes})},
      {"the QKV activations (batch × seq × 3 × hidden × dtype_bytes)", "batch, seq or hidden",
       saturating_product({o.batch, o.seq, 3, o.hidden, o.dtype_bytes})},
      {"the attention scores (batch × heads × seq × seq × dtype_bytes)", "batch, heads or seq",
       saturating_product({o.batch, o.heads, o.seq, o.seq, o.dtype_bytes})},
      {"the logits (batch × seq × vocab × dtype_bytes)", "batch, seq or vocab",
       saturating_product({o.batch, o.seq, o.vocab, o.dtype_bytes})},
      {"the token embedding table (vocab × hidden × bytes per element)", "vocab or hidden",
       saturating_product({o.vocab, o.hidden, widest})},
      {"the position table (max_positions × hidden × bytes per element)", "max_positions, seq or hidden",
       saturating_product({positions, o.hidden, widest})},
      {"an MLP weight (hidden × mlp_ratio × hidden × bytes per element)", "hidden or mlp_ratio",
       saturating_product({o.hidden, o.mlp_ratio, o.hidden, widest})},
  }};
  Wide per_layer = 0;
  for (const SizeCheck& check : checks) {
    if (check.bytes > kMaxBytes) {
      return option_error(fmt::format("{} would take {:.3g} bytes, more than a 64-bit byte count holds; reduce {}",
                                      check.what, static_cast<double>(check.bytes), check.reduce));
    }
    per_layer += check.bytes;
  }
  // A block holds fewer than 64 storages of at most these sizes (and the
  // embedding, head and loss fewer than 64 more), so this bounds the total.
  const Wide total = saturating_product({64, static_cast<std::int64_t>(per_layer), o.layers + 1});
  if (total > kMaxBytes) {
    return option_error(
        "the storages of one step together would exceed 2^63 bytes; reduce layers, batch, seq or hidden");
  }
  return ok_status();
}

namespace {

// ---------------------------------------------------------------------------
// Step construction

// One access plus the bytes it moves through memory (for memory-bound ops'
// durations; a gather touches only some rows of its table).
struct Touch {
  StorageIndex storage = kAbsent;
  AccessKind kind = AccessKind::kRead;
  std::int64_t bytes = 0;
};

struct Param {
  StorageIndex value = kAbsent;
  StorageIndex grad = kAbsent;
  std::int64_t elements = 0;
  std::size_t group = 0;  // optimizer group (index into StepBuilder::groups_)
};

// Parameters of one block, by role; -1 until first used.
enum LayerParam : std::size_t {
  kLn1Weight, kLn1Bias, kQkvWeight, kQkvBias, kProjWeight, kProjBias,
  kLn2Weight, kLn2Bias, kFc1Weight, kFc1Bias, kFc2Weight, kFc2Bias, kLayerParamCount,
};
using LayerParams = std::array<int, kLayerParamCount>;

// What one block's forward wrote; kAbsent where the configuration has no such
// tensor (scores under flash attention, masks without dropout).
struct LayerActivations {
  StorageIndex input = kAbsent;
  StorageIndex ln1_out = kAbsent, ln1_mean = kAbsent, ln1_rstd = kAbsent;
  StorageIndex qkv = kAbsent;
  StorageIndex scores = kAbsent, probs = kAbsent, probs_mask = kAbsent, probs_dropped = kAbsent;
  StorageIndex logsumexp = kAbsent;
  StorageIndex context = kAbsent;
  StorageIndex proj = kAbsent, proj_mask = kAbsent, proj_dropped = kAbsent;
  StorageIndex residual = kAbsent;
  StorageIndex ln2_out = kAbsent, ln2_mean = kAbsent, ln2_rstd = kAbsent;
  StorageIndex fc1 = kAbsent, gelu = kAbsent;
  StorageIndex fc2 = kAbsent, fc2_mask = kAbsent, fc2_dropped = kAbsent;
  StorageIndex output = kAbsent;
};

class StepBuilder {
 public:
  explicit StepBuilder(const TransformerOptions& options)
      : o_(options),
        B_(options.batch), S_(options.seq), H_(options.hidden), A_(options.heads),
        F_(options.mlp_ratio * options.hidden), V_(options.vocab), E_(options.dtype_bytes),
        T_(options.batch * options.seq),
        P_(options.max_positions > 0 ? options.max_positions : options.seq),
        layer_params_(static_cast<std::size_t>(options.layers)),
        saved_(static_cast<std::size_t>(options.layers)) {
    layer_params_.assign(layer_params_.size(), filled(-1));
  }

  Result<TransformerTrace> build() && {
    forward();
    backward();
    if (o_.optimizer == OptimizerStep::kAdamW) optimizer_step();

    TraceBuilder builder;
    builder.reserve(ops_.size(), sizes_.size(), accesses_.size());
    builder.set_memory_limit_bytes(o_.memory_limit_bytes);
    builder.set_d2h_bandwidth_gib_per_s(o_.d2h_bandwidth_gib_per_s);
    builder.set_h2d_bandwidth_gib_per_s(o_.h2d_bandwidth_gib_per_s);
    for (std::size_t s = 0; s < sizes_.size(); ++s) {
      HO_RETURN_IF_ERROR(builder.add_storage(static_cast<StorageId>(s), sizes_[s], retention_[s]));
    }
    const std::vector<Recomputable> recomputable = recomputable_ops();
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const OpRecord& op = ops_[i];
      HO_RETURN_IF_ERROR(builder.add_op(op.name, op.duration_ms, recomputable[i]));
      for (std::size_t a = op.access_begin; a < op.access_end; ++a) {
        builder.add_access(accesses_[a].storage, accesses_[a].kind);
      }
    }
    TransformerTrace result;
    HO_ASSIGN_OR_RETURN(result.trace, std::move(builder).build());
    result.storage_names = std::move(names_);
    for (const Param& param : params_) result.parameter_count += param.elements;
    return result;
  }

 private:
  struct OpRecord {
    std::string name;
    double duration_ms = 0.0;
    std::size_t access_begin = 0;
    std::size_t access_end = 0;
    Randomness randomness = Randomness::kDeterministic;
  };
  struct Access {
    StorageIndex storage;
    AccessKind kind;
  };

  static LayerParams filled(int value) {
    LayerParams params;
    params.fill(value);
    return params;
  }

  // --- storages, params, ops ------------------------------------------------

  StorageIndex storage(std::string name, std::int64_t bytes, Retention retention = Retention::kReleasable) {
    names_.push_back(std::move(name));
    sizes_.push_back(bytes);
    retention_.push_back(retention);
    return static_cast<StorageIndex>(sizes_.size() - 1);
  }
  const std::string& name_of(StorageIndex s) const { return names_[static_cast<std::size_t>(s)]; }
  std::int64_t size_of(StorageIndex s) const { return sizes_[static_cast<std::size_t>(s)]; }
  // A transient gradient of `activation`, same size, named after it.
  StorageIndex gradient_of(StorageIndex activation) {
    return storage(name_of(activation) + ".grad", size_of(activation));
  }

  Touch read(StorageIndex s) const { return {s, AccessKind::kRead, size_of(s)}; }
  Touch write(StorageIndex s) const { return {s, AccessKind::kWrite, size_of(s)}; }
  Touch read_part(StorageIndex s, std::int64_t bytes) const { return {s, AccessKind::kRead, bytes}; }

  // Creates the parameter on its first use (so ids follow first appearance).
  int param(std::string name, std::int64_t elements, std::string_view group) {
    if (groups_.empty() || groups_.back().name != group) groups_.push_back({std::string(group), {}});
    const StorageIndex value = storage(std::move(name), elements * E_, Retention::kRetained);
    params_.push_back({value, kAbsent, elements, groups_.size() - 1});
    groups_.back().params.push_back(static_cast<int>(params_.size() - 1));
    return static_cast<int>(params_.size() - 1);
  }
  StorageIndex value_of(int p) const { return params_[static_cast<std::size_t>(p)].value; }

  // The weight-gradient accesses of a backward op: the first contribution
  // writes the (retained) gradient, later ones read and write it.
  void add_gradient(std::vector<Touch>& touches, int p) {
    Param& param = params_[static_cast<std::size_t>(p)];
    if (param.grad == kAbsent) {
      param.grad = storage(name_of(param.value) + ".grad", param.elements * E_, Retention::kRetained);
    } else {
      touches.push_back(read(param.grad));
    }
    touches.push_back(write(param.grad));
  }

  void add_op(std::string name, double duration_ms, const std::vector<Touch>& touches,
              Randomness randomness = Randomness::kDeterministic) {
    OpRecord op{std::move(name), duration_ms, accesses_.size(), 0, randomness};
    for (const Touch& touch : touches) accesses_.push_back({touch.storage, touch.kind});
    op.access_end = accesses_.size();
    ops_.push_back(std::move(op));
  }
  // Compute-bound: FLOPs at tflops * matmul_efficiency.
  void matmul_op(std::string name, double flops, const std::vector<Touch>& touches,
                 Randomness randomness = Randomness::kDeterministic) {
    add_op(std::move(name), flops / (o_.tflops * 1e12 * o_.matmul_efficiency) * 1e3, touches, randomness);
  }
  // Memory-bound: the bytes its accesses touch at the memory bandwidth.
  void memory_op(std::string name, const std::vector<Touch>& touches,
                 Randomness randomness = Randomness::kDeterministic) {
    double bytes = 0.0;
    for (const Touch& touch : touches) bytes += static_cast<double>(touch.bytes);
    add_op(std::move(name), bytes / (o_.memory_bandwidth_gb_per_s * 1e9) * 1e3, touches, randomness);
  }

  // Which ops are recomputable (trace format v2): deterministic, writing at
  // least one storage, and writing only storages they create (first accessed
  // by that op) without also reading them. Dropout draws a fresh mask and
  // in-place updates (gradient accumulation, the optimizer, the scores backward
  // filling the qkv gradient) cannot be re-run from their inputs; everything
  // else — the whole forward pass, the loss and most backward ops — can.
  std::vector<Recomputable> recomputable_ops() const {
    std::vector<Recomputable> result(ops_.size(), Recomputable::kNo);
    std::vector<bool> seen(sizes_.size(), false);
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const OpRecord& op = ops_[i];
      bool writes = false;
      bool fresh_writes_only = true;
      for (std::size_t a = op.access_begin; a < op.access_end; ++a) {
        const Access& access = accesses_[a];
        if (access.kind != AccessKind::kWrite) continue;
        writes = true;
        if (seen[static_cast<std::size_t>(access.storage)]) fresh_writes_only = false;
        for (std::size_t b = op.access_begin; b < op.access_end; ++b) {
          if (accesses_[b].storage == access.storage && accesses_[b].kind == AccessKind::kRead) {
            fresh_writes_only = false;
          }
        }
      }
      if (writes && fresh_writes_only) {
        result[i] = op.randomness == Randomness::kSeeded ? Recomputable::kWithRngReplay : Recomputable::kYes;
      }
      for (std::size_t a = op.access_begin; a < op.access_end; ++a) {
        seen[static_cast<std::size_t>(accesses_[a].storage)] = true;
      }
    }
    return result;
  }

  static double f64(std::int64_t value) { return static_cast<double>(value); }
  std::int64_t token_bytes() const { return T_ * H_ * E_; }  // one T x H activation
  bool dropout() const { return o_.dropout == Dropout::kOn; }
  bool flash() const { return o_.attention == AttentionKernel::kFlash; }

  // FLOPs of the forward matmuls (2 * M * N * K); backward ops do twice as many.
  double qkv_flops() const { return 2.0 * f64(T_) * f64(H_) * f64(3 * H_); }
  double scores_flops() const { return 2.0 * f64(B_) * f64(A_) * f64(S_) * f64(S_) * f64(H_ / A_); }
  double context_flops() const { return scores_flops(); }
  double proj_flops() const { return 2.0 * f64(T_) * f64(H_) * f64(H_); }
  double fc_flops() const { return 2.0 * f64(T_) * f64(H_) * f64(F_); }
  double head_flops() const { return 2.0 * f64(T_) * f64(H_) * f64(V_); }
  // Flash attention: both attention matmuls forward; its backward does their
  // backward (2x) and recomputes the scores on the way.
  double flash_forward_flops() const { return scores_flops() + context_flops(); }
  double flash_backward_flops() const { return 2.0 * flash_forward_flops() + scores_flops(); }

  // Dropout on `input` (when enabled): returns the tensor to use downstream and
  // stores the mask in `mask`.
  StorageIndex maybe_dropout(const std::string& op_name, StorageIndex input, std::int64_t elements,
                             StorageIndex& mask, StorageIndex& dropped) {
    if (!dropout()) return input;
    mask = storage(op_name + ".mask", elements * kMaskBytes);
    dropped = storage(op_name + ".out", size_of(input));
    memory_op(op_name, {read(input), write(mask), write(dropped)}, Randomness::kSeeded);
    return dropped;
  }

  // --- forward --------------------------------------------------------------

  // Layer norm over the last dimension; writes out, mean and rstd.
  void layer_norm(const std::string& op_name, StorageIndex input, int weight, int bias, StorageIndex& out,
                  StorageIndex& mean, StorageIndex& rstd) {
    out = storage(op_name + ".out", token_bytes());
    mean = storage(op_name + ".mean", T_ * kStatBytes);
    rstd = storage(op_name + ".rstd", T_ * kStatBytes);
    memory_op(op_name, {read(input), read(value_of(weight)), read(value_of(bias)), write(out), write(mean),
                        write(rstd)});
  }

  int& layer_param(std::int32_t layer, LayerParam role) {
    return layer_params_[static_cast<std::size_t>(layer)][role];
  }
  // The block's parameter `role` (an index into params_), created on first use.
  int use_param(std::int32_t layer, LayerParam role, std::string_view module, std::string_view kind,
                std::int64_t elements) {
    int& slot = layer_param(layer, role);
    if (slot < 0) {
      slot = param(fmt::format("layer{}.{}.{}", layer, module, kind), elements, fmt::format("layer{}", layer));
    }
    return slot;
  }

  // One block's forward from `input`; op and storage names start with `prefix`
  // ("layer3." or, when recomputing, "layer3.recompute.").
  LayerActivations layer_forward(std::int32_t l, StorageIndex input, const std::string& prefix) {
    LayerActivations a;
    a.input = input;
    const int ln1_w = use_param(l, kLn1Weight, "ln1", "weight", H_);
    const int ln1_b = use_param(l, kLn1Bias, "ln1", "bias", H_);
    layer_norm(prefix + "ln1", input, ln1_w, ln1_b, a.ln1_out, a.ln1_mean, a.ln1_rstd);

    const int qkv_w = use_param(l, kQkvWeight, "attn.qkv", "weight", H_ * 3 * H_);
    const int qkv_b = use_param(l, kQkvBias, "attn.qkv", "bias", 3 * H_);
    a.qkv = storage(prefix + "attn.qkv_matmul.out", T_ * 3 * H_ * E_);
    matmul_op(prefix + "attn.qkv_matmul", qkv_flops(),
              {read(a.ln1_out), read(value_of(qkv_w)), read(value_of(qkv_b)), write(a.qkv)});

    if (flash()) {
      a.context = storage(prefix + "attn.flash_attention.out", token_bytes());
      a.logsumexp = storage(prefix + "attn.flash_attention.logsumexp", B_ * A_ * S_ * kStatBytes);
      // With dropout the fused kernel draws its mask from the RNG state.
      matmul_op(prefix + "attn.flash_attention", flash_forward_flops(),
                {read(a.qkv), write(a.context), write(a.logsumexp)},
                dropout() ? Randomness::kSeeded : Randomness::kDeterministic);
    } else {
      const std::int64_t score_elements = B_ * A_ * S_ * S_;
      a.scores = storage(prefix + "attn.scores_matmul.out", score_elements * E_);
      matmul_op(prefix + "attn.scores_matmul", scores_flops(), {read(a.qkv), write(a.scores)});
      // Scale and causal mask are fused into the softmax.
      a.probs = storage(prefix + "attn.softmax.out", score_elements * E_);
      memory_op(prefix + "attn.softmax", {read(a.scores), write(a.probs)});
      const StorageIndex probs_used =
          maybe_dropout(prefix + "attn.probs_dropout", a.probs, score_elements, a.probs_mask, a.probs_dropped);
      // Writes the context directly in T x H layout (heads merged).
      a.context = storage(prefix + "attn.context_matmul.out", token_bytes());
      matmul_op(prefix + "attn.context_matmul", context_flops(), {read(probs_used), read(a.qkv), write(a.context)});
    }

    const int proj_w = use_param(l, kProjWeight, "attn.proj", "weight", H_ * H_);
    const int proj_b = use_param(l, kProjBias, "attn.proj", "bias", H_);
    a.proj = storage(prefix + "attn.proj_matmul.out", token_bytes());
    matmul_op(prefix + "attn.proj_matmul", proj_flops(),
              {read(a.context), read(value_of(proj_w)), read(value_of(proj_b)), write(a.proj)});
    const StorageIndex proj_used =
        maybe_dropout(prefix + "attn.proj_dropout", a.proj, T_ * H_, a.proj_mask, a.proj_dropped);
    a.residual = storage(prefix + "attn.residual_add.out", token_bytes());
    memory_op(prefix + "attn.residual_add", {read(input), read(proj_used), write(a.residual)});

    const int ln2_w = use_param(l, kLn2Weight, "ln2", "weight", H_);
    const int ln2_b = use_param(l, kLn2Bias, "ln2", "bias", H_);
    layer_norm(prefix + "ln2", a.residual, ln2_w, ln2_b, a.ln2_out, a.ln2_mean, a.ln2_rstd);

    const int fc1_w = use_param(l, kFc1Weight, "mlp.fc1", "weight", H_ * F_);
    const int fc1_b = use_param(l, kFc1Bias, "mlp.fc1", "bias", F_);
    a.fc1 = storage(prefix + "mlp.fc1_matmul.out", T_ * F_ * E_);
    matmul_op(prefix + "mlp.fc1_matmul", fc_flops(),
              {read(a.ln2_out), read(value_of(fc1_w)), read(value_of(fc1_b)), write(a.fc1)});
    a.gelu = storage(prefix + "mlp.gelu.out", T_ * F_ * E_);
    memory_op(prefix + "mlp.gelu", {read(a.fc1), write(a.gelu)});
    const int fc2_w = use_param(l, kFc2Weight, "mlp.fc2", "weight", F_ * H_);
    const int fc2_b = use_param(l, kFc2Bias, "mlp.fc2", "bias", H_);
    a.fc2 = storage(prefix + "mlp.fc2_matmul.out", token_bytes());
    matmul_op(prefix + "mlp.fc2_matmul", fc_flops(),
              {read(a.gelu), read(value_of(fc2_w)), read(value_of(fc2_b)), write(a.fc2)});
    const StorageIndex fc2_used = maybe_dropout(prefix + "mlp.fc2_dropout", a.fc2, T_ * H_, a.fc2_mask, a.fc2_dropped);
    a.output = storage(prefix + "mlp.residual_add.out", token_bytes());
    memory_op(prefix + "mlp.residual_add", {read(a.residual), read(fc2_used), write(a.output)});
    return a;
  }

  void forward() {
    input_ids_ = storage("batch.input_ids", T_ * kTokenIdBytes);
    wte_ = param("embedding.token.weight", V_ * H_, "embedding");
    wpe_ = param("embedding.position.weight", P_ * H_, "embedding");
    embedding_out_ = storage("embedding.out", token_bytes());
    // A gather: T rows of the token table, S rows of the position table.
    memory_op("embedding", {read(input_ids_), read_part(value_of(wte_), token_bytes()),
                            read_part(value_of(wpe_), S_ * H_ * E_), write(embedding_out_)});
    StorageIndex x = maybe_dropout("embedding.dropout", embedding_out_, T_ * H_, embedding_mask_, embedding_dropped_);

    for (std::int32_t l = 0; l < o_.layers; ++l) {
      LayerActivations a = layer_forward(l, x, fmt::format("layer{}.", l));
      if (o_.recompute == Recompute::kFull) {
        // Only the block's input survives; the rest is freed after its last
        // forward use and recomputed before the block's backward.
        const StorageIndex output = a.output;
        a = LayerActivations{};
        a.input = x;
        a.output = output;
      }
      saved_[static_cast<std::size_t>(l)] = a;
      x = a.output;
    }
    final_input_ = x;

    final_ln_weight_ = param("final_ln.weight", H_, "final_ln");
    final_ln_bias_ = param("final_ln.bias", H_, "final_ln");
    layer_norm("final_ln", x, final_ln_weight_, final_ln_bias_, final_ln_out_, final_ln_mean_, final_ln_rstd_);

    head_ = o_.embeddings == EmbeddingTying::kTied ? wte_ : param("lm_head.weight", V_ * H_, "lm_head");
    logits_ = storage("lm_head_matmul.out", T_ * V_ * E_);
    matmul_op("lm_head_matmul", head_flops(), {read(final_ln_out_), read(value_of(head_)), write(logits_)});

    // log_softmax + nll_loss: the log-probabilities are saved, the logits are not.
    targets_ = storage("batch.targets", T_ * kTokenIdBytes);
    log_probs_ = storage("loss.cross_entropy.log_probs", T_ * V_ * E_);
    loss_ = storage("loss.cross_entropy.out", kLossBytes, Retention::kRetained);
    memory_op("loss.cross_entropy", {read(logits_), read(targets_), write(log_probs_), write(loss_)});
  }

  // --- backward -------------------------------------------------------------

  // Dropout backward (when enabled): gradient of the dropout input from the
  // gradient of its output and the mask.
  StorageIndex maybe_dropout_backward(const std::string& op_name, StorageIndex grad_out, StorageIndex input,
                                      StorageIndex mask) {
    if (!dropout()) return grad_out;
    const StorageIndex grad_in = gradient_of(input);
    memory_op(op_name + ".backward", {read(grad_out), read(mask), write(grad_in)});
    return grad_in;
  }

  // Layer-norm backward: the input gradient (plus `residual_grad`, the other
  // path's gradient of the same input, when given) and the weight gradients.
  StorageIndex layer_norm_backward(const std::string& op_name, StorageIndex grad_out, StorageIndex input,
                                   StorageIndex mean, StorageIndex rstd, int weight, int bias,
                                   StorageIndex residual_grad) {
    const StorageIndex grad_in = gradient_of(input);
    std::vector<Touch> touches = {read(grad_out), read(input), read(mean), read(rstd), read(value_of(weight))};
    if (residual_grad != kAbsent) touches.push_back(read(residual_grad));
    touches.push_back(write(grad_in));
    add_gradient(touches, weight);
    add_gradient(touches, bias);
    memory_op(op_name + ".backward", touches);
    return grad_in;
  }

  // Backward of `out = input @ weight + bias`: input and weight gradients.
  StorageIndex linear_backward(const std::string& op_name, double forward_flops, StorageIndex grad_out,
                               StorageIndex input, int weight, int bias) {
    const StorageIndex grad_in = gradient_of(input);
    std::vector<Touch> touches = {read(grad_out), read(input), read(value_of(weight)), write(grad_in)};
    add_gradient(touches, weight);
    if (bias >= 0) add_gradient(touches, bias);
    matmul_op(op_name + ".backward", 2.0 * forward_flops, touches);
    return grad_in;
  }

  // One block's backward; returns the gradient of its input.
  StorageIndex layer_backward(std::int32_t l, const LayerActivations& a, StorageIndex grad_output) {
    const std::string p = fmt::format("layer{}.", l);
    const LayerParams& w = layer_params_[static_cast<std::size_t>(l)];

    const StorageIndex grad_fc2 = maybe_dropout_backward(p + "mlp.fc2_dropout", grad_output, a.fc2, a.fc2_mask);
    const StorageIndex grad_gelu =
        linear_backward(p + "mlp.fc2_matmul", fc_flops(), grad_fc2, a.gelu, w[kFc2Weight], w[kFc2Bias]);
    const StorageIndex grad_fc1 = gradient_of(a.fc1);
    memory_op(p + "mlp.gelu.backward", {read(grad_gelu), read(a.fc1), write(grad_fc1)});
    const StorageIndex grad_ln2 =
        linear_backward(p + "mlp.fc1_matmul", fc_flops(), grad_fc1, a.ln2_out, w[kFc1Weight], w[kFc1Bias]);
    const StorageIndex grad_residual = layer_norm_backward(p + "ln2", grad_ln2, a.residual, a.ln2_mean, a.ln2_rstd,
                                                           w[kLn2Weight], w[kLn2Bias], grad_output);

    const StorageIndex grad_proj = maybe_dropout_backward(p + "attn.proj_dropout", grad_residual, a.proj, a.proj_mask);
    const StorageIndex grad_context =
        linear_backward(p + "attn.proj_matmul", proj_flops(), grad_proj, a.context, w[kProjWeight], w[kProjBias]);

    StorageIndex grad_qkv = kAbsent;
    if (flash()) {
      grad_qkv = gradient_of(a.qkv);
      matmul_op(p + "attn.flash_attention.backward", flash_backward_flops(),
                {read(grad_context), read(a.qkv), read(a.context), read(a.logsumexp), write(grad_qkv)});
    } else {
      const StorageIndex probs_used = dropout() ? a.probs_dropped : a.probs;
      const StorageIndex grad_probs_used = gradient_of(probs_used);
      grad_qkv = gradient_of(a.qkv);
      // Writes the gradients of the probabilities and of V (one slice of the
      // T x 3H qkv gradient; the scores backward fills the Q and K slices).
      matmul_op(p + "attn.context_matmul.backward", 2.0 * context_flops(),
                {read(grad_context), read(probs_used), read(a.qkv), write(grad_probs_used), write(grad_qkv)});
      const StorageIndex grad_probs =
          maybe_dropout_backward(p + "attn.probs_dropout", grad_probs_used, a.probs, a.probs_mask);
      const StorageIndex grad_scores = gradient_of(a.scores);
      memory_op(p + "attn.softmax.backward", {read(grad_probs), read(a.probs), write(grad_scores)});
      matmul_op(p + "attn.scores_matmul.backward", 2.0 * scores_flops(),
                {read(grad_scores), read(a.qkv), read(grad_qkv), write(grad_qkv)});
    }
    const StorageIndex grad_ln1 =
        linear_backward(p + "attn.qkv_matmul", qkv_flops(), grad_qkv, a.ln1_out, w[kQkvWeight], w[kQkvBias]);
    return layer_norm_backward(p + "ln1", grad_ln1, a.input, a.ln1_mean, a.ln1_rstd, w[kLn1Weight], w[kLn1Bias],
                               grad_residual);
  }

  void backward() {
    const StorageIndex grad_logits = gradient_of(logits_);
    memory_op("loss.cross_entropy.backward", {read(log_probs_), read(targets_), write(grad_logits)});
    const StorageIndex grad_final_ln =
        linear_backward("lm_head_matmul", head_flops(), grad_logits, final_ln_out_, head_, /*bias=*/-1);
    StorageIndex grad_x = layer_norm_backward("final_ln", grad_final_ln, final_input_, final_ln_mean_,
                                              final_ln_rstd_, final_ln_weight_, final_ln_bias_, kAbsent);

    for (std::int32_t l = o_.layers - 1; l >= 0; --l) {
      LayerActivations a = saved_[static_cast<std::size_t>(l)];
      if (o_.recompute == Recompute::kFull) a = layer_forward(l, a.input, fmt::format("layer{}.recompute.", l));
      grad_x = layer_backward(l, a, grad_x);
    }

    grad_x = maybe_dropout_backward("embedding.dropout", grad_x, embedding_out_, embedding_mask_);
    // Dense embedding gradients: the whole tables are written (zero-filled and
    // scattered into), or accumulated into when the LM head already wrote one.
    std::vector<Touch> touches = {read(grad_x), read(input_ids_)};
    add_gradient(touches, wte_);
    add_gradient(touches, wpe_);
    memory_op("embedding.backward", touches);
  }

  // --- optimizer ------------------------------------------------------------

  // AdamW per group: reads each gradient, updates each parameter and both
  // moments in place (the moments exist from earlier steps: first touched here).
  void optimizer_step() {
    for (const Group& group : groups_) {
      std::vector<Touch> touches;
      for (int p : group.params) {
        const Param& param = params_[static_cast<std::size_t>(p)];
        const std::string name = name_of(param.value);  // a copy: storage() grows names_
        const StorageIndex exp_avg =
            storage(name + ".exp_avg", param.elements * o_.optimizer_state_bytes, Retention::kRetained);
        const StorageIndex exp_avg_sq =
            storage(name + ".exp_avg_sq", param.elements * o_.optimizer_state_bytes, Retention::kRetained);
        touches.insert(touches.end(), {read(param.grad), read(param.value), write(param.value), read(exp_avg),
                                       write(exp_avg), read(exp_avg_sq), write(exp_avg_sq)});
      }
      memory_op("optimizer.adamw." + group.name, touches);
    }
  }

  struct Group {
    std::string name;
    std::vector<int> params;
  };

  const TransformerOptions& o_;
  const std::int64_t B_, S_, H_, A_, F_, V_, E_, T_, P_;

  std::vector<std::string> names_;
  std::vector<std::int64_t> sizes_;
  std::vector<Retention> retention_;
  std::vector<OpRecord> ops_;
  std::vector<Access> accesses_;

  std::vector<Param> params_;
  std::vector<Group> groups_;
  std::vector<LayerParams> layer_params_;
  std::vector<LayerActivations> saved_;

  StorageIndex input_ids_ = kAbsent, targets_ = kAbsent;
  int wte_ = -1, wpe_ = -1, head_ = -1, final_ln_weight_ = -1, final_ln_bias_ = -1;
  StorageIndex embedding_out_ = kAbsent, embedding_mask_ = kAbsent, embedding_dropped_ = kAbsent;
  StorageIndex final_input_ = kAbsent;
  StorageIndex final_ln_out_ = kAbsent, final_ln_mean_ = kAbsent, final_ln_rstd_ = kAbsent;
  StorageIndex logits_ = kAbsent, log_probs_ = kAbsent, loss_ = kAbsent;
};

}  // namespace

Result<TransformerTrace> generate_transformer(const TransformerOptions& options) {
  HO_RETURN_IF_ERROR(validate_transformer_options(options));
  return StepBuilder(options).build();
}

Result<Trace> generate_transformer_trace(const TransformerOptions& options) {
  HO_ASSIGN_OR_RETURN(TransformerTrace generated, generate_transformer(options));
  return std::move(generated.trace);
}

}  // namespace hyperoffload
