"""A differential training-loop fuzzer (issue 33, part 5): random loops, each run eagerly and under a session.

A seeded generator draws a training loop's shape (``draw(seed)``): the model
(``transformers`` GPT-2, Llama and BERT with dropout on; a torchvision ResNet-18
and VisionTransformer), the planner, a device budget of 20-90% of the step's
unplanned activation peak, a host budget (none, 0, part of what must leave the
device), the copy link the plan assumes, the interception, ``zero_grad``'s mode
and place, gradient accumulation 1-8, fixed / bucketed / random sequence
lengths with attention masks, evaluation steps under ``torch.no_grad()`` or
``torch.inference_mode()`` inside or outside the session, clipping and
``optimizer.step()`` inside or outside the ``with`` block, bfloat16 autocast, an
explicit ``torch.Generator`` drawn from inside the step, and a forward-only step
with grad enabled.

The oracle (``run_loop``): the same loop, from the same initial weights, RNG
states and data, run first eagerly (no session), recording a checkpoint after
every micro-batch (its loss, every parameter's gradient, every buffer, the CPU
generator's and the explicit generator's states), after every optimizer step
(every parameter too), after every evaluation and forward-only step (the loss).
Then under one ``OffloadSession``, where every checkpoint must be
``torch.equal`` to eager's (same dtype and shape; a gradient ``None`` exactly
where eager's is). Verdicts:

* ``pass``: every checkpoint equal;
* ``refused-allowed``: a ``BudgetError`` raised while the budget is below the
  session's floor (``session.floor_bytes()``), every result before it equal —
  including the loss of the step it stopped, if its forward had finished;
* ``wrong``: a checkpoint differs (a finding, whatever came after);
* ``refused``: any other ``HyperoffloadError`` (``DivergenceError``, a
  ``BudgetError`` at or above the floor, ...) — a finding;
* ``crash``: any other exception from the session run — a finding.

An exception in the eager run, a non-finite eager result or a loop whose two
runs do not reach the same checkpoints is a bug of the harness
(``HarnessError``), never a verdict.

Used by python/tests/test_loop_fuzz.py (a fixed sample, in ``make test``) and
python/tools/fuzz_loops.py (``make fuzz-loops``: thousands, with a summary and
one reproduction command per finding). docs/FUZZING.md, "The training-loop
fuzzer".
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
import random
import re
import time
import traceback
import warnings
from typing import Callable, Dict, List, Optional, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

# Before transformers: its lazily imported model classes (BertForMaskedLM) import
# torchvision, whose PyPI wheel loads only through torchvision_models on the CPU torch.
from torchvision_models import torchvision  # noqa: E402

import transformers  # noqa: E402

import hyperoffload as ho  # noqa: E402

transformers.logging.set_verbosity_error()

# ---- The shape of a loop -------------------------------------------------------------------

TEXT_MODELS = ("gpt2", "llama", "bert")
VISION_MODELS = ("resnet", "vit")
MODELS = TEXT_MODELS + VISION_MODELS
PLANNERS = ("greedy", "peak", "hybrid", "recompute")
HOST_BUDGETS = ("none", "zero", "partial")
LENGTHS = ("fixed", "bucketed", "random")
ZERO_GRAD_AT = ("window_start", "after_step")
CLIPS = ("none", "inside", "outside")
EVALS = ("none", "no_grad", "inference_mode")
# Where an evaluation step runs: outside the session; in the session with the
# grad mode entered inside its block; in the session, entered inside the grad mode.
EVAL_PLACES = ("outside", "session_outer", "grad_mode_outer")
OPTIMIZERS = ("sgd", "adamw")
INTERCEPTIONS = ("auto", "dispatch_mode")

VOCAB = 96
MAX_LEN = 32
MIN_LEN = 6
BUCKETS = (16, 24, 32)
# Images: 64 x 64 for the ResNet (its last stage is then 2 x 2, so batch norm's
# statistics over 2 images are not those of 2 single values, and evaluation with
# the running statistics stays finite), 32 x 32 in patches of 8 for the ViT.
RESNET_IMAGE = 64
VIT_IMAGE = 32
CLASSES = 10
DROPOUT = 0.1
# The copy link a plan may assume instead of the measured one: on the CPU a copy
# is a memcpy, so a plan on the measured link rarely recomputes; at 0.01 GiB/s
# hybrid recomputes as on a slow link (as python/tests/test_recompute.py does).
SLOW_LINK_GIB_PER_S = 0.01


@dataclasses.dataclass(frozen=True)
class LoopShape:
    seed: int
    model: str
    layers: int
    width: int
    batch: int
    lengths: str               # text models: fixed | bucketed | random; vision models: fixed (one image size)
    small_last_batch: bool     # the last micro-batch has fewer examples (the end of an epoch)
    planner: str
    budget_fraction: Optional[float]  # device budget as a fraction of the unplanned activation peak; None: none
    host_budget: str           # none | zero | partial
    host_fraction: float       # partial: this fraction of (peak - device budget), in bytes
    slow_link: bool            # plan for a 0.01 GiB/s copy link
    interception: str
    set_to_none: bool
    zero_grad_at: str
    accumulate: int
    windows: int               # optimizer steps
    optimizer: str
    optimizer_inside: bool
    clip: str
    eval: str
    eval_place: str
    autocast: bool
    generator: bool
    forward_only: bool         # a forward-only step with grad enabled in the session, after the first window

    def replace(self, **changes) -> "LoopShape":
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """One line with every field that matters for this shape."""
        parts = [f"{self.model} L{self.layers} W{self.width} B{self.batch}"]
        if self.model in TEXT_MODELS:
            parts.append(f"lengths={self.lengths}")
        if self.small_last_batch:
            parts.append("small-last-batch")
        if self.budget_fraction is None:
            parts.append("no budget")
        else:
            parts.append(f"{self.planner} @{self.budget_fraction:.0%}")
            host = {"none": "host=none", "zero": "host=0",
                    "partial": f"host={self.host_fraction:.0%} of deficit"}[self.host_budget]
            parts.append(host)
            if self.slow_link:
                parts.append("slow-link")
        if self.interception != "auto":
            parts.append(f"interception={self.interception}")
        parts.append(f"zero_grad(set_to_none={self.set_to_none}) at {self.zero_grad_at}")
        parts.append(f"accumulate={self.accumulate} windows={self.windows}")
        parts.append(f"{self.optimizer} {'inside' if self.optimizer_inside else 'outside'}")
        parts.append(f"clip={self.clip}")
        if self.eval != "none":
            parts.append(f"eval={self.eval}/{self.eval_place}")
        if self.autocast:
            parts.append("autocast-bf16")
        if self.generator:
            parts.append("generator")
        if self.forward_only:
            parts.append("forward-only-step")
        return ", ".join(parts)

    def overrides(self, base: "LoopShape") -> List[str]:
        """`field=value` for every field where this shape differs from `base` (for --set)."""
        result = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value != getattr(base, field.name):
                result.append(f"{field.name}={format_value(value)}")
        return result


def format_value(value) -> str:
    if value is None:
        return "none"
    return str(value)


def parse_override(shape: LoopShape, text: str) -> LoopShape:
    """Applies `field=value` (the --set syntax) to a shape, with the field's type (not validated)."""
    name, _, raw = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(LoopShape)}
    if name not in fields or not _:
        raise ValueError(f"--set {text!r}: expected FIELD=VALUE with FIELD one of {', '.join(fields)}")
    current = getattr(shape, name)
    if raw.lower() == "none" and name == "budget_fraction":
        value = None
    elif isinstance(current, bool):
        if raw.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"--set {text!r}: {name} is true or false")
        value = raw.lower() in ("true", "1")
    elif isinstance(current, int):
        value = int(raw)
    elif isinstance(current, float) or name == "budget_fraction":
        value = float(raw)
    else:
        value = raw
    return shape.replace(**{name: value})  # validated once every override is applied (apply_overrides)


