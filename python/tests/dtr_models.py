"""Models of the families DTR was published with (Kirisame et al., ICLR 2021), written out here.

PyPI's torchvision does not import in this environment, so the layouts are
written out: a CIFAR ResNet-32, a DenseNet-121-style network, a U-Net, an
Inception-v4-style network and a transformer encoder with dropout. Each builder
returns (model, batch, loss_fn) with everything seeded, like python/tests/models.py,
and trains in training mode (BatchNorm batch statistics, dropout on) with
loss.backward(). python/tools/capture_example_traces.py captures them as
examples/traces/dtr_*.json (issue 26: recompute-only against DTR on DTR's model
families; BENCHMARKS.md).

Where a shape is smaller than DTR's (resolution, width, batch), so that a
capture on one CPU thread takes seconds and the trace stays small, the case's
description says so under `reduced`: the op structure (blocks, branches,
concatenations, skips) is the published network's.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from models import ModelCase


def conv_bn_relu(inputs, outputs, kernel, stride=1, padding=0):
    return nn.Sequential(nn.Conv2d(inputs, outputs, kernel, stride, padding, bias=False), nn.BatchNorm2d(outputs),
                         nn.ReLU(inplace=True))


def classification(seed, model, images, classes):
    torch.manual_seed(seed + 100)
    batch = images()
    labels = torch.randint(0, classes, (batch.shape[0],))

    def loss_fn(model, batch):
        images, labels = batch
        return F.cross_entropy(model(images), labels)

    return model, (batch, labels), loss_fn


# ---- CIFAR ResNet-32 (He et al. 2016, section 4.2) ----------------------------------------

RESNET32_SHAPE = dict(batch=56, channels=3, height=32, width=32, classes=10, blocks_per_stage=5,
                      widths=[16, 32, 64])


class CifarBlock(nn.Module):
    """Two 3x3 conv-BN stages; the shortcut is the identity, or where the shape changes the input subsampled
    by 2 and zero-padded in channels (the paper's option A: no parameters)."""

    def __init__(self, inputs, outputs, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.stride, self.pad = stride, outputs - inputs

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        shortcut = x
        if self.stride != 1 or self.pad:
            low, high = self.pad // 2, self.pad - self.pad // 2
            shortcut = F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, low, high))
        return F.relu(y + shortcut)


class CifarResNet(nn.Module):
    """3x3 conv stem, three stages of n BasicBlocks (16, 32, 64 channels; 6n + 2 layers), pooled linear head."""

    def __init__(self, blocks_per_stage, widths, classes):
        super().__init__()
        self.stem = conv_bn_relu(3, widths[0], 3, 1, 1)
        layers, inputs = [], widths[0]
        for stage, width in enumerate(widths):
            for block in range(blocks_per_stage):
                layers.append(CifarBlock(inputs, width, 2 if stage > 0 and block == 0 else 1))
                inputs = width
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(inputs, classes)

    def forward(self, images):
        x = self.blocks(self.stem(images))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_resnet32():
    s = RESNET32_SHAPE
    torch.manual_seed(11)
    model = CifarResNet(s["blocks_per_stage"], s["widths"], s["classes"])
    return classification(11, model, lambda: torch.randn(s["batch"], s["channels"], s["height"], s["width"]),
                          s["classes"])


# ---- DenseNet-121 layout (Huang et al. 2017) -----------------------------------------------

