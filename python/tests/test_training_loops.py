"""Real training loops under one session: every batch shape, gradient accumulation, the last small batch.

The session keeps a plan per step program (docs/PYTHON.md, "Training loops";
exec/session.h, Note [Plan per step program]). Each loop here runs twice from
the same seed, eagerly and with every training step under one session, with
AdamW, gradient clipping and an LR scheduler outside the ``with`` block, and:

* every loss and every final parameter is ``torch.equal`` to eager's;
* no step finishes without offloading (``passthrough``), and the runtime's
  measured ``peak_held_bytes`` is at or under the budget in every step, the
  warmups included;
* the plan cache's counters are the ones derived by hand in each test.

Models: the project's GPT decoder (python/tests/models.py) and a tiny
``transformers`` Llama (python/tests/hf_models.py's shape, smaller). Budget:
half the unplanned activation peak of the longest step, measured by an
unbudgeted session.
"""

from __future__ import annotations

import contextlib
import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import hyperoffload as ho  # noqa: E402
from models import GptDecoder  # noqa: E402


VOCAB, CONTEXT, BATCH = 64, 32, 4


def build_gpt():
    torch.manual_seed(3)
    return GptDecoder(VOCAB, CONTEXT, width=32, heads=2, layers=2, ffn=64)


def gpt_loss(model, tokens):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits = model(inputs)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build_llama():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(12)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=CONTEXT)
    model = transformers.LlamaForCausalLM(config)
    model.train()
    return model


def llama_loss(model, tokens):
    return model(input_ids=tokens, labels=tokens).loss


MODELS = {"gpt": (build_gpt, gpt_loss), "llama": (build_llama, llama_loss)}


def batches_of(lengths, sizes=None):
    """Token batches, one per length (and batch size), padded as a collator pads to the longest example."""
    generator = torch.Generator().manual_seed(5)
    sizes = sizes or [BATCH] * len(lengths)
    return [torch.randint(0, VOCAB, (size, length), generator=generator) for size, length in zip(sizes, lengths)]


def train(name, batches, session=None, accumulate=1, set_to_none=True, eval_batch=None, optimizer_inside=False,
          eval_inside=False):
    """The loop: micro-batches under the session. Returns losses, params, the training steps' stats.

    The optimizer step (clipping, AdamW, the scheduler, zero_grad) ends each
    accumulation window: after the window's last ``with`` block, or with
    ``optimizer_inside`` inside it. With ``eval_batch``, an evaluation step under
    ``torch.no_grad()`` follows each window: outside the session, or with
    ``eval_inside`` as a step of its own (its stats are not returned).
    """
    build, loss_fn = MODELS[name]
    model = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    step = session if session is not None else contextlib.nullcontext()

    def optimizer_step():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=set_to_none)

    losses, stats = [], []
    for i, tokens in enumerate(batches):
        window_ends = (i + 1) % accumulate == 0
        with step:
            loss = loss_fn(model, tokens) / accumulate
            loss.backward()
            if window_ends and optimizer_inside:
                optimizer_step()
        losses.append(loss.detach())
        if session is not None:
            stats.append(session.stats())
        if window_ends:
            if not optimizer_inside:
                optimizer_step()
            if eval_batch is not None:
                model.eval()
                with step if eval_inside else contextlib.nullcontext(), torch.no_grad():
                    losses.append(loss_fn(model, eval_batch))
                model.train()
    return losses, [p.detach().clone() for p in model.parameters()], stats


def budget_for(name, longest):
    """Half the unplanned activation peak of one step on the longest batch."""
    probe = ho.OffloadSession(ho.OffloadConfig())
    train(name, batches_of([longest]), probe)
    return probe.unplanned_peak_bytes() // 2