def apply_overrides(shape: LoopShape, overrides: List[str]) -> LoopShape:
    """A shape with every `field=value` of `overrides` applied, then validated (one override may need
    another: batch=2 with small_last_batch=False)."""
    for override in overrides:
        shape = parse_override(shape, override)
    validate(shape)
    return shape


def validate(shape: LoopShape) -> None:
    """Raises ValueError for a shape the loop cannot run."""
    checks = [
        (shape.model in MODELS, f"model {shape.model!r} not in {MODELS}"),
        (shape.planner in PLANNERS, f"planner {shape.planner!r} not in {PLANNERS}"),
        (shape.host_budget in HOST_BUDGETS, f"host_budget {shape.host_budget!r} not in {HOST_BUDGETS}"),
        (shape.lengths in LENGTHS, f"lengths {shape.lengths!r} not in {LENGTHS}"),
        (shape.zero_grad_at in ZERO_GRAD_AT, f"zero_grad_at {shape.zero_grad_at!r} not in {ZERO_GRAD_AT}"),
        (shape.clip in CLIPS, f"clip {shape.clip!r} not in {CLIPS}"),
        (shape.eval in EVALS, f"eval {shape.eval!r} not in {EVALS}"),
        (shape.eval_place in EVAL_PLACES, f"eval_place {shape.eval_place!r} not in {EVAL_PLACES}"),
        (shape.optimizer in OPTIMIZERS, f"optimizer {shape.optimizer!r} not in {OPTIMIZERS}"),
        (shape.interception in INTERCEPTIONS, f"interception {shape.interception!r} not in {INTERCEPTIONS}"),
        (1 <= shape.accumulate <= 8, "accumulate is 1-8"),
        (shape.windows >= 1, "windows >= 1"),
        (shape.layers >= 1 and shape.width % 4 == 0 and shape.width >= 8, "layers >= 1, width a multiple of 4"),
        (shape.batch >= 2, "batch >= 2 (a ResNet's batch norm needs two examples)"),
        (not shape.small_last_batch or shape.batch >= 3, "small_last_batch needs batch >= 3"),
        (not (shape.clip == "outside" and shape.optimizer_inside),
         "clip=outside needs the optimizer outside (clipping precedes the step)"),
        (shape.budget_fraction is None or 0 < shape.budget_fraction, "budget_fraction > 0"),
        (0 <= shape.host_fraction <= 1, "host_fraction in [0, 1]"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"invalid loop shape: {message}")


def draw(seed: int) -> LoopShape:
    """The loop shape of `seed`: every dimension drawn from random.Random(seed)."""
    rng = random.Random(seed)
    model = rng.choice(MODELS)
    batch = rng.randint(2, 4)
    accumulate = rng.randint(1, 8)
    optimizer_inside = rng.random() < 0.5
    clip = rng.choice(("none", "inside") if optimizer_inside else CLIPS)
    shape = LoopShape(
        seed=seed,
        model=model,
        layers=rng.randint(1, 2),
        width=rng.choice((16, 32)),
        batch=batch,
        lengths=rng.choice(LENGTHS) if model in TEXT_MODELS else "fixed",
        small_last_batch=batch >= 3 and rng.random() < 0.25,
        planner=rng.choice(PLANNERS),
        budget_fraction=round(rng.uniform(0.2, 0.9), 2),
        host_budget=rng.choice(HOST_BUDGETS),
        host_fraction=round(rng.uniform(0.1, 0.9), 2),
        slow_link=rng.random() < 0.5,
        interception="dispatch_mode" if rng.random() < 0.2 else "auto",
        set_to_none=rng.random() < 0.5,
        zero_grad_at=rng.choice(ZERO_GRAD_AT),
        accumulate=accumulate,
        # A few micro-batches per loop: 2-3 optimizer steps, at most 16 micro-batches.
        windows=rng.randint(2, 3) if accumulate <= 4 else 2,
        optimizer=rng.choice(OPTIMIZERS),
        optimizer_inside=optimizer_inside,
        clip=clip,
        eval=rng.choice(EVALS),
        eval_place=rng.choice(EVAL_PLACES),
        autocast=rng.random() < 0.3,
        generator=rng.random() < 0.4,
        forward_only=rng.random() < 0.3,
    )
    validate(shape)
    return shape


# ---- Models and data ------------------------------------------------------------------------

def build_model(shape: LoopShape) -> nn.Module:
    """The model of `shape`, in training mode, random weights from the loop's seed; nothing downloaded."""
    torch.manual_seed(shape.seed)
    w, layers = shape.width, shape.layers
    if shape.model == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=MAX_LEN, n_embd=w, n_layer=layers, n_head=2,
                                         resid_pdrop=DROPOUT, embd_pdrop=DROPOUT, attn_pdrop=DROPOUT)
        model = transformers.GPT2LMHeadModel(config)
    elif shape.model == "llama":
        config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=w, intermediate_size=2 * w,
                                          num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                                          max_position_embeddings=MAX_LEN, attention_dropout=DROPOUT)
        model = transformers.LlamaForCausalLM(config)
    elif shape.model == "bert":
        config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=w, num_hidden_layers=layers,
                                         num_attention_heads=2, intermediate_size=2 * w,
                                         max_position_embeddings=MAX_LEN, hidden_dropout_prob=DROPOUT,
                                         attention_probs_dropout_prob=DROPOUT)
        model = transformers.BertForMaskedLM(config)
    elif shape.model == "resnet":
        # Batch norm's running statistics as the cumulative average of the batches seen
        # (momentum=None): after a few steps on 2-4 images they are close to the batch
        # statistics, so evaluation stays finite (with the default momentum of 0.1
        # they stay near their initial values, and an evaluation's activations
        # overflow within the 8 blocks).
        norm = functools.partial(nn.BatchNorm2d, momentum=None)
        if layers >= 2:
            model = torchvision.models.resnet18(num_classes=CLASSES, norm_layer=norm)
        else:  # ResNet-10: resnet18's blocks, one per stage (half the parameters)
            model = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1],
                                                     num_classes=CLASSES, norm_layer=norm)
    elif shape.model == "vit":
        model = torchvision.models.VisionTransformer(
            image_size=VIT_IMAGE, patch_size=8, num_layers=layers, num_heads=2, hidden_dim=w, mlp_dim=2 * w,
            dropout=DROPOUT, attention_dropout=DROPOUT, num_classes=CLASSES)
    else:
        raise ValueError(f"unknown model {shape.model!r}")
    model.train()
    return model


