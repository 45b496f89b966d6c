#include "hyperoffload/gen/transformer_trace.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hyperoffload/check/validator.h"
#include "hyperoffload/io/trace_json.h"
#include "hyperoffload/ir/memory_profile.h"
#include "hyperoffload/ir/storage_accesses.h"
#include "hyperoffload/plan/planner.h"

namespace hyperoffload {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// The tiny model most tests use. Its shapes:
//   B = 1, S = 4, H = 8, A = 2 heads (D = 4), F = 4H = 32, V = 16, E = 2 bytes,
//   T = B * S = 4 tokens, position table P = S = 4 rows.
TransformerOptions tiny() {
  TransformerOptions o;
  o.layers = 1;
  o.hidden = 8;
  o.heads = 2;
  o.seq = 4;
  o.batch = 1;
  o.vocab = 16;
  return o;
}

TransformerTrace generate(const TransformerOptions& options) {
  Result<TransformerTrace> generated = generate_transformer(options);
  EXPECT_TRUE(generated.has_value()) << generated.error().message;
  return generated ? std::move(*generated) : TransformerTrace{};
}

std::vector<std::string> op_names(const Trace& trace) {
  std::vector<std::string> names;
  for (OpIndex op = 0; op < trace.op_count(); ++op) names.emplace_back(trace.op_name(op));
  return names;
}

OpIndex op_named(const Trace& trace, std::string_view name) {
  for (OpIndex op = 0; op < trace.op_count(); ++op) {
    if (trace.op_name(op) == name) return op;
  }
  ADD_FAILURE() << "no op named " << name;
  return 0;
}

StorageIndex storage_named(const TransformerTrace& t, std::string_view name) {
  for (std::size_t s = 0; s < t.storage_names.size(); ++s) {
    if (t.storage_names[s] == name) return static_cast<StorageIndex>(s);
  }
  ADD_FAILURE() << "no storage named " << name;
  return 0;
}

bool accesses(const Trace& trace, OpIndex op, StorageIndex storage, AccessKind kind) {
  const auto list = trace.accesses(op);
  return std::any_of(list.begin(), list.end(),
                     [&](const Access& a) { return a.storage == storage && a.kind == kind; });
}
bool touches(const Trace& trace, OpIndex op, StorageIndex storage) {
  return accesses(trace, op, storage, AccessKind::kRead) || accesses(trace, op, storage, AccessKind::kWrite);
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

TEST(TransformerTrace, TinyModelHasEveryForwardAndBackwardOpInOrder) {
  const TransformerTrace t = generate(tiny());
  // Forward: embedding, 12 ops per block, final_ln + lm_head + loss (16);
  // backward: loss, lm_head, final_ln, 10 per block (residual adds have no
  // backward op), embedding (14). No optimizer by default.
  EXPECT_THAT(op_names(t.trace), ElementsAreArray<std::string>({
                                     "embedding",
                                     "layer0.ln1",
                                     "layer0.attn.qkv_matmul",
                                     "layer0.attn.scores_matmul",
                                     "layer0.attn.softmax",
                                     "layer0.attn.context_matmul",
                                     "layer0.attn.proj_matmul",
                                     "layer0.attn.residual_add",
                                     "layer0.ln2",
                                     "layer0.mlp.fc1_matmul",
                                     "layer0.mlp.gelu",
                                     "layer0.mlp.fc2_matmul",
                                     "layer0.mlp.residual_add",
                                     "final_ln",
                                     "lm_head_matmul",
                                     "loss.cross_entropy",
                                     "loss.cross_entropy.backward",
                                     "lm_head_matmul.backward",
                                     "final_ln.backward",
                                     "layer0.mlp.fc2_matmul.backward",
                                     "layer0.mlp.gelu.backward",
                                     "layer0.mlp.fc1_matmul.backward",
                                     "layer0.ln2.backward",
                                     "layer0.attn.proj_matmul.backward",
                                     "layer0.attn.context_matmul.backward",
                                     "layer0.attn.softmax.backward",
                                     "layer0.attn.scores_matmul.backward",
                                     "layer0.attn.qkv_matmul.backward",
                                     "layer0.ln1.backward",
                                     "embedding.backward",
                                 }));
  EXPECT_EQ(t.trace.op_count(), 30);
  // Storages: 2 inputs (ids, targets); 16 parameters (2 tables, 12 in the
  // block, 2 in final_ln); 23 activations (embedding.out, 16 in the block:
  // ln1 out/mean/rstd, qkv, scores, probs, context, proj, residual, ln2
  // out/mean/rstd, fc1, gelu, fc2, output; final_ln out/mean/rstd, logits,
  // log_probs, loss); 13 activation gradients (everything the backward
  // differentiates: logits, final_ln.out, the block output, gelu, fc1, ln2.out,
  // residual, context, probs, qkv, scores, ln1.out, embedding.out); 16
  // parameter gradients. 2 + 16 + 23 + 13 + 16 = 70.
  EXPECT_EQ(t.trace.storage_count(), 70);
  EXPECT_EQ(t.storage_names.size(), 70u);
}

TEST(TransformerTrace, SavedActivationSizesFollowFromTheShapes) {
  const TransformerTrace t = generate(tiny());
  // Each size by hand (T = 4, H = 8, F = 32, A = 2, S = 4, V = 16, E = 2):
  const std::map<std::string, std::int64_t> expected = {
      {"batch.input_ids", 32},                  // T * 8 (int64)
      {"embedding.token.weight", 256},          // V * H * E
      {"embedding.position.weight", 64},        // P * H * E
      {"embedding.out", 64},                    // T * H * E
      {"layer0.ln1.out", 64},                   // T * H * E
      {"layer0.ln1.mean", 16},                  // T * 4 (fp32)
      {"layer0.ln1.rstd", 16},                  // T * 4 (fp32)
      {"layer0.attn.qkv.weight", 384},          // H * 3H * E = 8 * 24 * 2
      {"layer0.attn.qkv.bias", 48},             // 3H * E
      {"layer0.attn.qkv_matmul.out", 192},      // T * 3H * E = 4 * 24 * 2
      {"layer0.attn.scores_matmul.out", 64},    // B * A * S * S * E = 1 * 2 * 4 * 4 * 2
      {"layer0.attn.softmax.out", 64},          // B * A * S * S * E
      {"layer0.attn.context_matmul.out", 64},   // T * H * E
      {"layer0.attn.proj.weight", 128},         // H * H * E
      {"layer0.attn.proj_matmul.out", 64},      // T * H * E
      {"layer0.attn.residual_add.out", 64},     // T * H * E
      {"layer0.ln2.out", 64},                   // T * H * E
      {"layer0.ln2.mean", 16},                  // T * 4
      {"layer0.mlp.fc1.weight", 512},           // H * F * E = 8 * 32 * 2
      {"layer0.mlp.fc1.bias", 64},              // F * E
      {"layer0.mlp.fc1_matmul.out", 256},       // T * F * E = 4 * 32 * 2
      {"layer0.mlp.gelu.out", 256},             // T * F * E
      {"layer0.mlp.fc2.weight", 512},           // F * H * E
      {"layer0.mlp.fc2.bias", 16},              // H * E
      {"layer0.mlp.fc2_matmul.out", 64},        // T * H * E
      {"layer0.mlp.residual_add.out", 64},      // T * H * E
      {"final_ln.out", 64},                     // T * H * E
      {"lm_head_matmul.out", 128},              // logits: T * V * E = 4 * 16 * 2
      {"batch.targets", 32},                    // T * 8
      {"loss.cross_entropy.log_probs", 128},    // T * V * E
      {"loss.cross_entropy.out", 4},            // fp32 scalar
      {"lm_head_matmul.out.grad", 128},         // same as the logits
      {"layer0.attn.qkv_matmul.out.grad", 192}, // same as qkv
      {"embedding.token.weight.grad", 256},     // same as the table
  };
  for (const auto& [name, bytes] : expected) {
    EXPECT_EQ(t.trace.storage(storage_named(t, name)).size_bytes, bytes) << name;
  }
}

TEST(TransformerTrace, StorageIdsAreDenseInOrderOfFirstAppearance) {
  const TransformerTrace t = generate(tiny());
  for (StorageIndex s = 0; s < t.trace.storage_count(); ++s) EXPECT_EQ(t.trace.storage(s).id, s);
  const StorageAccesses by_storage(t.trace);
  const auto order = by_storage.by_first_appearance();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(t.trace.storage_count()));
  for (std::size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<StorageIndex>(i));
}

TEST(TransformerTrace, MatmulTakesFlopsOverEffectiveThroughput) {
  TransformerOptions o = tiny();
  o.tflops = 1.0;             // 10^12 FLOP/s
  o.matmul_efficiency = 0.5;  // 0.5 * 10^12 FLOP/s = 5 * 10^8 FLOP/ms
  const TransformerTrace t = generate(o);
  // qkv: 2 * T * H * 3H = 2 * 4 * 8 * 24 = 1536 FLOPs -> 1536 / 5e8 ms.
  EXPECT_NEAR(t.trace.op_duration_ms(op_named(t.trace, "layer0.attn.qkv_matmul")), 3.072e-6, 1e-18);
  // Its backward computes input and weight gradients: twice the FLOPs.
  EXPECT_NEAR(t.trace.op_duration_ms(op_named(t.trace, "layer0.attn.qkv_matmul.backward")), 6.144e-6, 1e-18);
  // scores: 2 * B * A * S * S * D = 2 * 1 * 2 * 4 * 4 * 4 = 256 FLOPs.
  EXPECT_NEAR(t.trace.op_duration_ms(op_named(t.trace, "layer0.attn.scores_matmul")), 5.12e-7, 1e-18);
  // LM head: 2 * T * H * V = 2 * 4 * 8 * 16 = 1024 FLOPs.
  EXPECT_NEAR(t.trace.op_duration_ms(op_named(t.trace, "lm_head_matmul")), 2.048e-6, 1e-18);
}

TEST(TransformerTrace, MemoryBoundOpTakesBytesTouchedOverBandwidth) {
  TransformerOptions o = tiny();
  o.memory_bandwidth_gb_per_s = 1.0;  // 10^9 bytes/s = 10^6 bytes/ms
  const TransformerTrace t = generate(o);
  // ln1 reads x (64) + weight (16) + bias (16), writes out (64) + mean (16) +
  // rstd (16): 192 bytes.
  EXPECT_NEAR(t.trace.op_duration_ms(op_named(t.trace, "layer0.ln1")), 1.92e-4, 1e-16);
  // softmax reads the scores (64) and writes the probabilities (64).
  EXPECT_NEAR(t.trace.op_duration_ms(op_named(t.trace, "layer0.attn.softmax")), 1.28e-4, 1e-16);
  // The embedding gathers: ids (32) + T rows of the token table (4 * 8 * 2 = 64)
  // + S rows of the position table (64), writes the output (64): 224 bytes, not
  // the whole 256-byte table.
  EXPECT_NEAR(t.trace.op_duration_ms(op_named(t.trace, "embedding")), 2.24e-4, 1e-16);
  // ln1 backward reads grad (64), x (64), mean (16), rstd (16), weight (16),
  // the residual-path gradient (64); writes the input gradient (64) and both
  // weight gradients (16 + 16): 336 bytes.
  EXPECT_NEAR(t.trace.op_duration_ms(op_named(t.trace, "layer0.ln1.backward")), 3.36e-4, 1e-16);
}

TEST(TransformerTrace, EveryBackwardOpReadsWhatItsForwardOpSaved) {
  const TransformerTrace t = generate(tiny());
  const std::vector<std::pair<std::string, std::string>> saved = {
      {"batch.input_ids", "embedding.backward"},
      {"embedding.out", "layer0.ln1.backward"},
      {"layer0.ln1.mean", "layer0.ln1.backward"},
      {"layer0.ln1.rstd", "layer0.ln1.backward"},
      {"layer0.ln1.weight", "layer0.ln1.backward"},
      {"layer0.ln1.out", "layer0.attn.qkv_matmul.backward"},
      {"layer0.attn.qkv.weight", "layer0.attn.qkv_matmul.backward"},
      {"layer0.attn.qkv_matmul.out", "layer0.attn.scores_matmul.backward"},
      {"layer0.attn.qkv_matmul.out", "layer0.attn.context_matmul.backward"},
      {"layer0.attn.softmax.out", "layer0.attn.softmax.backward"},
      {"layer0.attn.softmax.out", "layer0.attn.context_matmul.backward"},
      {"layer0.attn.context_matmul.out", "layer0.attn.proj_matmul.backward"},
      {"layer0.attn.proj.weight", "layer0.attn.proj_matmul.backward"},
      {"layer0.attn.residual_add.out", "layer0.ln2.backward"},
      {"layer0.ln2.mean", "layer0.ln2.backward"},
      {"layer0.ln2.rstd", "layer0.ln2.backward"},
      {"layer0.ln2.out", "layer0.mlp.fc1_matmul.backward"},
      {"layer0.mlp.fc1_matmul.out", "layer0.mlp.gelu.backward"},
      {"layer0.mlp.gelu.out", "layer0.mlp.fc2_matmul.backward"},
      {"layer0.mlp.fc2.weight", "layer0.mlp.fc2_matmul.backward"},
      {"layer0.mlp.residual_add.out", "final_ln.backward"},
      {"final_ln.mean", "final_ln.backward"},
      {"final_ln.rstd", "final_ln.backward"},
      {"final_ln.out", "lm_head_matmul.backward"},
      {"embedding.token.weight", "lm_head_matmul.backward"},  // tied head
      {"loss.cross_entropy.log_probs", "loss.cross_entropy.backward"},
      {"batch.targets", "loss.cross_entropy.backward"},
  };
  for (const auto& [storage, op] : saved) {
    EXPECT_TRUE(accesses(t.trace, op_named(t.trace, op), storage_named(t, storage), AccessKind::kRead))
        << op << " should read " << storage;
  }
  // Not saved: consumed in the forward pass and freed there.
  const StorageAccesses by_storage(t.trace);
  const OpIndex boundary = op_named(t.trace, "loss.cross_entropy.backward");
  for (const char* name : {"layer0.attn.scores_matmul.out", "layer0.attn.proj_matmul.out",
                           "layer0.mlp.fc2_matmul.out", "lm_head_matmul.out"}) {
    EXPECT_LT(by_storage.last_op(storage_named(t, name)), boundary) << name;
  }
}

// The autograd invariant, on every configuration: a backward op touches only
// gradients, parameters and what its own forward op touched; and every
// activation alive across the forward/backward boundary is read by a backward
// op (nothing is kept that no one needs).
void expect_backward_reads_only_what_forward_saved(const TransformerOptions& options) {
  const TransformerTrace t = generate(options);
  const Trace& trace = t.trace;
  const OpIndex boundary = op_named(trace, "loss.cross_entropy.backward");
  const StorageAccesses by_storage(trace);
  std::set<StorageIndex> read_in_backward;
  for (OpIndex op = boundary; op < trace.op_count(); ++op) {
    const std::string name(trace.op_name(op));
    if (!ends_with(name, ".backward")) continue;
    const OpIndex forward = op_named(trace, name.substr(0, name.size() - std::string_view(".backward").size()));
    EXPECT_LT(forward, boundary) << name;
    for (const Access& access : trace.accesses(op)) {
      const bool from_forward = by_storage.first_op(access.storage) < boundary;
      if (!from_forward || trace.storage(access.storage).retained()) continue;
      EXPECT_TRUE(touches(trace, forward, access.storage))
          << name << " reads " << t.storage_names[static_cast<std::size_t>(access.storage)]
          << ", which its forward op did not touch";
      read_in_backward.insert(access.storage);
    }
  }
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (trace.storage(s).retained() || by_storage.first_op(s) >= boundary) continue;
    if (by_storage.last_op(s) >= boundary) {
      EXPECT_TRUE(read_in_backward.contains(s)) << t.storage_names[static_cast<std::size_t>(s)];
    }
  }
}

