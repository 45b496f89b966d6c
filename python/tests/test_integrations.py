"""The integrations (hyperoffload.integrations): Trainer and Lightning runs with every training step under a session.

Each run is made twice from the same seed, without the integration and with it,
and:

* every training step's loss and every final parameter is ``torch.equal`` to
  the run without it (dropout on: the session runs the same random ops in the
  same order);
* the session warmed up and then replayed (``plan_hits`` > 0), no step finished
  without offloading (``passthrough``) and the runtime's measured
  ``peak_held_bytes`` is at or under the budget in every step, the warmups
  included.

Budget: a third of the unplanned activation peak of one step on the longest batch,
measured by an unbudgeted session.
"""

from __future__ import annotations

import contextlib
import os
import random
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import hyperoffload as ho  # noqa: E402
from hyperoffload import integrations  # noqa: E402
from models import GptDecoder  # noqa: E402

VOCAB, CONTEXT, BATCH = 64, 32, 4

# lightning 2.6.6 calls a torch pytree API that torch 2.13 deprecates (not ours).
pytestmark = pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated")


def check_steps(session, stats, budget):
    assert stats, "no training step ran under the session"
    # The step held the forward and the backward: the embedding and its gradient.
    names = {op["name"] for op in session.trace()["ops"]}
    assert {"aten::embedding", "aten::embedding_dense_backward"} <= names, sorted(names)
    for step, s in enumerate(stats):
        assert not s["passthrough"], f"step {step} finished without offloading"
        assert s["kind"] in ("warmup", "replay")
        assert s["peak_held_bytes"] <= budget, f"step {step} ({s['kind']}): {s['peak_held_bytes']} > {budget}"
    assert stats[-1]["plan_hits"] > 0 and stats[-1]["warmups"] >= 1
    assert stats[-1]["steps"] == len(stats)
    assert any(s["offloaded_bytes"] + s["recomputed_bytes"] > 0 for s in stats)


def assert_same(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), f"item {i}: {x} != {y}"


# ---- transformers Trainer ------------------------------------------------------------

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()