def run_both(name, batches, **loop):
    budget = budget_for(name, max(b.shape[1] for b in batches))
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak"))
    eager = train(name, batches, **loop)
    offloaded = train(name, batches, session, **loop)
    assert len(eager[0]) == len(offloaded[0])
    for step, (a, b) in enumerate(zip(eager[0], offloaded[0])):
        assert torch.equal(a, b), f"loss {step}: {a} != {b}"
    for a, b in zip(eager[1], offloaded[1]):
        assert torch.equal(a, b)
    for step, stats in enumerate(offloaded[2]):
        assert not stats["passthrough"], f"step {step} finished without offloading"
        assert stats["kind"] in ("warmup", "replay")
        assert stats["peak_held_bytes"] <= budget, f"step {step} ({stats['kind']}): {stats['peak_held_bytes']} > {budget}"
    return session, offloaded[2]


def cache(stats):
    return {k: stats[k] for k in ("plans_cached", "plan_hits", "plan_misses", "warmups")}


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_dynamic_padding_with_eval_steps_replays_one_plan_per_length(name):
    # 21 steps, the length changes every batch, three lengths: three warmups
    # (the first step of each length), then every step is a hit.
    # (The GPT decoder predicts tokens[:, 1:] from tokens[:, :-1]: one more token.)
    extra = 1 if name == "gpt" else 0
    rng = random.Random(7)
    lengths = [16]
    while len(lengths) < 21:
        lengths.append(rng.choice([length for length in (16, 24, 32) if length != lengths[-1]]))
    lengths = [length + extra for length in lengths]
    session, stats = run_both(name, batches_of(lengths), eval_batch=batches_of([24 + extra])[0])
    distinct = len(set(lengths))
    assert cache(stats[-1]) == {"plans_cached": distinct, "plan_hits": len(lengths) - distinct,
                                "plan_misses": distinct, "warmups": distinct}
    assert sum(s["kind"] == "warmup" for s in stats) == distinct
    assert "plans: 3 cached" in session.summary()
    assert sum(note.startswith("plan ") for note in session.notes()) == distinct


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_the_last_small_batch_of_each_epoch(name):
    # Two epochs of 3 full batches and a last one of 1 example: two programs.
    sizes = [BATCH, BATCH, BATCH, 1] * 2
    _, stats = run_both(name, batches_of([CONTEXT] * len(sizes), sizes))
    assert cache(stats[-1]) == {"plans_cached": 2, "plan_hits": 6, "plan_misses": 2, "warmups": 2}
    assert [s["kind"] for s in stats[:5]] == ["warmup", "replay", "replay", "warmup", "replay"]


@pytest.mark.parametrize("name", ["gpt", "llama"])
@pytest.mark.parametrize("accumulate", [2, 4])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_gradient_accumulation(name, accumulate, set_to_none):
    # The first micro-batch after zero_grad(set_to_none=True) creates .grad,
    # the later ones add into it: two programs, which differ only in backward,
    # after the replay has offloaded. So the step continues as a warmup from
    # where it differs. With set_to_none=False only the very first
    # micro-batch creates .grad.
    steps = 3 * accumulate
    _, stats = run_both(name, batches_of([CONTEXT] * steps), accumulate=accumulate, set_to_none=set_to_none)
    last = cache(stats[-1])
    assert last["plans_cached"] == 2
    assert last["plan_hits"] + last["warmups"] == steps
    if not set_to_none:
        assert last["warmups"] == 2


def programs(steps, accumulate, set_to_none, optimizer_inside):
    """Each micro-batch's step program, by what its backward and optimizer do.

    (creates .grad, runs the optimizer step inside, creates AdamW's state): the
    first micro-batch after zero_grad() (set to None), and the first of the
    run, create .grad; with the optimizer inside, a window's last micro-batch
    also steps it, the first time creating its state.
    """
    labels, grads, state = [], False, False
    for i in range(steps):
        ends = (i + 1) % accumulate == 0
        labels.append((not grads, optimizer_inside and ends, optimizer_inside and ends and not state))
        grads = True
        if ends:
            state = True
            grads = not set_to_none
    return labels


