"""Captures the real-model corpus in examples/traces/corpus/: torchvision and transformers models.

    PYTHONPATH=build/python .venv/bin/python python/tools/capture_corpus.py [--out examples/traces/corpus] [MODEL...]

The planners are tested on these traces (tests/cli/corpus_cli_test.cc: every
planner at 20/50/80% of each trace's peak, in `make test`) and timed on them
(scripts/run-benchmarks.sh, BENCHMARKS.md "Real-model corpus"). Each model is
built from its constructor or config object with random weights (nothing is
downloaded) at a batch and sequence one would train it at, at reduced depth
where the full model would make the trace large (`meta` says which): the op
count grows with the depth, the planning problem's shape does not change. Each
model runs one step without a budget to measure the unplanned activation peak,
then one step in a session with a budget of half that peak whose warmup trace
is saved, compact (no indentation), with a `meta` object describing the model
and how the trace was taken. Op durations and copy bandwidths are the CPU's
(one intra-op thread, the HostBackend), from one try: unlike
capture_example_traces.py it does not repeat the capture to take each
quantity at its least disturbed, so the times are as noisy as the machine was
(`meta.load_average_1min`); the corpus is for planning, not for timing claims.

`vit_b_16_dispatch_mode` and `vit_l_16_dispatch_mode` are captured through
the session's TorchDispatchMode (interception="dispatch_mode"): the
out-of-place residual adds of that path made the DTR walk of the
recompute-only planner thrash to 13 GB before its work bound (issue 34,
plan/dtr_planner.h, Note [The walk's work bound]).

torchvision is imported through python/tests/torchvision_models.py (PyPI's
wheel cannot load its compiled operators on the CPU torch; the classification
models use none of them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import sys
import time
from typing import Callable

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

import hyperoffload as ho  # noqa: E402
from conftest import train  # noqa: E402  (also sets one thread and deterministic algorithms)
# Before transformers, whose lazy model imports otherwise import PyPI's
# torchvision and fail on its compiled operators (python/tests/torchvision_models.py).
from torchvision_models import torchvision  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@dataclasses.dataclass(frozen=True)
class CorpusCase:
    build: Callable[[], tuple]
    description: dict
    interception: str = "auto"


def _classifier(make_model: Callable, batch: int, image: int, classes: int = 1000, seed: int = 0):
    def build():
        torch.manual_seed(seed)
        model = make_model()
        model.train()
        images = torch.randn(batch, 3, image, image)
        labels = torch.randint(0, classes, (batch,))

        def loss_fn(model, batch):
            images, labels = batch
            return torch.nn.functional.cross_entropy(model(images), labels)

        return model, (images, labels), loss_fn
    return build


def _torchvision(name: str, batch: int, image: int = 224, layers: int | None = None, **kwargs):
    def make():
        model = getattr(torchvision.models, name)(weights=None, **kwargs)
        if layers is not None:  # a ViT at reduced depth: its first `layers` encoder blocks
            model.encoder.layers = model.encoder.layers[:layers]
        return model
    description = dict(model=f"torchvision.models.{name}(weights=None{''.join(f', {k}={v!r}' for k, v in kwargs.items())})",
                       batch=batch, image=image, loss="cross-entropy over 1000 classes")
    if layers is not None:
        description["encoder_layers"] = f"the first {layers} of the model's encoder blocks"
    return _classifier(make, batch, image), description


def _hf(kind: str, config: dict, batch: int, sequence: int, vocab: int, seed: int = 0):
    def build():
        import transformers
        transformers.logging.set_verbosity_error()
        torch.manual_seed(seed)
        if kind == "vit":
            model = transformers.ViTForImageClassification(transformers.ViTConfig(**config))
            model.train()
            images = torch.randn(batch, 3, config["image_size"], config["image_size"])
            labels = torch.randint(0, config["num_labels"], (batch,))
            return model, (images, labels), lambda m, b: m(pixel_values=b[0], labels=b[1]).loss
        tokens = torch.randint(5, vocab, (batch, sequence))
        if kind == "t5":
            model = transformers.T5ForConditionalGeneration(transformers.T5Config(**config))
            model.train()
            targets = torch.randint(5, vocab, (batch, sequence // 4))
            return model, (tokens, targets), lambda m, b: m(input_ids=b[0], labels=b[1]).loss
        if kind == "bert":
            model = transformers.BertForMaskedLM(transformers.BertConfig(**config))
            model.train()
            masked = torch.rand(batch, sequence) < 0.15
            labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
            inputs = torch.where(masked, torch.full_like(tokens, 4), tokens)
            return model, (inputs, labels), lambda m, b: m(input_ids=b[0], labels=b[1]).loss
        classes = {"gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
                   "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}
        config_class, model_class = classes[kind]
        model = model_class(config_class(**config))
        model.train()
        return model, (tokens,), lambda m, b: m(input_ids=b[0], labels=b[0]).loss
    description = dict(model=f"transformers {kind}, random weights from its config object", config=config,
                       batch=batch, sequence=sequence,
                       loss="the model's own loss (labels passed to the model), training mode, dropout as configured")
    return build, description


def _cases() -> dict[str, CorpusCase]:
    cases = {}

    def add(name, pair, interception="auto"):
        cases[name] = CorpusCase(pair[0], pair[1], interception)

    add("vit_b_16", _torchvision("vit_b_16", batch=4))
    add("vit_b_16_dispatch_mode", _torchvision("vit_b_16", batch=4), interception="dispatch_mode")
    add("vit_l_16", _torchvision("vit_l_16", batch=4, layers=12))
    add("vit_l_16_dispatch_mode", _torchvision("vit_l_16", batch=4, layers=12), interception="dispatch_mode")
    add("resnet50", _torchvision("resnet50", batch=8))
    add("densenet121", _torchvision("densenet121", batch=4))
    add("mobilenet_v3_large", _torchvision("mobilenet_v3_large", batch=8))
    add("efficientnet_b0", _torchvision("efficientnet_b0", batch=8))
    add("convnext_tiny", _torchvision("convnext_tiny", batch=4))
    add("swin_t", _torchvision("swin_t", batch=4))
    width = dict(hidden_size=512, intermediate_size=2048, num_attention_heads=8)
    add("bert", _hf("bert", dict(vocab_size=8192, num_hidden_layers=4, max_position_embeddings=512, **width),
                    batch=8, sequence=512, vocab=8192))
    add("gpt2", _hf("gpt2", dict(vocab_size=8192, n_positions=1024, n_embd=512, n_layer=4, n_head=8),
                    batch=4, sequence=1024, vocab=8192))
    add("llama", _hf("llama", dict(vocab_size=8192, num_hidden_layers=4, num_key_value_heads=2,
                                   max_position_embeddings=1024, **width),
                     batch=4, sequence=1024, vocab=8192))
    add("t5", _hf("t5", dict(vocab_size=8192, d_model=512, d_kv=64, d_ff=2048, num_layers=4, num_decoder_layers=4,
                             num_heads=8, decoder_start_token_id=0, pad_token_id=0),
                  batch=8, sequence=512, vocab=8192))
    add("hf_vit", _hf("vit", dict(image_size=224, patch_size=16, num_channels=3, hidden_size=768,
                                  num_hidden_layers=4, num_attention_heads=12, intermediate_size=3072,
                                  num_labels=1000), batch=8, sequence=197, vocab=0))
    return cases


CASES = _cases()


def capture(name: str, out: pathlib.Path) -> pathlib.Path:
    case = CASES[name]
    started = time.monotonic()
    probe = ho.OffloadSession(ho.OffloadConfig(interception=case.interception))
    train(case.build, probe, steps=1)
    peak = probe.unplanned_peak_bytes()
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=peak // 2, planner="peak",
                                                 interception=case.interception))
    train(case.build, session, steps=1)
    document = session.trace()
    meta = dict(case.description)
    meta.update(
        source="hyperoffload Python session (python/tools/capture_corpus.py)",
        interception=case.interception,
        step="forward + loss + backward; parameter gradients exist before the step and are accumulated in place "
             "(not traced)",
        dtype="float32",
        device="cpu (HostBackend), torch.set_num_threads(1)",
        torch=torch.__version__,
        machine=platform.machine(),
        unplanned_peak_bytes=peak,
        budget="memory_limit_bytes = 50% of the unplanned peak",
        parameters=sum(p.numel() for p in case.build()[0].parameters()),
        tries=1,
        load_average_1min=round(os.getloadavg()[0], 2),
        capture_seconds=round(time.monotonic() - started, 1),
    )
    document["meta"] = meta
    path = out / f"{name}.json"
    ho._C.write_file_atomically(os.fspath(path), json.dumps(document, separators=(",", ":")))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "examples" / "traces" / "corpus")
    parser.add_argument("models", nargs="*", default=list(CASES))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.models:
        if name not in CASES:
            raise SystemExit(f"unknown model {name!r}; known: {', '.join(CASES)}")
        path = capture(name, args.out)
        print(f"{path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
