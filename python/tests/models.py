"""The real models of the Python tests: small shapes, random init, CPU.

Each builder returns (model, batch, loss_fn) with everything seeded, so two calls
give bit-identical models. The same builders make the example traces
(python/tests/make_example_traces.py) and the dispatch benchmark.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Tuple

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class ModelCase:
    name: str
    build: Callable[[], Tuple[nn.Module, tuple, Callable]]
    description: dict


# ---- GPT-style decoder ----------------------------------------------------------------

GPT_SHAPE = dict(vocab=256, context=32, width=64, heads=4, layers=2, ffn=256, batch=4)


class GptDecoder(nn.Module):
    """Token + position embedding, causal TransformerEncoder, LM head."""

    def __init__(self, vocab, context, width, heads, layers, ffn, dropout=0.0):
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        layer = nn.TransformerEncoderLayer(width, heads, ffn, dropout=dropout, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), diagonal=1),
                             persistent=False)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token(tokens) + self.position(positions)
        x = self.blocks(x, mask=self.mask[: tokens.shape[1], : tokens.shape[1]])
        return self.head(self.norm(x))


def build_gpt(dropout=0.0):
    s = GPT_SHAPE
    torch.manual_seed(1)
    model = GptDecoder(s["vocab"], s["context"], s["width"], s["heads"], s["layers"], s["ffn"], dropout)
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"] + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def loss_fn(model, batch):
        inputs, targets = batch
        logits = model(inputs)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, (inputs, targets), loss_fn


# ---- ResNet-18 ----------------------------------------------------------------------------

RESNET_SHAPE = dict(batch=2, channels=3, height=128, width=128, classes=10)


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN stages and a shortcut (a 1x1 conv-BN where the shape changes)."""

    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18's layout (He et al. 2016): 7x7 stem, max-pool, 4 stages of 2 BasicBlocks, pooled head."""

    def __init__(self, classes, widths=(64, 128, 256, 512), dropout=0.0, blocks=(2, 2, 2, 2)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers, inputs = [], widths[0]
        for stage, width in enumerate(widths):
            layers += [BasicBlock(inputs, width, 1 if stage == 0 else 2)]
            layers += [BasicBlock(width, width, 1) for _ in range(blocks[stage] - 1)]
            inputs = width
        self.blocks = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(inputs, classes)

    def forward(self, images):
        x = self.blocks(self.stem(images))
        return self.head(self.dropout(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)))


def build_resnet18(dropout=0.0, blocks=(2, 2, 2, 2)):
    """ResNet-18's layout; blocks=(3, 4, 6, 3) gives ResNet-34's."""
    s = RESNET_SHAPE
    torch.manual_seed(2)
    model = ResNet18(s["classes"], dropout=dropout, blocks=blocks)
    images = torch.randn(s["batch"], s["channels"], s["height"], s["width"])
    labels = torch.randint(0, s["classes"], (s["batch"],))

    def loss_fn(model, batch):
        images, labels = batch
        return nn.functional.cross_entropy(model(images), labels)

    return model, (images, labels), loss_fn


# ---- ViT-style model ------------------------------------------------------------------------

VIT_SHAPE = dict(batch=4, image=32, patch=8, width=64, heads=4, layers=2, ffn=256, classes=10)


class VisionTransformer(nn.Module):
    """Patch-embedding conv, class token, position embedding, TransformerEncoder, head."""

    def __init__(self, image, patch, width, heads, layers, ffn, classes, dropout=0.0):
        super().__init__()
        self.patch = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        patches = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.position = nn.Parameter(torch.randn(1, patches + 1, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, ffn, dropout=dropout, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, images):
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        x = self.blocks(x)
        return self.head(self.norm(x[:, 0]))


def build_vit(dropout=0.0):
    s = VIT_SHAPE
    torch.manual_seed(3)
    model = VisionTransformer(s["image"], s["patch"], s["width"], s["heads"], s["layers"], s["ffn"], s["classes"],
                              dropout)
    images = torch.randn(s["batch"], 3, s["image"], s["image"])
    labels = torch.randint(0, s["classes"], (s["batch"],))

    def loss_fn(model, batch):
        images, labels = batch
        return nn.functional.cross_entropy(model(images), labels)

    return model, (images, labels), loss_fn


CASES = {
    "gpt_decoder": ModelCase("gpt_decoder", build_gpt, dict(
        model="GPT-style decoder: token + position embedding, nn.TransformerEncoder (pre-norm, causal mask), "
              "LM head, cross-entropy", **GPT_SHAPE)),
    "resnet18": ModelCase("resnet18", build_resnet18, dict(
        model="ResNet-18 layout (BasicBlocks, BatchNorm, in-place ReLU), cross-entropy", **RESNET_SHAPE)),
    "vit": ModelCase("vit", build_vit, dict(
        model="ViT-style: patch-embedding conv, class token, position embedding, nn.TransformerEncoder (pre-norm, "
              "GELU), head, cross-entropy", **VIT_SHAPE)),
}