@dataclasses.dataclass
class LoopData:
    train: List[tuple]   # one batch per micro-batch
    eval: tuple


def padded_length(shape: LoopShape, longest: int) -> int:
    if shape.lengths == "fixed":
        return MAX_LEN
    if shape.lengths == "bucketed":
        return next(b for b in BUCKETS if b >= longest)
    return longest


def text_batch(shape: LoopShape, rng: random.Random, g: torch.Generator, examples: int) -> tuple:
    """Token ids padded (right, id 0) to the shape's length mode, the attention mask and the labels (-100 where
    nothing is predicted); every batch has at least one label."""
    lengths = [rng.randint(MIN_LEN, MAX_LEN) for _ in range(examples)]
    length = padded_length(shape, max(lengths))
    ids = torch.randint(5, VOCAB, (examples, length), generator=g)
    mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = ids * mask
    if shape.model == "bert":
        chosen = (torch.rand(examples, length, generator=g) < 0.2) & mask.bool()
        chosen[0, 0] = True
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        ids = torch.where(chosen, torch.full_like(ids, 4), ids)  # token 4 plays [MASK]
    else:
        labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
    return ids, mask, labels


def image_batch(shape: LoopShape, g: torch.Generator, examples: int) -> tuple:
    size = RESNET_IMAGE if shape.model == "resnet" else VIT_IMAGE
    return torch.randn(examples, 3, size, size, generator=g), torch.randint(0, CLASSES, (examples,), generator=g)


