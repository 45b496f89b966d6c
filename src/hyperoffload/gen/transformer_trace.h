// GPT-style decoder training steps as traces ("hyperoffload generate transformer").
//
// One step of a pre-layer-norm decoder (GPT-2 style): embedding, `layers`
// blocks, final layer norm, LM head, cross-entropy loss; then the backward pass
// in reverse; then (optionally) an AdamW step. The trace records what autograd
// keeps alive between the two passes, so it has the memory shape that
// activation offloading is about: saved activations pile up through the forward
// pass, peak at the forward/backward boundary and drain through the backward.
//
//   TransformerOptions options = demo_transformer_options();
//   options.layers = 24;
//   Result<Trace> trace = generate_transformer_trace(options);
//
// Glossary (shapes; docs/GENERATORS.md has every op with its formulas):
//   B batch, S seq, H hidden, A heads, D = H / A, F = mlp_ratio * H, V vocab,
//   T = B * S tokens, E = dtype_bytes.
//
// One block, forward (every tensor is T x H unless said; "saves" = what its
// backward op reads again):
//   ln1                 writes ln1.out, mean and rstd (T fp32 each); saves its input, mean, rstd
//   attn.qkv_matmul     T x 3H, saves ln1.out
//   attn.scores_matmul  B x A x S x S scores (materialized attention only), saves qkv
//   attn.softmax        B x A x S x S probabilities, saves them
//   attn.context_matmul T x H, saves probabilities and qkv
//   attn.flash_attention (AttentionKernel::kFlash, instead of the three above):
//                       T x H output + logsumexp (B x A x S fp32); nothing S x S exists
//   attn.proj_matmul    saves the context
//   attn.residual_add   x + proj
//   ln2, mlp.fc1_matmul (T x F), mlp.gelu (T x F, saves fc1.out), mlp.fc2_matmul
//   (saves gelu.out), mlp.residual_add
// With Dropout::kOn, dropout ops after the embedding, the attention
// probabilities, the attention projection and fc2 write a one-byte-per-element
// mask that their backward reads.
//
// Backward, in reverse: "<op>.backward" reads what "<op>" saved plus the
// incoming gradient, writes the outgoing gradient (a new transient storage,
// freed after its last use) and the weight gradients. A residual add has no
// backward op (it passes the gradient through); the layer norm backward that
// closes each residual branch also adds the residual-path gradient, which is
// where autograd accumulates a tensor used twice.
//
// Storages are created when first accessed, so ids are dense 0..n-1 in order
// of first appearance; see TransformerTrace::storage_names for their names.
// Parameters, their gradients, optimizer state and the loss are retained; a
// weight gradient is written by the first backward op that contributes to it
// and read-and-written by later ones (the tied embedding).
//
// Recomputable ops (trace format v2, ir/trace.h): every op that is
// deterministic and writes only storages it creates, without reading them —
// the forward ops, the loss and the backward ops that write fresh gradients.
// Dropout (and flash attention with dropout, which draws its mask inside) is
// seeded; gradient accumulation, the scores backward that fills the qkv
// gradient in place and the optimizer update are in-place: none of those is
// recomputable.
//
// Durations: a matmul (and flash attention) takes FLOPs / (tflops * 1e12 *
// matmul_efficiency) s, a matmul's backward twice its forward FLOPs; every
// other op is memory-bound and takes the bytes it touches / memory bandwidth.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hyperoffload/ir/status.h"
#include "hyperoffload/ir/trace.h"