TEST(TransformerTrace, BackwardOpsReadOnlyWhatTheirForwardOpsTouched) {
  TransformerOptions o = tiny();
  o.layers = 2;
  expect_backward_reads_only_what_forward_saved(o);
  o.dropout = Dropout::kOn;
  expect_backward_reads_only_what_forward_saved(o);
  o.attention = AttentionKernel::kFlash;
  expect_backward_reads_only_what_forward_saved(o);
  o.embeddings = EmbeddingTying::kUntied;
  o.optimizer = OptimizerStep::kAdamW;
  expect_backward_reads_only_what_forward_saved(o);
}

TEST(TransformerTrace, GradientsAreTransientAndParametersRetained) {
  TransformerOptions o = tiny();
  o.layers = 2;
  o.optimizer = OptimizerStep::kAdamW;  // ops after the backward, so "freed before the end" can fail
  const TransformerTrace t = generate(o);
  const Trace& trace = t.trace;
  const StorageAccesses by_storage(trace);
  const OpIndex first_optimizer_op = op_named(trace, "optimizer.adamw.embedding");
  std::set<std::string> parameters;
  for (const char* suffix : {".weight", ".bias"}) {
    for (const std::string& name : t.storage_names) {
      if (ends_with(name, suffix)) parameters.insert(name);
    }
  }
  EXPECT_EQ(parameters.size(), 2u + 2 * 12 + 2);  // tables, two blocks, final_ln
  std::int64_t retained_bytes = 0;
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    const std::string& name = t.storage_names[static_cast<std::size_t>(s)];
    if (trace.storage(s).retained()) retained_bytes += trace.storage(s).size_bytes;
    if (parameters.contains(name)) {
      EXPECT_TRUE(trace.storage(s).retained()) << name;
    } else if (ends_with(name, ".grad")) {
      const std::string of = name.substr(0, name.size() - 5);
      if (parameters.contains(of)) {
        EXPECT_TRUE(trace.storage(s).retained()) << name;
      } else {
        EXPECT_FALSE(trace.storage(s).retained()) << name;
        EXPECT_LT(by_storage.last_op(s), first_optimizer_op) << name;
      }
    } else if (ends_with(name, ".exp_avg") || ends_with(name, ".exp_avg_sq") || name == "loss.cross_entropy.out") {
      EXPECT_TRUE(trace.storage(s).retained()) << name;
    } else {
      EXPECT_FALSE(trace.storage(s).retained()) << name;
    }
  }
  // So at the end of the step only retained storages remain.
  const std::vector<std::int64_t> resident = unplanned_resident_bytes(trace, by_storage);
  EXPECT_EQ(resident.back(), retained_bytes);
}