DENSENET_SHAPE = dict(batch=4, channels=3, height=64, width=64, classes=10, block_layers=[6, 12, 24, 16],
                      growth=32, bottleneck=4, stem=64, compression=0.5)


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (bottleneck) then BN-ReLU-3x3 conv on the concatenation of every earlier feature map."""

    def __init__(self, inputs, growth, bottleneck):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(inputs)
        self.conv1 = nn.Conv2d(inputs, bottleneck * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(bottleneck * growth)
        self.conv2 = nn.Conv2d(bottleneck * growth, growth, 3, 1, 1, bias=False)

    def forward(self, features):
        x = torch.cat(features, 1)
        x = self.conv1(F.relu(self.bn1(x)))
        return self.conv2(F.relu(self.bn2(x)))


class DenseBlock(nn.Module):
    def __init__(self, layers, inputs, growth, bottleneck):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(inputs + i * growth, growth, bottleneck) for i in range(layers))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    """BN-ReLU-1x1 conv (compression) and 2x2 average pooling between dense blocks."""

    def __init__(self, inputs, outputs):
        super().__init__(nn.BatchNorm2d(inputs), nn.ReLU(inplace=True), nn.Conv2d(inputs, outputs, 1, bias=False),
                         nn.AvgPool2d(2, 2))


class DenseNet(nn.Module):
    """7x7 stride-2 conv stem and 3x3 max-pool, dense blocks joined by transitions, BN-ReLU, pooled head."""

    def __init__(self, block_layers, growth, bottleneck, stem, compression, classes):
        super().__init__()
        layers = [nn.Conv2d(3, stem, 7, 2, 3, bias=False), nn.BatchNorm2d(stem), nn.ReLU(inplace=True),
                  nn.MaxPool2d(3, 2, 1)]
        channels = stem
        for index, count in enumerate(block_layers):
            layers.append(DenseBlock(count, channels, growth, bottleneck))
            channels += count * growth
            if index != len(block_layers) - 1:
                layers.append(Transition(channels, int(channels * compression)))
                channels = int(channels * compression)
        layers += [nn.BatchNorm2d(channels), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, classes)

    def forward(self, images):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(images), 1), 1))


def build_densenet():
    s = DENSENET_SHAPE
    torch.manual_seed(12)
    model = DenseNet(s["block_layers"], s["growth"], s["bottleneck"], s["stem"], s["compression"], s["classes"])
    return classification(12, model, lambda: torch.randn(s["batch"], s["channels"], s["height"], s["width"]),
                          s["classes"])


# ---- U-Net (Ronneberger et al. 2015) --------------------------------------------------------

UNET_SHAPE = dict(batch=6, channels=3, height=64, width=64, classes=2, widths=[16, 32, 64, 128, 256])


class DoubleConv(nn.Sequential):
    def __init__(self, inputs, outputs):
        super().__init__(conv_bn_relu(inputs, outputs, 3, 1, 1), conv_bn_relu(outputs, outputs, 3, 1, 1))


class UNet(nn.Module):
    """Four 2x2 max-pool downsamplings of double 3x3 convs, a bottleneck, four 2x2 transposed-conv upsamplings
    each concatenated with the encoder's map at that resolution (the skip), a 1x1 conv to per-pixel classes."""

    def __init__(self, widths, classes):
        super().__init__()
        self.down = nn.ModuleList()
        inputs = 3
        for width in widths:
            self.down.append(DoubleConv(inputs, width))
            inputs = width
        self.upsample = nn.ModuleList(nn.ConvTranspose2d(widths[i + 1], widths[i], 2, 2)
                                      for i in reversed(range(len(widths) - 1)))
        self.up = nn.ModuleList(DoubleConv(2 * widths[i], widths[i]) for i in reversed(range(len(widths) - 1)))
        self.out = nn.Conv2d(widths[0], classes, 1)

    def forward(self, images):
        skips, x = [], images
        for index, block in enumerate(self.down):
            x = block(x)
            if index != len(self.down) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for upsample, block in zip(self.upsample, self.up):
            x = block(torch.cat([skips.pop(), upsample(x)], 1))
        return self.out(x)


def build_unet():
    s = UNET_SHAPE
    torch.manual_seed(13)
    model = UNet(s["widths"], s["classes"])
    images = torch.randn(s["batch"], s["channels"], s["height"], s["width"])
    masks = torch.randint(0, s["classes"], (s["batch"], s["height"], s["width"]))

    def loss_fn(model, batch):
        images, masks = batch
        return F.cross_entropy(model(images), masks)

    return model, (images, masks), loss_fn