@pytest.mark.parametrize("accumulate", [2, 3, 8])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("optimizer_inside", [False, True])
def test_gradient_accumulation_windows_with_the_optimizer_inside_or_outside(accumulate, set_to_none,
                                                                           optimizer_inside):
    # Two windows of 2, 3 or 8 micro-batches. The programs differ only in
    # backward and after it, after the replay has offloaded, so a step replays
    # when it starts on its own program's plan and otherwise continues as a
    # warmup from where it differs, replacing its program's plan. Counters
    # derived from the programs by the session's rule (expected_kinds).
    steps = 2 * accumulate
    labels = programs(steps, accumulate, set_to_none, optimizer_inside)
    expected = expected_kinds(labels)
    warmups = expected.count("warmup")
    _, stats = run_both("gpt", batches_of([CONTEXT + 1] * steps), accumulate=accumulate, set_to_none=set_to_none,
                        optimizer_inside=optimizer_inside)
    assert cache(stats[-1]) == {"plans_cached": len(set(labels)), "plan_hits": steps - warmups,
                                "plan_misses": warmups, "warmups": warmups}
    assert [s["kind"] for s in stats] == expected


def predicted(history):
    """The program a step starts on after `history` (exec/plan_cache.h, Note [Next program]): what followed the latest
    earlier occurrence of the longest run of recent programs (at most 16) that occurred before; else the last one."""
    n = len(history)
    for k in range(min(16, n - 1), 0, -1):
        for end in range(n - 2, k - 2, -1):
            if history[end - k + 1:end + 1] == history[n - k:]:
                return history[end + 1]
    return history[-1]


def expected_kinds(labels):
    """Each step's kind when programs differ only after the replay acted: it replays if it starts on its own
    program's plan and warms up otherwise (Note [Leaving a plan])."""
    return ["warmup"] + ["replay" if predicted(labels[:i]) == labels[i] else "warmup" for i in range(1, len(labels))]


def test_alternating_accumulation_programs_replay_once_their_pattern_is_seen():
    # Accumulation over 2 with zero_grad() (set to None): the programs
    # alternate, creates .grad (A) / adds into it (B): A B A B A B A B. Steps
    # 1-3 warm up (no precedent yet: step 2 starts on A, step 3 on B); from
    # step 4 on the session knows B follows A and A follows B: 5 replays.
    labels = programs(8, 2, True, False)
    assert labels[:2] != labels[1:3] and labels[:2] == labels[2:4]
    assert expected_kinds(labels) == ["warmup"] * 3 + ["replay"] * 5
    _, stats = run_both("gpt", batches_of([CONTEXT + 1] * 8), accumulate=2, set_to_none=True)
    assert [s["kind"] for s in stats] == ["warmup"] * 3 + ["replay"] * 5


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_evaluation_steps_inside_the_session_on_an_unseen_length(name):
    # Training at lengths 16 and 24, evaluation under no_grad inside the
    # session at length 20, which no training step has: a forward-only program
    # of its own, planned once and replayed after every window.
    extra = 1 if name == "gpt" else 0
    lengths = [length + extra for length in [16, 24, 16, 24, 24, 16]]
    session, stats = run_both(name, batches_of(lengths), eval_batch=batches_of([20 + extra])[0], eval_inside=True)
    # Steps: 6 training and 6 evaluation; programs: 16, 24, evaluation.
    assert cache(session.stats()) == {"plans_cached": 3, "plan_hits": 9, "plan_misses": 3, "warmups": 3}
    assert session.stats()["steps"] == 12


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_evaluation_steps_inside_the_session_on_the_training_length(name):
    # Evaluation at the training length: its forward-only program begins as
    # the training step does.
    extra = 1 if name == "gpt" else 0
    lengths = [length + extra for length in [16, 16, 24, 16, 24]]
    session, stats = run_both(name, batches_of(lengths), eval_batch=batches_of([16 + extra])[0], eval_inside=True)
    assert session.stats()["steps"] == 10