namespace hyperoffload {

// How attention is computed.
enum class AttentionKernel : std::uint8_t {
  kMaterialized,  // eager: S x S scores and probabilities exist; probabilities are saved
  kFlash,         // fused (FlashAttention): saves only its output and the logsumexp
};

// Whether dropout runs (and saves its masks). Flash attention regenerates its
// dropout mask from the RNG state, so it never saves one.
enum class Dropout : std::uint8_t { kOff, kOn };

// Activation recomputation ("checkpointing").
enum class Recompute : std::uint8_t {
  kNone,  // every block saves its activations for the backward pass
  kFull,  // every block saves only its input and re-runs its forward
          // ("layer<i>.recompute.<op>") just before its backward
};

// Whether the step ends with an optimizer update. Off by default: a trace
// storage is resident from its first access, so AdamW moments (12 bytes per
// parameter with the weights and gradients) would appear only in the last ops,
// where no plan can move them; turn it on to include the update's traffic and
// memory.
enum class OptimizerStep : std::uint8_t {
  kNone,   // the trace ends with the backward pass
  kAdamW,  // one "optimizer.adamw.<group>" op per parameter group after the backward
};

// Whether the LM head reuses the token embedding table (GPT-2 does).
enum class EmbeddingTying : std::uint8_t { kTied, kUntied };

struct TransformerOptions {
  // Model shape. Every field must be positive; hidden must be divisible by heads.
  std::int32_t layers = 12;
  std::int64_t hidden = 768;
  std::int64_t heads = 12;
  std::int64_t seq = 1024;
  std::int64_t batch = 8;
  std::int64_t vocab = 50257;
  std::int64_t mlp_ratio = 4;       // MLP width F = mlp_ratio * hidden
  std::int64_t max_positions = 0;   // rows of the position table; 0 = seq, else >= seq

  // Bytes per element of activations, parameters and gradients (2 = fp16/bf16).
  // Layer-norm statistics, the logsumexp and the loss are fp32, dropout masks one
  // byte, token ids int64, whatever this is.
  std::int64_t dtype_bytes = 2;
  // Bytes per element of each AdamW moment (exp_avg, exp_avg_sq); 4 = fp32.
  std::int64_t optimizer_state_bytes = 4;

  AttentionKernel attention = AttentionKernel::kMaterialized;
  Dropout dropout = Dropout::kOff;
  Recompute recompute = Recompute::kNone;
  OptimizerStep optimizer = OptimizerStep::kNone;
  EmbeddingTying embeddings = EmbeddingTying::kTied;

  // Accelerator. Defaults: an A100 (312 dense fp16 TFLOP/s, 1555 GB/s HBM).
  double tflops = 312.0;                     // peak matmul throughput, 10^12 FLOP/s
  double matmul_efficiency = 0.6;            // fraction of tflops matmuls reach, in (0, 1]
  double memory_bandwidth_gb_per_s = 1555.0; // for memory-bound ops, 10^9 bytes/s

  // Written into the trace: copy bandwidths (GiB/s) and the budget (nullopt = unlimited).
  double d2h_bandwidth_gib_per_s = kDefaultBandwidthGiBPerS;
  double h2d_bandwidth_gib_per_s = kDefaultBandwidthGiBPerS;
  std::optional<std::int64_t> memory_limit_bytes;
};

// The embedded default model of `hyperoffload demo`: the "gpt3-1.3b" preset, a
// model whose activations, not its parameters, fill the device — the case
// activation offloading is for. Generates in milliseconds.
TransformerOptions demo_transformer_options();

// Model presets (tied embeddings, vocab 50257, fp16 on an A100, no optimizer step):
//   gpt2-small 12 x 768 (12 heads), gpt2-medium 24 x 1024 (16),
//   gpt2-large 36 x 1280 (20), gpt2-xl 48 x 1600 (25): seq 1024, batch 8,
//   materialized attention;
//   gpt3-1.3b 24 x 2048 (16), gpt3-2.7b 32 x 2560 (32), gpt3-6.7b 32 x 4096 (32):
//   seq 2048, batch 16, flash attention.
// An unknown name is kNotFound, listing the known ones.
Result<TransformerOptions> transformer_preset(std::string_view name);
std::span<const std::string_view> transformer_preset_names();

// Checks the options; errors are kInvalidArgument and name the offending field
// ("hidden (770) must be divisible by heads (12)"), including sizes whose byte
// counts would not fit in 64 bits.
Status validate_transformer_options(const TransformerOptions& options);

struct TransformerTrace {
  Trace trace;
  // Name of each storage by index (== id), e.g. "layer3.attn.softmax.out",
  // "layer3.mlp.fc1.weight.grad", "embedding.token.weight.exp_avg".
  std::vector<std::string> storage_names;
  std::int64_t parameter_count = 0;  // elements of all parameters (GPT-2 small: 124,439,808)
};

// Generates one training step. O(layers); fails only on invalid options.
Result<TransformerTrace> generate_transformer(const TransformerOptions& options);

// generate_transformer without the names.
Result<Trace> generate_transformer_trace(const TransformerOptions& options);

}  // namespace hyperoffload
