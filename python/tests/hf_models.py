"""Hugging Face `transformers` models for the Python tests: tiny configs, random weights, CPU.

Each builder returns (model, batch, loss_fn) like python/tests/models.py, with
everything seeded, so two calls give bit-identical models, batches and RNG
states. Nothing is downloaded: every model is built from a config object
(`HF_HUB_OFFLINE=1` is set on import). The models are in training mode with
their dropouts on (non-zero probabilities) and the default attention
implementation of the installed `transformers` (no `attn_implementation`).

The shapes are picked so that activations dominate the step: a small vocabulary
and hidden size (the logits and the largest single gradient stay small) and
enough layers × tokens that the activations saved for backward pile up; then
the unavoidable floor of a step is well under 30% of its unplanned activation
peak (test_hf_models.py measures both).

Used by python/tests/test_hf_models.py and python/tools/capture_example_traces.py.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import torchvision_models  # noqa: E402,F401  (before transformers, which imports torchvision)
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()


@dataclasses.dataclass(frozen=True)
class HfCase:
    name: str
    build: Callable[[], Tuple[nn.Module, tuple, Callable]]
    description: dict


# ---- GPT-2 (causal LM) --------------------------------------------------------------------

GPT2_SHAPE = dict(vocab=128, context=64, width=32, heads=2, layers=4, batch=4, dropout=0.1)


def build_gpt2(shape: dict = GPT2_SHAPE):
    """The GPT-2 of `shape` (python/bench/sim_vs_runtime.py builds a larger one)."""
    s = shape
    torch.manual_seed(11)
    config = transformers.GPT2Config(
        vocab_size=s["vocab"], n_positions=s["context"], n_embd=s["width"], n_layer=s["layers"],
        n_head=s["heads"], resid_pdrop=s["dropout"], embd_pdrop=s["dropout"], attn_pdrop=s["dropout"])
    model = transformers.GPT2LMHeadModel(config)
    model.train()
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"]))

    def loss_fn(model, batch):
        (tokens,) = batch
        return model(input_ids=tokens, labels=tokens).loss  # the model shifts the labels itself

    return model, (tokens,), loss_fn


# ---- Llama (causal LM) --------------------------------------------------------------------

LLAMA_SHAPE = dict(vocab=128, context=64, width=32, heads=2, kv_heads=1, layers=4, ffn=64, batch=4,
                   attention_dropout=0.1)


def build_llama():
    s = LLAMA_SHAPE
    torch.manual_seed(12)
    config = transformers.LlamaConfig(
        vocab_size=s["vocab"], hidden_size=s["width"], intermediate_size=s["ffn"],
        num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
        max_position_embeddings=s["context"], attention_dropout=s["attention_dropout"])
    model = transformers.LlamaForCausalLM(config)
    model.train()
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"]))

    def loss_fn(model, batch):
        (tokens,) = batch
        return model(input_ids=tokens, labels=tokens).loss

    return model, (tokens,), loss_fn


# ---- BERT (masked LM) ---------------------------------------------------------------------

BERT_SHAPE = dict(vocab=128, context=64, width=32, heads=2, layers=4, ffn=64, batch=4, dropout=0.1,
                  mask_fraction=0.15)


def build_bert():
    s = BERT_SHAPE
    torch.manual_seed(13)
    config = transformers.BertConfig(
        vocab_size=s["vocab"], hidden_size=s["width"], num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"], intermediate_size=s["ffn"], max_position_embeddings=s["context"],
        hidden_dropout_prob=s["dropout"], attention_probs_dropout_prob=s["dropout"])
    model = transformers.BertForMaskedLM(config)
    model.train()
    tokens = torch.randint(5, s["vocab"], (s["batch"], s["context"]))
    masked = torch.rand(s["batch"], s["context"]) < s["mask_fraction"]
    labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
    inputs = torch.where(masked, torch.full_like(tokens, 4), tokens)  # token 4 plays [MASK]
    attention_mask = torch.ones_like(tokens)
    attention_mask[0, -8:] = 0  # one padded sequence: the mask really masks something

    def loss_fn(model, batch):
        inputs, attention_mask, labels = batch
        return model(input_ids=inputs, attention_mask=attention_mask, labels=labels).loss

    return model, (inputs, attention_mask, labels), loss_fn


# ---- ViT (image classification) -----------------------------------------------------------

VIT_SHAPE = dict(batch=4, image=32, patch=4, width=32, heads=2, layers=4, ffn=64, classes=10, dropout=0.1)


def build_vit():
    s = VIT_SHAPE
    torch.manual_seed(14)
    config = transformers.ViTConfig(
        image_size=s["image"], patch_size=s["patch"], num_channels=3, hidden_size=s["width"],
        num_hidden_layers=s["layers"], num_attention_heads=s["heads"], intermediate_size=s["ffn"],
        hidden_dropout_prob=s["dropout"], attention_probs_dropout_prob=s["dropout"], num_labels=s["classes"])
    model = transformers.ViTForImageClassification(config)
    model.train()
    images = torch.randn(s["batch"], 3, s["image"], s["image"])
    labels = torch.randint(0, s["classes"], (s["batch"],))

    def loss_fn(model, batch):
        images, labels = batch
        return model(pixel_values=images, labels=labels).loss

    return model, (images, labels), loss_fn


HF_CASES = {
    "hf_gpt2": HfCase("hf_gpt2", build_gpt2, dict(
        model="transformers.GPT2LMHeadModel (random weights from GPT2Config), training mode, dropout on, default "
              "attention implementation; causal-LM loss of the model (labels = inputs)", **GPT2_SHAPE)),
    "hf_llama": HfCase("hf_llama", build_llama, dict(
        model="transformers.LlamaForCausalLM (random weights from LlamaConfig), training mode, attention dropout "
              "on, default attention implementation; causal-LM loss of the model (labels = inputs)", **LLAMA_SHAPE)),
    "hf_bert": HfCase("hf_bert", build_bert, dict(
        model="transformers.BertForMaskedLM (random weights from BertConfig), training mode, dropout on, default "
              "attention implementation; masked-LM loss of the model, one padded sequence", **BERT_SHAPE)),
    "hf_vit": HfCase("hf_vit", build_vit, dict(
        model="transformers.ViTForImageClassification (random weights from ViTConfig), training mode, dropout on, "
              "default attention implementation; cross-entropy of the model", **VIT_SHAPE)),
}


def config_of(model: nn.Module) -> dict:
    """The model's config as a small dict (for a trace's meta), with the attention implementation used."""
    config = model.config
    keys = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "hidden_size", "intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
            "image_size", "patch_size", "resid_pdrop", "embd_pdrop", "attn_pdrop",
            "attention_dropout", "hidden_dropout_prob", "attention_probs_dropout_prob")
    present = config.to_dict()
    result = {k: getattr(config, k) for k in keys if k in present}
    result["attn_implementation"] = getattr(config, "_attn_implementation", None)
    return result