def make_data(shape: LoopShape) -> LoopData:
    rng = random.Random(shape.seed * 7919 + 1)
    g = torch.Generator().manual_seed(shape.seed + 17)
    micro_batches = shape.accumulate * shape.windows
    batches = []
    for i in range(micro_batches + 1):  # the last one is the evaluation batch
        examples = shape.batch - 1 if shape.small_last_batch and i == micro_batches - 1 else shape.batch
        if shape.model in TEXT_MODELS:
            batches.append(text_batch(shape, rng, g, examples))
        else:
            batches.append(image_batch(shape, g, examples))
    return LoopData(train=batches[:-1], eval=batches[-1])


def loss_of(model: nn.Module, shape: LoopShape, batch: tuple, generator: Optional[torch.Generator]) -> torch.Tensor:
    """The step's loss; with an explicit generator, the step first draws from it (token noise, image noise)."""
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if shape.autocast else contextlib.nullcontext())
    if shape.model in TEXT_MODELS:
        ids, mask, labels = batch
        if generator is not None:
            noisy = (torch.rand(ids.shape, generator=generator) < 0.1) & mask.bool()
            ids = torch.where(noisy, torch.randint(5, VOCAB, ids.shape, generator=generator), ids)
        with autocast:
            return model(input_ids=ids, attention_mask=mask, labels=labels).loss
    images, labels = batch
    if generator is not None:
        images = images + 0.1 * torch.randn(images.shape, generator=generator)
    with autocast:
        logits = model(images)
    return nn.functional.cross_entropy(logits.float(), labels)


# ---- The loop ---------------------------------------------------------------------------------

class HarnessError(AssertionError):
    """The fuzzer itself is wrong (an eager run failed, the two runs reached different checkpoints, ...)."""


class Mismatch(Exception):
    """A checkpoint of the session run differs from eager's."""

    def __init__(self, where: str, tensor: str, detail: str):
        super().__init__(f"{where}: {tensor}: {detail}")
        self.where = where
        self.tensor = tensor
        self.detail = detail


Checkpoint = Dict[str, Optional[torch.Tensor]]


def grads_of(model: nn.Module) -> Checkpoint:
    return {f"grad[{name}]": p.grad for name, p in model.named_parameters()}


def params_of(model: nn.Module) -> Checkpoint:
    return {f"param[{name}]": p.detach() for name, p in model.named_parameters()}


def buffers_of(model: nn.Module) -> Checkpoint:
    return {f"buffer[{name}]": b for name, b in model.named_buffers()}


def rng_of(generator: Optional[torch.Generator]) -> Checkpoint:
    result = {"rng[cpu]": torch.get_rng_state()}
    if generator is not None:
        result["rng[generator]"] = generator.get_state()
    return result


@dataclasses.dataclass
class Corruption:
    """Self-test of the oracle, applied to the session run only.

    `parameter` names a parameter: after micro-batch `micro_batch`, before its
    checkpoint, one element of that parameter's gradient moves by one ulp.
    `parameter` "loss": inside that micro-batch's block, after its forward, the
    loss moves by one ulp and the step raises a DivergenceError (a refusal that
    comes after a result differed: a wrong result)."""
    micro_batch: int
    parameter: str