TEST(TransformerTrace, TiedEmbeddingGradientIsWrittenByTheHeadAndAccumulatedByTheEmbedding) {
  const TransformerTrace t = generate(tiny());
  const StorageIndex grad = storage_named(t, "embedding.token.weight.grad");
  const OpIndex head = op_named(t.trace, "lm_head_matmul.backward");
  const OpIndex embedding = op_named(t.trace, "embedding.backward");
  EXPECT_TRUE(accesses(t.trace, head, grad, AccessKind::kWrite));
  EXPECT_FALSE(accesses(t.trace, head, grad, AccessKind::kRead));
  EXPECT_TRUE(accesses(t.trace, embedding, grad, AccessKind::kRead));
  EXPECT_TRUE(accesses(t.trace, embedding, grad, AccessKind::kWrite));
  // Parameters: tables 16*8 + 4*8 = 160; block 2*8 + (8*24 + 24) + (64 + 8) +
  // 2*8 + (8*32 + 32) + (32*8 + 8) = 16 + 216 + 72 + 16 + 288 + 264 = 872;
  // final_ln 16. Total 1048.
  EXPECT_EQ(t.parameter_count, 1048);
}

TEST(TransformerTrace, UntiedHeadHasItsOwnWeight) {
  TransformerOptions o = tiny();
  o.embeddings = EmbeddingTying::kUntied;
  const TransformerTrace t = generate(o);
  const StorageIndex head = storage_named(t, "lm_head.weight");
  EXPECT_EQ(t.trace.storage(head).size_bytes, 256);  // V * H * E
  EXPECT_TRUE(accesses(t.trace, op_named(t.trace, "lm_head_matmul"), head, AccessKind::kRead));
  EXPECT_EQ(t.parameter_count, 1048 + 128);
  // The token table's gradient now comes only from the embedding: one write.
  const StorageIndex grad = storage_named(t, "embedding.token.weight.grad");
  EXPECT_FALSE(accesses(t.trace, op_named(t.trace, "embedding.backward"), grad, AccessKind::kRead));
}