# ---- Inception-v4 layout (Szegedy et al. 2017) ----------------------------------------------

INCEPTION_SHAPE = dict(batch=4, channels=3, height=75, width=75, classes=10, blocks=[4, 7, 3], width_divisor=8,
                       dropout=0.2)


class Stem(nn.Module):
    """Inception-v4's stem: three convs, then three joins of two parallel branches by concatenation."""

    def __init__(self, d):
        super().__init__()
        self.convs = nn.Sequential(conv_bn_relu(3, 32 // d, 3, 2), conv_bn_relu(32 // d, 32 // d, 3),
                                   conv_bn_relu(32 // d, 64 // d, 3, 1, 1))
        self.branch1_conv = conv_bn_relu(64 // d, 96 // d, 3, 2)
        self.branch2a = nn.Sequential(conv_bn_relu(160 // d, 64 // d, 1), conv_bn_relu(64 // d, 96 // d, 3, 1, 1))
        self.branch2b = nn.Sequential(conv_bn_relu(160 // d, 64 // d, 1),
                                      conv_bn_relu(64 // d, 64 // d, (1, 7), 1, (0, 3)),
                                      conv_bn_relu(64 // d, 64 // d, (7, 1), 1, (3, 0)),
                                      conv_bn_relu(64 // d, 96 // d, 3, 1, 1))
        self.branch3_conv = conv_bn_relu(192 // d, 192 // d, 3, 2, 1)

    def forward(self, x):
        x = self.convs(x)
        x = torch.cat([F.max_pool2d(x, 3, 2), self.branch1_conv(x)], 1)
        x = torch.cat([self.branch2a(x), self.branch2b(x)], 1)
        return torch.cat([self.branch3_conv(x), F.max_pool2d(x, 3, 2, 1)], 1)


class InceptionA(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.pool_proj = conv_bn_relu(384 // d, 96 // d, 1)
        self.b1 = conv_bn_relu(384 // d, 96 // d, 1)
        self.b2 = nn.Sequential(conv_bn_relu(384 // d, 64 // d, 1), conv_bn_relu(64 // d, 96 // d, 3, 1, 1))
        self.b3 = nn.Sequential(conv_bn_relu(384 // d, 64 // d, 1), conv_bn_relu(64 // d, 96 // d, 3, 1, 1),
                                conv_bn_relu(96 // d, 96 // d, 3, 1, 1))

    def forward(self, x):
        pooled = self.pool_proj(F.avg_pool2d(x, 3, 1, 1, count_include_pad=False))
        return torch.cat([pooled, self.b1(x), self.b2(x), self.b3(x)], 1)


class ReductionA(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.b1 = conv_bn_relu(384 // d, 384 // d, 3, 2, 1)
        self.b2 = nn.Sequential(conv_bn_relu(384 // d, 192 // d, 1), conv_bn_relu(192 // d, 224 // d, 3, 1, 1),
                                conv_bn_relu(224 // d, 256 // d, 3, 2, 1))

    def forward(self, x):
        return torch.cat([F.max_pool2d(x, 3, 2, 1), self.b1(x), self.b2(x)], 1)


class InceptionB(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.pool_proj = conv_bn_relu(1024 // d, 128 // d, 1)
        self.b1 = conv_bn_relu(1024 // d, 384 // d, 1)
        self.b2 = nn.Sequential(conv_bn_relu(1024 // d, 192 // d, 1),
                                conv_bn_relu(192 // d, 224 // d, (1, 7), 1, (0, 3)),
                                conv_bn_relu(224 // d, 256 // d, (7, 1), 1, (3, 0)))
        self.b3 = nn.Sequential(conv_bn_relu(1024 // d, 192 // d, 1),
                                conv_bn_relu(192 // d, 192 // d, (7, 1), 1, (3, 0)),
                                conv_bn_relu(192 // d, 224 // d, (1, 7), 1, (0, 3)),
                                conv_bn_relu(224 // d, 224 // d, (7, 1), 1, (3, 0)),
                                conv_bn_relu(224 // d, 256 // d, (1, 7), 1, (0, 3)))

    def forward(self, x):
        pooled = self.pool_proj(F.avg_pool2d(x, 3, 1, 1, count_include_pad=False))
        return torch.cat([pooled, self.b1(x), self.b2(x), self.b3(x)], 1)


class ReductionB(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.b1 = nn.Sequential(conv_bn_relu(1024 // d, 192 // d, 1), conv_bn_relu(192 // d, 192 // d, 3, 2, 1))
        self.b2 = nn.Sequential(conv_bn_relu(1024 // d, 256 // d, 1),
                                conv_bn_relu(256 // d, 256 // d, (1, 7), 1, (0, 3)),
                                conv_bn_relu(256 // d, 320 // d, (7, 1), 1, (3, 0)),
                                conv_bn_relu(320 // d, 320 // d, 3, 2, 1))

    def forward(self, x):
        return torch.cat([F.max_pool2d(x, 3, 2, 1), self.b1(x), self.b2(x)], 1)


class InceptionC(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.pool_proj = conv_bn_relu(1536 // d, 256 // d, 1)
        self.b1 = conv_bn_relu(1536 // d, 256 // d, 1)
        self.b2 = conv_bn_relu(1536 // d, 384 // d, 1)
        self.b2a = conv_bn_relu(384 // d, 256 // d, (1, 3), 1, (0, 1))
        self.b2b = conv_bn_relu(384 // d, 256 // d, (3, 1), 1, (1, 0))
        self.b3 = nn.Sequential(conv_bn_relu(1536 // d, 384 // d, 1),
                                conv_bn_relu(384 // d, 448 // d, (3, 1), 1, (1, 0)),
                                conv_bn_relu(448 // d, 512 // d, (1, 3), 1, (0, 1)))
        self.b3a = conv_bn_relu(512 // d, 256 // d, (1, 3), 1, (0, 1))
        self.b3b = conv_bn_relu(512 // d, 256 // d, (3, 1), 1, (1, 0))

    def forward(self, x):
        pooled = self.pool_proj(F.avg_pool2d(x, 3, 1, 1, count_include_pad=False))
        b2, b3 = self.b2(x), self.b3(x)
        return torch.cat([pooled, self.b1(x), self.b2a(b2), self.b2b(b2), self.b3a(b3), self.b3b(b3)], 1)


class InceptionV4(nn.Module):
    """Stem, 4 Inception-A, Reduction-A, 7 Inception-B, Reduction-B, 3 Inception-C, average pool, dropout, head
    (every conv a conv-BN-ReLU; channel counts the paper's divided by `width_divisor`)."""

    def __init__(self, blocks, d, dropout, classes):
        super().__init__()
        layers = [Stem(d)] + [InceptionA(d) for _ in range(blocks[0])] + [ReductionA(d)]
        layers += [InceptionB(d) for _ in range(blocks[1])] + [ReductionB(d)]
        layers += [InceptionC(d) for _ in range(blocks[2])]
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(1536 // d, classes)

    def forward(self, images):
        x = torch.flatten(F.adaptive_avg_pool2d(self.features(images), 1), 1)
        return self.head(self.dropout(x))


def build_inception():
    s = INCEPTION_SHAPE
    torch.manual_seed(14)
    model = InceptionV4(s["blocks"], s["width_divisor"], s["dropout"], s["classes"])
    return classification(14, model, lambda: torch.randn(s["batch"], s["channels"], s["height"], s["width"]),
                          s["classes"])


# ---- Transformer encoder with dropout (Vaswani et al. 2017) ---------------------------------

TRANSFORMER_SHAPE = dict(batch=10, context=64, vocab=1000, width=128, heads=4, layers=6, ffn=512, dropout=0.1)


class TransformerEncoderModel(nn.Module):
    """Token embedding scaled by sqrt(width) + sinusoidal positions, dropout, post-norm nn.TransformerEncoder
    (dropout in attention, after it and in the feed-forward), a linear decoder to the vocabulary."""

    def __init__(self, vocab, context, width, heads, layers, ffn, dropout):
        super().__init__()
        self.width = width
        self.token = nn.Embedding(vocab, width)
        position = torch.arange(context).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, width, 2) * (-torch.log(torch.tensor(10000.0)) / width))
        table = torch.zeros(context, width)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
        self.register_buffer("positions", table, persistent=False)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(width, heads, ffn, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.decoder = nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.token(tokens) * self.width ** 0.5 + self.positions[: tokens.shape[1]]
        return self.decoder(self.encoder(self.dropout(x)))


def build_transformer():
    s = TRANSFORMER_SHAPE
    torch.manual_seed(15)
    model = TransformerEncoderModel(s["vocab"], s["context"], s["width"], s["heads"], s["layers"], s["ffn"],
                                    s["dropout"])
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"] + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def loss_fn(model, batch):
        inputs, targets = batch
        logits = model(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, (inputs, targets), loss_fn


DTR_CASES = {
    "dtr_resnet32": ModelCase("dtr_resnet32", build_resnet32, dict(
        model="CIFAR ResNet-32 (6n+2 layers, n=5: BasicBlocks, BatchNorm, option-A shortcuts), cross-entropy",
        family="ResNet (DTR: ResNet-32, batch 56, 32x32)", reduced={}, **RESNET32_SHAPE)),
    "dtr_densenet": ModelCase("dtr_densenet", build_densenet, dict(
        model="DenseNet-121 layout (dense blocks of 6/12/24/16 BN-ReLU-1x1-BN-ReLU-3x3 layers on the "
              "concatenation of every earlier map, compressing transitions), cross-entropy",
        family="DenseNet (DTR: DenseNet-121, batch 84, 224x224 ImageNet)",
        reduced=dict(input="64x64 (224x224)",
                     batch="4 (84)"), **DENSENET_SHAPE)),
    "dtr_unet": ModelCase("dtr_unet", build_unet, dict(
        model="U-Net (4 max-pool downsamplings of double 3x3 conv-BN-ReLU, transposed-conv upsamplings "
              "concatenated with the encoder's skips, 1x1 conv), per-pixel cross-entropy",
        family="U-Net (DTR: batch 6)",
        reduced=dict(widths="16..256 (U-Net: 64..1024)", input="64x64 (DTR: 416x608)"), **UNET_SHAPE)),
    "dtr_inception": ModelCase("dtr_inception", build_inception, dict(
        model="Inception-v4 layout (stem, 4 Inception-A, Reduction-A, 7 Inception-B, Reduction-B, 3 Inception-C: "
              "parallel conv-BN-ReLU branches joined by concatenation, factorized 1x7/7x1 and 1x3/3x1 convs), "
              "average pool, dropout, cross-entropy",
        family="Inception (DTR: InceptionV4, batch 64, 299x299)",
        reduced=dict(channels="the paper's divided by 8", input="75x75 (299x299)", batch="4 (64)"),
        **INCEPTION_SHAPE)),
    "dtr_transformer": ModelCase("dtr_transformer", build_transformer, dict(
        model="Transformer encoder language model: embedding + sinusoidal positions, dropout, 6 post-norm "
              "nn.TransformerEncoderLayer (dropout 0.1 in attention, residuals and feed-forward), linear decoder, "
              "cross-entropy",
        family="Transformer (DTR: batch 10)",
        reduced=dict(width="128, 4 heads, feed-forward 512", context="64 tokens"), **TRANSFORMER_SHAPE)),
}