class LoopRun:
    """One run of a loop: eager (`session` None, records checkpoints) or under a session (compares them)."""

    def __init__(self, shape: LoopShape, model: nn.Module, data: LoopData, session: Optional[ho.OffloadSession],
                 expected: Optional[List[Tuple[str, Checkpoint]]] = None, corruption: Optional[Corruption] = None):
        self.shape = shape
        self.model = model
        self.data = data
        self.session = session
        self.expected = expected
        self.recorded: List[Tuple[str, Checkpoint]] = []
        self.corruption = corruption
        self.where = "start"              # the step or checkpoint the loop is at
        self.pending_loss: Optional[Tuple[str, torch.Tensor]] = None  # a step's loss before its block ended
        self.kinds: List[str] = []        # per session step: warmup / replay / passthrough
        self.recomputes = 0
        self.offloaded_bytes = 0
        self.segment_plans: set = set()   # the notes of the segment plans the session made
        self.warnings: List[str] = []

    # -- checkpoints
    def checkpoint(self, where: str, tensors: Checkpoint) -> None:
        self.pending_loss = None
        if self.expected is None:
            copied = {}
            for name, t in tensors.items():
                if t is not None and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    raise HarnessError(f"seed {self.shape.seed}: the eager run's {name} at {where} is not finite; "
                                       "the loop shape is not a valid test")
                copied[name] = None if t is None else t.detach().clone()
            self.recorded.append((where, copied))
            return
        index = len(self.recorded)
        if index >= len(self.expected) or self.expected[index][0] != where:
            eager_where = self.expected[index][0] if index < len(self.expected) else "the end"
            raise HarnessError(f"seed {self.shape.seed}: checkpoint {index} is {where!r} under the session, "
                               f"{eager_where!r} eagerly")
        self.recorded.append((where, {}))
        expected = self.expected[index][1]
        if set(expected) != set(tensors):
            raise HarnessError(f"seed {self.shape.seed}: {where}: checkpointed tensors differ")
        for name, e in expected.items():
            problem = difference(e, tensors[name])
            if problem is not None:
                raise Mismatch(where, name, problem)

    def check_pending_loss(self) -> None:
        """After an exception: the loss of the step it stopped, if that step's forward had finished."""
        if self.pending_loss is None or self.expected is None:
            return
        where, loss = self.pending_loss
        for label, tensors in self.expected:
            if label == where:
                problem = difference(tensors["loss"], loss)
                if problem is not None:
                    raise Mismatch(where, "loss (before the exception)", problem)
                return

    # -- steps
    def step(self, where: str):
        """The context of one step: the session's `with` block (eager: nothing)."""
        self.where = where
        return self.session if self.session is not None else contextlib.nullcontext()

    def after_step(self) -> None:
        if self.session is None:
            return
        stats = self.session.stats()
        self.kinds.append("passthrough" if stats.get("passthrough") else str(stats.get("kind")))
        self.recomputes += int(stats.get("recompute_count") or 0)
        self.offloaded_bytes += int(stats.get("offloaded_bytes") or 0)
        # The planner's note names the plan it chose (Note [Segment re-runs]).
        self.segment_plans.update(n for n in self.session.notes() if "segment re-runs" in n)

    def corrupt_loss(self, micro: int) -> None:
        c = self.corruption
        if c is None or self.session is None or c.micro_batch != micro or c.parameter != "loss":
            return
        where, loss = self.pending_loss
        nudged = torch.nextafter(loss.detach(), torch.tensor(float("inf"), dtype=loss.dtype))
        self.pending_loss = (where, nudged)
        raise ho.DivergenceError("injected by the harness's self-test after a wrong loss")

    def corrupt(self, micro: int) -> None:
        c = self.corruption
        if c is None or self.session is None or c.micro_batch != micro or c.parameter == "loss":
            return
        grad = dict(self.model.named_parameters())[c.parameter].grad
        flat = grad.view(-1)
        flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf"), dtype=flat.dtype))

    def run(self) -> None:
        shape, model = self.shape, self.model
        torch.manual_seed(shape.seed + 1_000_003)
        generator = torch.Generator().manual_seed(shape.seed + 2_000_003) if shape.generator else None
        params = [p for p in model.parameters()]
        if shape.optimizer == "sgd":
            optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
        else:
            optimizer = torch.optim.AdamW(params, lr=1e-3)

        def clip():
            torch.nn.utils.clip_grad_norm_(params, 1.0)

        def optimizer_step():
            optimizer.step()
            if shape.zero_grad_at == "after_step":
                optimizer.zero_grad(set_to_none=shape.set_to_none)

        micro = 0
        for window in range(shape.windows):
            if shape.zero_grad_at == "window_start":
                optimizer.zero_grad(set_to_none=shape.set_to_none)
            for k in range(shape.accumulate):
                last = k == shape.accumulate - 1
                where = f"micro-batch {micro} (window {window}, {k + 1}/{shape.accumulate})"
                with self.step(where):
                    loss = loss_of(model, shape, self.data.train[micro], generator) / shape.accumulate
                    self.pending_loss = (where, loss)
                    self.corrupt_loss(micro)
                    loss.backward()
                    if last and shape.clip == "inside":
                        clip()
                    if last and shape.optimizer_inside:
                        optimizer_step()
                self.after_step()
                self.corrupt(micro)
                self.checkpoint(where, {"loss": loss.detach(), **grads_of(model), **buffers_of(model),
                                        **rng_of(generator)})
                micro += 1
            self.where = f"optimizer step {window} (outside the session)"
            if shape.clip == "outside":
                clip()
            if not shape.optimizer_inside:
                optimizer_step()
            self.checkpoint(f"after optimizer step {window}", {**params_of(model), **grads_of(model),
                                                                 **buffers_of(model)})
            if shape.eval != "none":
                self.evaluate(window)
            if shape.forward_only and window == 0:
                where = "forward-only step (grad enabled)"
                with self.step(where):
                    loss = loss_of(model, shape, self.data.train[0], generator)
                    self.pending_loss = (where, loss)
                self.after_step()
                self.checkpoint(where, {"loss": loss.detach(), **grads_of(model), **rng_of(generator)})
                del loss

    def evaluate(self, window: int) -> None:
        shape, model = self.shape, self.model
        where = f"evaluation {window} ({shape.eval}, {shape.eval_place})"
        grad_mode = torch.no_grad if shape.eval == "no_grad" else torch.inference_mode
        model.eval()
        try:
            if shape.eval_place == "outside" or self.session is None:
                self.where = where
                with grad_mode():
                    loss = loss_of(model, shape, self.data.eval, None)
            elif shape.eval_place == "session_outer":
                with self.step(where), grad_mode():
                    loss = loss_of(model, shape, self.data.eval, None)
                    self.pending_loss = (where, loss)
                self.after_step()
            else:
                with grad_mode(), self.step(where):
                    loss = loss_of(model, shape, self.data.eval, None)
                    self.pending_loss = (where, loss)
                self.after_step()
        finally:
            model.train()
        self.checkpoint(where, {"loss": loss.detach(), **buffers_of(model), **rng_of(None)})