TEST(TransformerTrace, PresetsHaveTheirPublishedParameterCounts) {
  // GPT-3 sizes: V*H + S*H + L*(12*H^2 + 13*H) + 2*H with V = 50257, S = 2048:
  //   1.3b: 102,926,336 + 4,194,304 + 24 * 50,358,272 + 4,096 = 1,315,723,264
  //   2.7b: 128,657,920 + 5,242,880 + 32 * 78,676,480 + 5,120 = 2,651,553,280
  //   6.7b: 205,852,672 + 8,388,608 + 32 * 201,379,840 + 8,192 = 6,658,404,352
  const std::map<std::string, std::int64_t> expected = {
      {"gpt2-small", 124'439'808},   {"gpt2-medium", 354'823'168}, {"gpt2-large", 774'030'080},
      {"gpt2-xl", 1'557'611'200},    {"gpt3-1.3b", 1'315'723'264}, {"gpt3-2.7b", 2'651'553'280},
      {"gpt3-6.7b", 6'658'404'352},
  };
  for (const auto& [name, count] : expected) {
    Result<TransformerOptions> options = transformer_preset(name);
    ASSERT_TRUE(options.has_value()) << name;
    EXPECT_EQ(generate(*options).parameter_count, count) << name;
  }
  Result<TransformerOptions> unknown = transformer_preset("gpt5");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(unknown.error().message, HasSubstr("gpt2-medium"));
}

TEST(TransformerTrace, DemoModelIsGpt3XlAtBatch16Seq2048WithFlashAttention) {
  const TransformerOptions demo = demo_transformer_options();
  EXPECT_EQ(demo.layers, 24);
  EXPECT_EQ(demo.hidden, 2048);
  EXPECT_EQ(demo.heads, 16);
  EXPECT_EQ(demo.seq, 2048);
  EXPECT_EQ(demo.batch, 16);
  EXPECT_EQ(demo.attention, AttentionKernel::kFlash);
  const TransformerTrace t = generate(demo);
  EXPECT_EQ(t.parameter_count, 1'315'723'264);
  // The logits, B * S * V * E = 16 * 2048 * 50257 * 2 bytes.
  EXPECT_EQ(t.trace.storage(storage_named(t, "lm_head_matmul.out")).size_bytes, 3'293'642'752);
}

TEST(TransformerTrace, PeakIsAtTheForwardBackwardBoundary) {
  // Activations outweigh parameters here (T * H * E = 4096 bytes per block
  // tensor against 2048-byte MLP weights), as in real training.
  TransformerOptions o;
  o.layers = 3;
  o.hidden = 16;
  o.heads = 2;
  o.seq = 32;
  o.batch = 4;
  o.vocab = 64;
  const TransformerTrace t = generate(o);
  // Every block's saved activations are alive once the forward pass ends; at
  // the loss both the logits and the log-probabilities (T * V * E = 16 KiB
  // each) are, and from there on every backward op frees at least as much as
  // the gradients it adds.
  const PeakBytes peak = unplanned_peak(t.trace);
  EXPECT_EQ(t.trace.op_name(peak.op), "loss.cross_entropy");
}

TEST(TransformerTrace, GreedyAtHalfThePeakValidatesWithoutFaults) {
  TransformerOptions base;
  base.layers = 4;
  base.hidden = 64;
  base.heads = 4;
  base.seq = 64;
  base.batch = 2;
  base.vocab = 512;
  std::vector<TransformerOptions> variants(5, base);
  variants[1].attention = AttentionKernel::kFlash;
  variants[2].dropout = Dropout::kOn;
  variants[3].recompute = Recompute::kFull;
  variants[4].optimizer = OptimizerStep::kAdamW;
  variants[4].embeddings = EmbeddingTying::kUntied;
  Result<std::unique_ptr<Planner>> greedy = make_planner("greedy");
  Result<std::unique_ptr<Planner>> peak = make_planner("peak");
  ASSERT_TRUE(greedy.has_value() && peak.has_value());
  int lowered = 0;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const TransformerTrace t = generate(variants[v]);
    const std::int64_t unplanned = unplanned_peak(t.trace).bytes;
    Result<PlanResult> plan = (*greedy)->plan(t.trace, unplanned / 2);
    ASSERT_TRUE(plan.has_value()) << plan.error().message;
    const ValidationReport report = validate_schedule(t.trace, plan->schedule);
    EXPECT_TRUE(report.valid()) << "variant " << v << ": " << (report.problems.empty() ? "" : report.problems[0]);
    EXPECT_TRUE(report.faults.empty()) << "variant " << v;
    // It offloads (not only releases at end of use) and lowers the peak where
    // any plan can. With AdamW the peak is the optimizer's update of the
    // untied lm_head: every weight and both moments are resident (retained)
    // there and none is used again in the step, so no gap covers that op and
    // variant 4's floor is its peak.
    EXPECT_GT(report.d2h_count, 0) << "variant " << v;
    EXPECT_GT(report.h2d_count, 0) << "variant " << v;
    Result<PlanResult> probe = (*peak)->plan(t.trace, unplanned);
    ASSERT_TRUE(probe.has_value() && probe->floor.has_value());
    if (probe->floor->bytes < unplanned) {
      EXPECT_LT(report.peak_bytes, unplanned) << "variant " << v;
      ++lowered;
    } else {
      EXPECT_EQ(report.peak_bytes, unplanned) << "variant " << v;
    }
  }
  EXPECT_EQ(lowered, 4);  // variants 0-3
}

TEST(TransformerTrace, FlashAttentionKeepsNothingOfSizeSeqBySeq) {
  TransformerOptions o = tiny();
  o.attention = AttentionKernel::kFlash;
  const TransformerTrace t = generate(o);
  for (const std::string& name : t.storage_names) {
    EXPECT_EQ(name.find("scores"), std::string::npos) << name;
    EXPECT_EQ(name.find("softmax"), std::string::npos) << name;
  }
  // logsumexp: B * A * S fp32 = 1 * 2 * 4 * 4 bytes.
  EXPECT_EQ(t.trace.storage(storage_named(t, "layer0.attn.flash_attention.logsumexp")).size_bytes, 32);
  // Three attention ops become one each way: 30 - 2 - 2.
  EXPECT_EQ(t.trace.op_count(), 26);
  const OpIndex backward = op_named(t.trace, "layer0.attn.flash_attention.backward");
  for (const char* saved : {"layer0.attn.qkv_matmul.out", "layer0.attn.flash_attention.out",
                            "layer0.attn.flash_attention.logsumexp"}) {
    EXPECT_TRUE(accesses(t.trace, backward, storage_named(t, saved), AccessKind::kRead)) << saved;
  }
  // Forward: both attention matmuls, 2 * 256 = 512 FLOPs; backward twice that
  // plus recomputing the scores: 1024 + 256 = 1280 FLOPs. At 312 * 0.6 TFLOP/s.
  const double flop_per_ms = 312e12 * 0.6 / 1e3;
  EXPECT_DOUBLE_EQ(t.trace.op_duration_ms(op_named(t.trace, "layer0.attn.flash_attention")), 512 / flop_per_ms);
  EXPECT_DOUBLE_EQ(t.trace.op_duration_ms(backward), 1280 / flop_per_ms);
}

TEST(TransformerTrace, DropoutSavesOneByteMasksForItsBackward) {
  TransformerOptions o = tiny();
  o.dropout = Dropout::kOn;
  const TransformerTrace t = generate(o);
  // Masks: embedding and projection and fc2 T * H = 32 elements, probabilities
  // B * A * S * S = 32 elements; one byte each.
  const std::vector<std::pair<std::string, std::string>> masks = {
      {"embedding.dropout.mask", "embedding.dropout.backward"},
      {"layer0.attn.probs_dropout.mask", "layer0.attn.probs_dropout.backward"},
      {"layer0.attn.proj_dropout.mask", "layer0.attn.proj_dropout.backward"},
      {"layer0.mlp.fc2_dropout.mask", "layer0.mlp.fc2_dropout.backward"},
  };
  for (const auto& [mask, op] : masks) {
    EXPECT_EQ(t.trace.storage(storage_named(t, mask)).size_bytes, 32) << mask;
    EXPECT_TRUE(accesses(t.trace, op_named(t.trace, op), storage_named(t, mask), AccessKind::kRead)) << op;
  }
  // The context matmul saves the dropped probabilities, the softmax its own output.
  EXPECT_TRUE(accesses(t.trace, op_named(t.trace, "layer0.attn.context_matmul.backward"),
                       storage_named(t, "layer0.attn.probs_dropout.out"), AccessKind::kRead));
  EXPECT_EQ(t.trace.op_count(), 30 + 4 + 4);
}

TEST(TransformerTrace, MarksOpsThatWriteOnlyWhatTheyCreateRecomputableAndDropoutByRngReplay) {
  TransformerOptions o = tiny();
  o.dropout = Dropout::kOn;
  const TransformerTrace t = generate(o);
  const Trace& trace = t.trace;
  auto recomputable = [&](std::string_view name) { return trace.op_recomputable(op_named(trace, name)); };
  // The forward pass and the loss: fresh outputs, no randomness.
  for (const char* name : {"embedding", "layer0.ln1", "layer0.attn.qkv_matmul", "layer0.attn.scores_matmul",
                           "layer0.attn.softmax", "layer0.attn.context_matmul", "layer0.mlp.gelu",
                           "layer0.mlp.residual_add", "lm_head_matmul", "loss.cross_entropy"}) {
    EXPECT_TRUE(recomputable(name)) << name;
  }
  // Backward ops that write fresh gradients only (the first contributions to
  // this block's weight gradients).
  EXPECT_TRUE(recomputable("layer0.mlp.fc2_matmul.backward"));
  EXPECT_TRUE(recomputable("layer0.ln1.backward"));
  // Seeded: dropout writes a fresh mask and output, so it is recomputable with
  // its generator state replayed (rng_replay), and only it.
  for (const char* name :
       {"embedding.dropout", "layer0.attn.probs_dropout", "layer0.attn.proj_dropout", "layer0.mlp.fc2_dropout"}) {
    EXPECT_TRUE(recomputable(name)) << name;
    EXPECT_TRUE(trace.op_rng_replay(op_named(trace, name))) << name;
  }
  EXPECT_FALSE(trace.op_rng_replay(op_named(trace, "layer0.attn.softmax")));
  // In place: the scores backward fills the qkv gradient the context backward
  // wrote; the embedding backward accumulates into the token table's gradient
  // that the (tied) LM head's backward wrote.
  for (const char* name : {"layer0.attn.scores_matmul.backward", "embedding.backward"}) {
    EXPECT_FALSE(recomputable(name)) << name;
  }
  // Fused attention draws its dropout mask itself: replayed with its RNG
  // state; without dropout it is an ordinary recomputable op.
  o.attention = AttentionKernel::kFlash;
  const Trace flash = generate(o).trace;
  EXPECT_TRUE(flash.op_rng_replay(op_named(flash, "layer0.attn.flash_attention")));
  o.dropout = Dropout::kOff;
  const Trace flash_no_dropout = generate(o).trace;
  EXPECT_TRUE(flash_no_dropout.op_recomputable(op_named(flash_no_dropout, "layer0.attn.flash_attention")));
  EXPECT_FALSE(flash_no_dropout.op_rng_replay(op_named(flash_no_dropout, "layer0.attn.flash_attention")));
  // Every optimizer update is in place.
  o.optimizer = OptimizerStep::kAdamW;
  const Trace adam = generate(o).trace;
  for (OpIndex op = 0; op < adam.op_count(); ++op) {
    if (adam.op_name(op).starts_with("optimizer.")) {
      EXPECT_FALSE(adam.op_recomputable(op)) << adam.op_name(op);
    }
  }
}

TEST(TransformerTrace, FullRecomputeSavesOnlyBlockInputsAndRerunsEachBlock) {
  TransformerOptions o = tiny();
  o.layers = 2;
  o.recompute = Recompute::kFull;
  const TransformerTrace t = generate(o);
  const Trace& trace = t.trace;
  const OpIndex boundary = op_named(trace, "loss.cross_entropy.backward");
  const StorageAccesses by_storage(trace);
  std::set<std::string> kept;  // non-retained forward storages alive past the boundary
  for (StorageIndex s = 0; s < trace.storage_count(); ++s) {
    if (!trace.storage(s).retained() && by_storage.first_op(s) < boundary && by_storage.last_op(s) >= boundary) {
      kept.insert(t.storage_names[static_cast<std::size_t>(s)]);
    }
  }
  EXPECT_EQ(kept, (std::set<std::string>{"batch.input_ids", "batch.targets", "embedding.out",
                                         "layer0.mlp.residual_add.out", "layer1.mlp.residual_add.out",
                                         "final_ln.out", "final_ln.mean", "final_ln.rstd",
                                         "loss.cross_entropy.log_probs"}));
  // Block 1 is recomputed from its input right before its backward.
  const OpIndex recompute = op_named(trace, "layer1.recompute.ln1");
  EXPECT_EQ(op_named(trace, "final_ln.backward") + 1, recompute);
  EXPECT_TRUE(accesses(trace, recompute, storage_named(t, "layer0.mlp.residual_add.out"), AccessKind::kRead));
  EXPECT_EQ(op_named(trace, "layer1.recompute.mlp.residual_add") + 1, op_named(trace, "layer1.mlp.fc2_matmul.backward"));
  EXPECT_TRUE(accesses(trace, op_named(trace, "layer1.mlp.gelu.backward"),
                       storage_named(t, "layer1.recompute.mlp.fc1_matmul.out"), AccessKind::kRead));
  // 30 ops for one block without recompute; a second block adds 12 + 10, and
  // recomputing both adds 2 * 12.
  EXPECT_EQ(trace.op_count(), 30 + 22 + 24);
}

TEST(TransformerTrace, AdamWUpdatesEveryParameterWithItsMoments) {
  TransformerOptions o = tiny();
  o.optimizer = OptimizerStep::kAdamW;
  o.optimizer_state_bytes = 4;
  const TransformerTrace t = generate(o);
  const Trace& trace = t.trace;
  const std::vector<std::string> names = op_names(trace);
  EXPECT_THAT(std::vector<std::string>(names.end() - 3, names.end()),
              ElementsAreArray<std::string>(
                  {"optimizer.adamw.embedding", "optimizer.adamw.layer0", "optimizer.adamw.final_ln"}));
  const OpIndex layer_step = op_named(trace, "optimizer.adamw.layer0");
  const StorageIndex weight = storage_named(t, "layer0.mlp.fc1.weight");
  const StorageIndex moment = storage_named(t, "layer0.mlp.fc1.weight.exp_avg_sq");
  EXPECT_TRUE(accesses(trace, layer_step, storage_named(t, "layer0.mlp.fc1.weight.grad"), AccessKind::kRead));
  EXPECT_TRUE(accesses(trace, layer_step, weight, AccessKind::kWrite));
  EXPECT_TRUE(accesses(trace, layer_step, moment, AccessKind::kWrite));
  EXPECT_EQ(trace.storage(moment).size_bytes, 8 * 32 * 4);  // H * F elements, fp32
  EXPECT_TRUE(trace.storage(moment).retained());
  // Memory-bound: per parameter, grad (E) + param read and write (2E) + two
  // moments read and written (4 * 4 bytes) = 22 bytes per element for E = 2.
  // The layer0 group has 872 elements: 19184 bytes at 1555 GB/s.
  EXPECT_DOUBLE_EQ(trace.op_duration_ms(layer_step), 19184.0 / 1555e6);
}

TEST(TransformerTrace, LimitAndCopyBandwidthsAreWrittenIntoTheTrace) {
  TransformerOptions o = tiny();
  o.memory_limit_bytes = 2000;
  o.d2h_bandwidth_gib_per_s = 12.0;
  o.h2d_bandwidth_gib_per_s = 24.0;
  const Trace trace = generate(o).trace;
  EXPECT_EQ(trace.memory_limit_bytes(), 2000);
  EXPECT_EQ(trace.d2h_bandwidth_gib_per_s(), 12.0);
  EXPECT_EQ(trace.h2d_bandwidth_gib_per_s(), 24.0);
  EXPECT_FALSE(generate(tiny()).trace.memory_limit_bytes().has_value());
}

TEST(TransformerTrace, GenerationIsDeterministicAndRoundTripsThroughJson) {
  const Trace first = generate(tiny()).trace;
  const std::string json = trace_to_json(first);
  EXPECT_EQ(trace_to_json(generate(tiny()).trace), json);
  Result<Trace> parsed = parse_trace_json(json);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(trace_to_json(*parsed), json);
  Result<Trace> plain = generate_transformer_trace(tiny());
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(trace_to_json(*plain), json);
}

struct BadOption {
  const char* what;
  void (*mutate)(TransformerOptions&);
  const char* message;
};

TEST(TransformerTrace, BadOptionsAreErrorsNamingTheOption) {
  const BadOption cases[] = {
      {"zero layers", [](TransformerOptions& o) { o.layers = 0; }, "layers must be between 1 and"},
      {"huge layers", [](TransformerOptions& o) { o.layers = 1'000'000; }, "layers must be between 1 and"},
      {"zero hidden", [](TransformerOptions& o) { o.hidden = 0; }, "hidden must be positive (got 0)"},
      {"negative heads", [](TransformerOptions& o) { o.heads = -2; }, "heads must be positive (got -2)"},
      {"zero seq", [](TransformerOptions& o) { o.seq = 0; }, "seq must be positive"},
      {"zero batch", [](TransformerOptions& o) { o.batch = 0; }, "batch must be positive"},
      {"zero vocab", [](TransformerOptions& o) { o.vocab = 0; }, "vocab must be positive"},
      {"zero mlp_ratio", [](TransformerOptions& o) { o.mlp_ratio = 0; }, "mlp_ratio must be positive"},
      {"indivisible heads", [](TransformerOptions& o) { o.heads = 3; }, "hidden (8) must be divisible by heads (3)"},
      {"short position table", [](TransformerOptions& o) { o.max_positions = 2; },
       "max_positions (2) must be 0 (= seq) or at least seq (4)"},
      {"zero dtype", [](TransformerOptions& o) { o.dtype_bytes = 0; }, "dtype_bytes must be between 1 and 8"},
      {"wide state", [](TransformerOptions& o) { o.optimizer_state_bytes = 9; }, "optimizer_state_bytes must be"},
      {"zero tflops", [](TransformerOptions& o) { o.tflops = 0.0; }, "tflops must be a positive number"},
      {"nan tflops", [](TransformerOptions& o) { o.tflops = std::nan(""); }, "tflops must be a positive number"},
      {"efficiency above one", [](TransformerOptions& o) { o.matmul_efficiency = 1.5; },
       "matmul_efficiency must be in (0, 1]"},
      {"zero memory bandwidth", [](TransformerOptions& o) { o.memory_bandwidth_gb_per_s = 0.0; },
       "memory_bandwidth_gb_per_s must be a positive"},
      {"infinite d2h", [](TransformerOptions& o) { o.d2h_bandwidth_gib_per_s = INFINITY; },
       "d2h_bandwidth_gib_per_s must be a positive"},
      {"negative h2d", [](TransformerOptions& o) { o.h2d_bandwidth_gib_per_s = -1.0; },
       "h2d_bandwidth_gib_per_s must be a positive"},
      {"negative limit", [](TransformerOptions& o) { o.memory_limit_bytes = -1; },
       "memory_limit_bytes must be non-negative"},
      {"bad enum", [](TransformerOptions& o) { o.attention = static_cast<AttentionKernel>(7); },
       "outside its enum"},
  };
  for (const BadOption& c : cases) {
    TransformerOptions o = tiny();
    c.mutate(o);
    Result<Trace> trace = generate_transformer_trace(o);
    ASSERT_FALSE(trace.has_value()) << c.what;
    EXPECT_EQ(trace.error().code, ErrorCode::kInvalidArgument) << c.what;
    EXPECT_THAT(trace.error().message, HasSubstr(c.message)) << c.what;
  }
}

TEST(TransformerTrace, SizesBeyondSixtyFourBitsAreErrorsNamingTheOptions) {
  TransformerOptions o = tiny();
  o.seq = 3'000'000'000;  // scores: 2 * 9e18 * 2 bytes
  Result<Trace> trace = generate_transformer_trace(o);
  ASSERT_FALSE(trace.has_value());
  EXPECT_THAT(trace.error().message, HasSubstr("the attention scores (batch × heads × seq × seq × dtype_bytes)"));
  EXPECT_THAT(trace.error().message, HasSubstr("reduce batch, heads or seq"));

  o = tiny();
  o.vocab = std::int64_t{1} << 61;  // logits: 4 * 2^61 * 2 bytes
  trace = generate_transformer_trace(o);
  ASSERT_FALSE(trace.has_value());
  EXPECT_THAT(trace.error().message, HasSubstr("the logits"));

  // Each tensor fits but the step does not: 2^58-byte MLP activations, 40 of them.
  o = tiny();
  o.batch = std::int64_t{1} << 50;
  o.layers = 40;
  trace = generate_transformer_trace(o);
  ASSERT_FALSE(trace.has_value());
  EXPECT_THAT(trace.error().message, HasSubstr("together would exceed 2^63 bytes"));
}

}  // namespace
}  // namespace hyperoffload