def tiny_gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=32, n_layer=2, n_head=2,
                                     n_inner=64, pad_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def tokenizer():
    """A word-level tokenizer built in memory (nothing downloaded): tokens t0..t63, t0 the padding."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {f"t{i}": i for i in range(VOCAB)}
    return transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t1")),
                                                pad_token="t0", unk_token="t1")


def examples(count, lengths):
    """Random token sequences of random lengths in `lengths` (not padded: the collator pads)."""
    rng = random.Random(4)
    out = []
    for _ in range(count):
        length = rng.choice(lengths)
        ids = [rng.randrange(1, VOCAB) for _ in range(length)]
        out.append({"input_ids": ids, "attention_mask": [1] * length})
    return out


class PadWithLabels:
    """DataCollatorWithPadding, and labels = the padded input ids with the padding ignored (-100)."""

    def __init__(self, pad_to_multiple_of):
        self.pad = transformers.DataCollatorWithPadding(tokenizer(), pad_to_multiple_of=pad_to_multiple_of)

    def __call__(self, features):
        batch = self.pad(features)
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        return batch


class Recording:
    """Records each training step's loss (and the session's stats after it, with the integration)."""

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.step_losses.append(loss.detach().clone())
        if hasattr(self, "offload_session"):
            self.step_stats.append(self.offload_session.stats())
        return loss


def trainer_budget(fraction=1 / 3):
    """`fraction` of the unplanned activation peak of one GPT-2 step on a full batch of the longest length (24)."""
    model = tiny_gpt2()
    model.train()
    tokens = torch.randint(1, VOCAB, (BATCH, 24), generator=torch.Generator().manual_seed(0))
    probe = ho.OffloadSession()
    with probe:
        model(input_ids=tokens, attention_mask=torch.ones_like(tokens), labels=tokens).loss.backward()
    return int(probe.unplanned_peak_bytes() * fraction)


def run_trainer(tmp_path, accumulate, session=None):
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=BATCH, gradient_accumulation_steps=accumulate,
        num_train_epochs=2, learning_rate=1e-2, max_grad_norm=1.0, lr_scheduler_type="linear", optim="adamw_torch",
        save_strategy="no", logging_strategy="no", eval_strategy="epoch", report_to=[], use_cpu=True, seed=0,
        data_seed=0, disable_tqdm=True, dataloader_num_workers=0)
    if session is None:
        cls = type("RecordingTrainer", (Recording, transformers.Trainer), {})
        extra = {}
    else:
        cls = type("RecordingOffloadTrainer", (Recording, integrations.OffloadTrainer), {})
        extra = {"offload_session": session}
    trainer = cls(model=tiny_gpt2(), args=args, train_dataset=examples(14, range(5, 25)),
                  eval_dataset=examples(6, range(3, 30)), data_collator=PadWithLabels(pad_to_multiple_of=8), **extra)
    trainer.step_losses, trainer.step_stats = [], []
    trainer.train()
    return trainer


@pytest.mark.parametrize("accumulate, planner, fraction",
                         [(1, "peak", 1 / 3), (3, "peak", 1 / 3), (2, "hybrid", 1 / 2), (2, "recompute", 1 / 2)])
def test_trainer_steps_are_bit_identical_to_the_trainer_without_it(tmp_path, accumulate, planner, fraction):
    # 14 examples of 5..24 tokens, padded per batch to a multiple of 8 (8, 16
    # or 24): 4 batches an epoch, the last of 2 examples; 2 epochs, each
    # followed by an evaluation (outside the session). Accumulation 2 under
    # hybrid and recompute at half the largest batch's peak is issue 33's
    # report (NaN grad_norm from the 5th step, then a DivergenceError): the
    # micro-batches that add into .grad leave the plan of the first one after
    # it dropped activations (Note [Leaving a plan]).
    budget = trainer_budget(fraction)
    eager = run_trainer(tmp_path / "eager", accumulate)
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=planner))
    offloaded = run_trainer(tmp_path / "offloaded", accumulate, session)
    assert len(eager.step_losses) == 8
    assert_same(eager.step_losses, offloaded.step_losses)
    assert_same([p.detach() for p in eager.model.parameters()], [p.detach() for p in offloaded.model.parameters()])
    evals = [[e["eval_loss"] for e in t.state.log_history if "eval_loss" in e] for t in (eager, offloaded)]
    assert len(evals[0]) == 2 and evals[0] == evals[1]
    # Optimizer steps: with accumulation 2 or 3, two an epoch (the last window is short).
    assert eager.state.global_step == offloaded.state.global_step == (8 if accumulate == 1 else 4)
    check_steps(session, offloaded.step_stats, budget)
    assert not session.in_step
    assert "plans:" in session.summary()


def test_trainer_makes_its_own_session_from_a_config(tmp_path):
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=BATCH, max_steps=3,
                                          save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True,
                                          disable_tqdm=True)
    trainer = integrations.OffloadTrainer(model=tiny_gpt2(), args=args, train_dataset=examples(12, [16]),
                                          data_collator=PadWithLabels(pad_to_multiple_of=None),
                                          offload_config=ho.OffloadConfig(max_plans=4))
    assert trainer.offload_session.config.max_plans == 4
    trainer.train()
    stats = trainer.offload_session.stats()
    assert (stats["steps"], stats["warmups"], stats["plan_hits"]) == (3, 1, 2)
    trainer.offload_session.close()


def test_trainer_rejects_bad_offload_arguments(tmp_path):
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    with pytest.raises(TypeError, match="give offload_session or offload_config, not both"):
        integrations.OffloadTrainer(model=tiny_gpt2(), args=args, offload_session=ho.OffloadSession(),
                                    offload_config=ho.OffloadConfig())
    with pytest.raises(TypeError, match="offload_config must be a hyperoffload.OffloadConfig, not dict"):
        integrations.OffloadTrainer(model=tiny_gpt2(), args=args, offload_config={"max_plans": 2})


def test_trainer_training_step_inside_a_step_of_its_session_raises(tmp_path):
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    session = ho.OffloadSession()
    trainer = integrations.OffloadTrainer(model=tiny_gpt2(), args=args, offload_session=session)
    batch = PadWithLabels(None)(examples(2, [8]))
    with session:
        with pytest.raises(ho.HyperoffloadError, match="already in a step"):
            trainer.training_step(trainer.model, batch)


# ---- PyTorch Lightning -------------------------------------------------------------------

L = pytest.importorskip("lightning.pytorch")


class TinyGpt(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.model = GptDecoder(VOCAB, CONTEXT, width=32, heads=2, layers=2, ffn=64, dropout=0.1)
        self.step_losses, self.val_losses = [], []

    def training_step(self, batch, batch_idx):
        (tokens,) = batch
        logits = self.model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        self.step_losses.append(loss.detach().clone())
        return loss

    def validation_step(self, batch, batch_idx):
        (tokens,) = batch
        logits = self.model(tokens[:, :-1])
        self.val_losses.append(nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)))

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class StatsAfterEachBatch(L.Callback):
    def __init__(self, session):
        self.session, self.stats = session, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        assert not self.session.in_step
        self.stats.append(self.session.stats())


def lightning_loader(count=22, length=CONTEXT - 7, seed=6):
    # Training: 22 sequences of 25 tokens, 5 batches of 4 and a last one of 2.
    tokens = torch.randint(0, VOCAB, (count, length), generator=torch.Generator().manual_seed(seed))
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens), batch_size=BATCH, shuffle=False)


def lightning_budget():
    L.seed_everything(0, verbose=False)
    module = TinyGpt()
    probe = ho.OffloadSession()
    (tokens,) = next(iter(lightning_loader()))
    with probe:
        module.training_step((tokens,), 0).backward()
    return probe.unplanned_peak_bytes() // 3


def run_lightning(accumulate, callbacks=()):
    L.seed_everything(0, verbose=False)
    module = TinyGpt()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        accumulate_grad_batches=accumulate, gradient_clip_val=1.0, callbacks=list(callbacks))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        # Validation at each epoch's end (outside the session): 2 batches of another length.
        trainer.fit(module, lightning_loader(), lightning_loader(8, 17, 7))
    return module


@pytest.mark.parametrize("accumulate", [1, 2])
def test_lightning_steps_are_bit_identical_to_the_run_without_the_callback(accumulate):
    budget = lightning_budget()
    eager = run_lightning(accumulate)
    callback = integrations.OffloadCallback(
        ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak"))
    recorder = StatsAfterEachBatch(callback.offload_session)
    offloaded = run_lightning(accumulate, [callback, recorder])
    assert len(eager.step_losses) == 12  # 6 batches, 2 epochs
    assert_same(eager.step_losses, offloaded.step_losses)
    assert_same([p.detach() for p in eager.parameters()], [p.detach() for p in offloaded.parameters()])
    assert len(eager.val_losses) == 4
    assert_same(eager.val_losses, offloaded.val_losses)
    check_steps(callback.offload_session, recorder.stats, budget)
    # Two shapes (4 and 2 sequences); with accumulation, the first micro-batch
    # after zero_grad creates .grad and the next adds into it: more programs.
    assert recorder.stats[-1]["plans_cached"] >= 2
    callback.offload_session.close()


class ManualGpt(TinyGpt):
    """Manual optimization: backward, clipping and the optimizer step inside training_step (inside the step)."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        (tokens,) = batch
        logits = self.model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        self.step_losses.append(loss.detach().clone())
        optimizer.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(optimizer, gradient_clip_val=1.0)
        optimizer.step()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def test_lightning_manual_optimization_is_bit_identical():
    def run(callbacks=()):
        L.seed_everything(0, verbose=False)
        module = ManualGpt()
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=list(callbacks))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*no `val_dataloader`.*")
            trainer.fit(module, lightning_loader())
        return module

    budget = lightning_budget()
    eager = run()
    callback = integrations.OffloadCallback(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak"))
    recorder = StatsAfterEachBatch(callback.offload_session)
    # The first step also creates AdamW's state (two copies of the parameters),
    # which stays on the device: its floor is above this budget. A warning, and
    # the next step warms up again (docs/PYTHON.md, "Training loops").
    with pytest.warns(RuntimeWarning, match="below the unavoidable floor .* This was the first warmup step"):
        offloaded = run([callback, recorder])
    assert len(eager.step_losses) == 6
    assert_same(eager.step_losses, offloaded.step_losses)
    assert_same([p.detach() for p in eager.parameters()], [p.detach() for p in offloaded.parameters()])
    assert recorder.stats[0]["kind"] == "warmup" and recorder.stats[0]["peak_held_bytes"] > budget
    assert [s["kind"] for s in recorder.stats[1:]] == ["warmup", "replay", "replay", "replay", "warmup"]  # last: 2
    for s in recorder.stats[1:]:
        assert not s["passthrough"] and s["peak_held_bytes"] <= budget
    # The optimizer step ran inside each step: AdamW's update (a foreach or per-parameter op) is traced.
    assert any("addcdiv" in op["name"] for op in callback.offload_session.trace()["ops"])


def test_lightning_exception_in_the_training_step_aborts_the_step():
    class Failing(TinyGpt):
        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise ValueError("batch 2 fails")
            return super().training_step(batch, batch_idx)

    L.seed_everything(0, verbose=False)
    callback = integrations.OffloadCallback()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*no `val_dataloader`.*")
        with pytest.raises(ValueError, match="batch 2 fails"):
            trainer.fit(Failing(), lightning_loader())
    assert not callback.offload_session.in_step
    assert callback.offload_session.stats()["steps"] == 2
    with callback.offload_session:  # the session still works
        pass


def test_lightning_callback_accepts_a_session_or_a_config():
    session = ho.OffloadSession()
    assert integrations.OffloadCallback(session).offload_session is session
    assert integrations.OffloadCallback(ho.OffloadConfig(max_plans=3)).offload_session.config.max_plans == 3
    with pytest.raises(TypeError, match="offload_config must be a hyperoffload.OffloadConfig, not int"):
        integrations.OffloadCallback(512)
    assert isinstance(integrations.OffloadCallback(), L.Callback)


def test_importing_the_module_needs_neither_framework():
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        integrations.Nothing  # noqa: B018
    assert integrations.OffloadTrainer.__module__ == "hyperoffload.integrations"


# ---- accelerate (the docs' example: accelerator.backward inside the step) ---------------------------


def run_accelerate(session=None):
    accelerate = pytest.importorskip("accelerate")
    accelerate.utils.set_seed(0)
    accelerator = accelerate.Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = tiny_gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(examples(14, range(5, 25)), batch_size=BATCH,
                                         collate_fn=PadWithLabels(pad_to_multiple_of=8))
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    model.train()
    losses, stats = [], []
    for _ in range(2):  # epochs
        for batch in loader:
            with accelerator.accumulate(model):
                with session if session is not None else contextlib.nullcontext():
                    loss = model(**batch).loss
                    accelerator.backward(loss)  # divides by gradient_accumulation_steps
                if session is not None:
                    stats.append(session.stats())
                losses.append(loss.detach())
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()  # the prepared optimizer steps only when the window ends
                optimizer.zero_grad()
    accelerator.free_memory()
    return losses, [p.detach().clone() for p in model.parameters()], stats


def test_accelerate_backward_inside_the_step_is_bit_identical():
    budget = trainer_budget()
    eager = run_accelerate()
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak"))
    offloaded = run_accelerate(session)
    assert len(eager[0]) == 8
    assert_same(eager[0], offloaded[0])
    assert_same(eager[1], offloaded[1])
    check_steps(session, offloaded[2], budget)