def difference(expected: Optional[torch.Tensor], actual: Optional[torch.Tensor]) -> Optional[str]:
    """None when `actual` is bit-identical to `expected` (torch.equal, same dtype and shape), else what differs."""
    if expected is None or actual is None:
        if expected is None and actual is None:
            return None
        return f"eager's is {'None' if expected is None else 'a tensor'}, the session's " \
               f"{'None' if actual is None else 'a tensor'}"
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return f"eager's is {expected.dtype} {tuple(expected.shape)}, the session's {actual.dtype} " \
               f"{tuple(actual.shape)}"
    if torch.equal(expected, actual):
        return None
    if not expected.is_floating_point():
        differing = int((expected != actual).sum())
        return f"{differing} of {expected.numel()} elements differ"
    e, a = expected.double(), actual.double()
    nan = int(torch.isnan(a).sum())
    inf = int(torch.isinf(a).sum())
    finite = torch.isfinite(a)
    differing = int((e != a).sum())
    max_diff = float((e - a).abs()[finite].max()) if bool(finite.any()) else float("nan")
    text = f"{differing} of {e.numel()} elements differ, max abs diff {max_diff:.3g}"
    if nan or inf:
        text += f"; the session's has {nan} NaN and {inf} inf"
    if bool((a[finite] == 0).all()) and bool((e != 0).any()):
        text += "; the session's is all zeros"
    return text


# ---- Verdicts ------------------------------------------------------------------------------------

FINDINGS = ("wrong", "refused", "crash")


@dataclasses.dataclass
class Outcome:
    shape: LoopShape
    verdict: str                     # pass | refused-allowed | wrong | refused | crash
    where: Optional[str] = None      # the checkpoint that differed, or the step that raised
    tensor: Optional[str] = None     # wrong: the first tensor that differed
    detail: str = ""                 # what differed, or the error's message
    error: Optional[str] = None      # the exception's type name
    peak_bytes: Optional[int] = None
    budget_bytes: Optional[int] = None
    host_bytes: Optional[int] = None
    floor_bytes: Optional[int] = None
    kinds: List[str] = dataclasses.field(default_factory=list)
    recomputes: int = 0
    offloaded_bytes: int = 0
    segment_plans: int = 0           # distinct segment plans the session made
    warnings: List[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def finding(self) -> bool:
        return self.verdict in FINDINGS

    def category(self) -> str:
        """What kind of outcome, for the summary's counts: the verdict, and a refusal's or crash's type."""
        if self.verdict in ("refused", "refused-allowed", "crash"):
            return f"{self.verdict}: {self.error}"
        return self.verdict

    def finding_class(self) -> str:
        """A short name for what went wrong, the same for findings of one kind (the summary groups by it)."""
        if self.verdict == "wrong":
            tensor = (self.tensor or "?").split("[")[0]
            what = "NaN" if "NaN" in self.detail else "all zeros" if "all zeros" in self.detail else "differs"
            where = self.where or "?"
            at = ("a micro-batch" if where.startswith("micro-batch") else
                  "an optimizer step" if where.startswith("after optimizer step") else
                  "an evaluation" if where.startswith("evaluation") else "the forward-only step")
            return f"wrong result: {tensor} {what} after {at}"
        if self.verdict in ("refused", "crash"):
            message = re.sub(r"\d[\d.,]*", "N", first_line(self.detail, 100_000))
            return f"{self.error}: {message[:110]}"
        return self.verdict

    def describe(self) -> str:
        budget = "none" if self.budget_bytes is None else f"{self.budget_bytes} B"
        if self.verdict == "harness-error":
            return f"seed {self.shape.seed}: HARNESS ERROR: {first_line(self.detail)}"
        text = (f"seed {self.shape.seed}: {self.verdict.upper()}"
                f" [peak {self.peak_bytes} B, budget {budget}, host {self.host_bytes}, floor {self.floor_bytes}]")
        if self.verdict == "wrong":
            text += f" at {self.where}: {self.tensor}: {self.detail}"
        elif self.verdict != "pass":
            text += f" at {self.where}: {self.error}: {first_line(self.detail)}"
        return text


def first_line(text: str, limit: int = 400) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + "..."


def configure_torch() -> None:
    """Bit-identical results need the same kernels in the same order (as python/tests/conftest.py sets)."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def activation_peak(shape: LoopShape, model: nn.Module, data: LoopData) -> int:
    """The unplanned activation peak of the loop's largest micro-batch, measured by a session without a budget."""
    probe_model = copy.deepcopy(model)
    batch = max(data.train, key=lambda b: b[0].numel())
    generator = torch.Generator().manual_seed(0) if shape.generator else None
    session = ho.OffloadSession(ho.OffloadConfig(interception=shape.interception))
    with session.run():
        with session:
            loss_of(probe_model, shape, batch, generator).backward()
        peak = session.unplanned_peak_bytes()
    if not peak:
        raise HarnessError(f"seed {shape.seed}: the probe session traced no activations")
    return peak


def session_config(shape: LoopShape, peak: int) -> Tuple[ho.OffloadConfig, Optional[int], Optional[int]]:
    """The session's config: budget = budget_fraction of `peak`; host budget none, 0, or host_fraction of the
    bytes that must leave the device (peak - budget)."""
    budget = None if shape.budget_fraction is None else int(shape.budget_fraction * peak)
    host = None
    if budget is not None and shape.host_budget == "zero":
        host = 0
    elif budget is not None and shape.host_budget == "partial":
        host = int(shape.host_fraction * max(0, peak - budget))
    config = ho.OffloadConfig(
        max_resident_activation_bytes=budget, max_offload_activation_bytes=host,
        planner=shape.planner if budget is not None else "hybrid",
        copy_bandwidth_gib_per_s=SLOW_LINK_GIB_PER_S if (shape.slow_link and budget is not None) else None,
        interception=shape.interception)
    return config, budget, host


def run_loop(shape: LoopShape, corruption: Optional[Corruption] = None,
             inject: Optional[Callable[[LoopRun], None]] = None) -> Outcome:
    """Runs `shape` eagerly and under a session and returns the verdict (the module's docstring).

    `corruption` and `inject` are the harness's self-tests: one perturbs a gradient
    of the session run, the other runs before the session run's checkpoints
    (e.g. raises an error)."""
    configure_torch()
    started = time.perf_counter()
    pristine = build_model(shape)
    data = make_data(shape)
    peak = activation_peak(shape, pristine, data)
    config, budget, host = session_config(shape, peak)

    eager = LoopRun(shape, copy.deepcopy(pristine), data, None)
    try:
        eager.run()
    except HarnessError:
        raise
    except Exception as error:  # noqa: BLE001
        raise HarnessError(f"seed {shape.seed}: the eager run raised {type(error).__name__}: {error}\n"
                           + traceback.format_exc()) from error

    session = ho.OffloadSession(config)
    offloaded = LoopRun(shape, copy.deepcopy(pristine), data, session, expected=eager.recorded,
                        corruption=corruption)
    if inject is not None:
        original = offloaded.checkpoint

        def checkpoint(where, tensors):
            inject(offloaded)
            original(where, tensors)

        offloaded.checkpoint = checkpoint  # type: ignore[method-assign]
    outcome = Outcome(shape=shape, verdict="pass", peak_bytes=peak, budget_bytes=budget, host_bytes=host)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            offloaded.run()
            if len(offloaded.recorded) != len(eager.recorded):
                raise HarnessError(f"seed {shape.seed}: the session run reached {len(offloaded.recorded)} "
                                   f"checkpoints, the eager run {len(eager.recorded)}")
        except HarnessError:
            raise
        except Mismatch as mismatch:
            outcome.verdict, outcome.where, outcome.tensor, outcome.detail = (
                "wrong", mismatch.where, mismatch.tensor, mismatch.detail)
        except ho.HyperoffloadError as error:
            outcome.where, outcome.error, outcome.detail = offloaded.where, type(error).__name__, str(error)
            try:
                offloaded.check_pending_loss()
            except Mismatch as mismatch:
                outcome.verdict, outcome.tensor = "wrong", mismatch.tensor
                outcome.detail = f"{mismatch.detail} (then {type(error).__name__}: {first_line(str(error))})"
            else:
                floor = session.floor_bytes() if not session.closed else None
                outcome.floor_bytes = floor
                below_floor = budget is not None and floor is not None and budget < floor
                # A host budget below the plan's host floor is a BudgetError too (the
                # budget policy's kBelowHostFloor: no plan keeps both budgets).
                below_host_floor = "host floor" in str(error)
                allowed = isinstance(error, ho.BudgetError) and (below_floor or below_host_floor)
                outcome.verdict = "refused-allowed" if allowed else "refused"
        except Exception as error:  # noqa: BLE001 - anything else the session run raises is a finding
            outcome.verdict, outcome.where, outcome.error = "crash", offloaded.where, type(error).__name__
            outcome.detail = f"{error}\n{traceback.format_exc()}"
        finally:
            if session.in_step:
                raise HarnessError(f"seed {shape.seed}: the session is still in a step after the loop")
    outcome.warnings = [first_line(str(w.message)) for w in caught if issubclass(w.category, RuntimeWarning)]
    if outcome.floor_bytes is None and not session.closed:
        outcome.floor_bytes = session.floor_bytes()
    outcome.kinds = offloaded.kinds
    outcome.recomputes = offloaded.recomputes
    outcome.offloaded_bytes = offloaded.offloaded_bytes
    outcome.segment_plans = len(offloaded.segment_plans)
    session.close()
    outcome.seconds = time.perf_counter() - started
    return outcome


def reproduce_command(shape: LoopShape, no_budget: bool = False) -> str:
    """The one command that runs this loop again (from the repository root, after `make build`)."""
    command = (f"PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/tools/fuzz_loops.py "
               f"--seed {shape.seed} --loops 1 -v")
    base = draw(shape.seed)
    if no_budget:
        command += " --no-budget"
        base = base.replace(budget_fraction=None)
    for override in shape.overrides(base):
        command += f" --set {override}"
    return command


# ---- Minimizing a finding -----------------------------------------------------------------------

# The models from the fastest loop to the slowest (a minimized finding moves only left).
MODELS_BY_COST = ("gpt2", "vit", "llama", "bert", "resnet")
# For each field, simpler values to try, simplest first.
SIMPLER = {
    "windows": lambda s: [w for w in (1, 2) if w < s.windows],
    "accumulate": lambda s: [a for a in (1, 2, 3, 4) if a < s.accumulate],
    "layers": lambda s: [1] if s.layers > 1 else [],
    "width": lambda s: [16] if s.width > 16 else [],
    "batch": lambda s: [b for b in (2, 3) if b < s.batch and (b >= 3 or not s.small_last_batch)],
    "small_last_batch": lambda s: [False] if s.small_last_batch else [],
    "eval": lambda s: ["none"] if s.eval != "none" else [],
    "forward_only": lambda s: [False] if s.forward_only else [],
    "generator": lambda s: [False] if s.generator else [],
    "autocast": lambda s: [False] if s.autocast else [],
    "interception": lambda s: ["auto"] if s.interception != "auto" else [],
    "clip": lambda s: ["none"] if s.clip != "none" else [],
    "optimizer_inside": lambda s: [False] if s.optimizer_inside else [],
    "optimizer": lambda s: ["sgd"] if s.optimizer != "sgd" else [],
    "host_budget": lambda s: ["none"] if s.host_budget != "none" else [],
    "slow_link": lambda s: [False] if s.slow_link else [],
    "lengths": lambda s: ["fixed"] if s.lengths != "fixed" else [],
    "zero_grad_at": lambda s: ["window_start"] if s.zero_grad_at != "window_start" else [],
    "model": lambda s: list(MODELS_BY_COST[:MODELS_BY_COST.index(s.model)]),
}


def signature(outcome: Outcome) -> str:
    """What a minimized finding must keep: its kind (finding_class), where a wrong result's NaN, zeros or
    other difference count as one (they are the same stale or garbage memory)."""
    return re.sub(r" (NaN|differs|all zeros) after ", " wrong after ", outcome.finding_class())


def minimize(outcome: Outcome, runs: int = 1, log: Callable[[str], None] = lambda _: None) -> Outcome:
    """Greedily simplifies a finding's shape, one field at a time, keeping its kind (`signature`; each
    candidate must show it in all of `runs` runs)."""
    target = signature(outcome)
    best = outcome
    changed = True
    while changed:
        changed = False
        for field, candidates in SIMPLER.items():
            for value in candidates(best.shape):
                shape = best.shape.replace(**{field: value})
                if field == "optimizer_inside" or field == "clip":
                    if shape.clip == "outside" and shape.optimizer_inside:
                        continue
                try:
                    validate(shape)
                except ValueError:
                    continue
                results = [run_loop(shape) for _ in range(runs)]
                if all(signature(r) == target for r in results):
                    log(f"  {field}={format_value(value)}: still {results[0].describe()}")
                    best = results[0]
                    changed = True
                    break
                log(f"  {field}={format_value(value)}: {results[0].verdict} - keeping "
                    f"{field}={format_value(getattr(best.shape, field))}")
    return best
