"""Segment re-runs in a live session (issue 35, part 1).

Near the floor the recompute planner may choose activation checkpointing's
plan with segments of its own choosing (Note [Segment re-runs] in
src/hyperoffload/plan/recompute/segment_reruns.h): a segment's sources re-run
once, in op order, where the backward pass first needs any of them, and their
results stay until their own backward use. Such a plan re-runs many ops at one
point, each reading what the ones before it regenerated there; this checks
that the runtime replays it bit-identically to eager, within the budget.

The plan depends on the op times the warmup measures, so which budget gets a
segment plan differs between runs and with the load on the machine: segment
plans win in a window of budgets near their floor, and where noise puts that
floor above a budget DTR's walk or the plain sequences win there (three
warmups of the same DenseNet on a loaded machine: the window began at 28%, at
32%, and not below 33%). Each test checks every budget it tries, 25% to 45% of
the activation peak, against eager, up to the first that got a segment plan;
where none did, it is skipped and says so (every budget was still checked:
what it cannot check is a segment plan's replay).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import hyperoffload as ho
from conftest import activation_peak, recompute_budgets_until_a_plan
from torchvision_models import torchvision

FRACTIONS = (0.25, 0.3, 0.35, 0.4, 0.45)
NO_SEGMENT_PLAN = ("every budget replayed as eager did, but the op times measured here gave none of them a segment "
                   "plan (see the module's docstring)")


def build_densenet():
    torch.manual_seed(0)
    model = torchvision.models.densenet121(num_classes=10)
    model.train()
    images = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([3, 7, 0, 9])
    return model, images, labels


def densenet_case():
    """build_densenet as a model case of conftest.train: (model, batch, loss_fn)."""
    model, images, labels = build_densenet()
    return model, (images, labels), lambda m, batch: torch.nn.functional.cross_entropy(m(batch[0]), batch[1])


def test_segment_plans_replay_bit_identically_within_the_budget():
    if not recompute_budgets_until_a_plan(densenet_case, FRACTIONS, "segment re-runs"):
        pytest.skip(NO_SEGMENT_PLAN)


def accumulate_two(session=None, sizes=(4, 4, 4, 4, 2, 2, 4, 4)):
    """SGD over micro-batches of `sizes` images, two per optimizer step,
    gradients zeroed in place (zero_grad(set_to_none=False)): each micro-batch's
    loss, the final parameters and buffers, and the session's stats."""
    model, _, _ = build_densenet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    losses, stats, notes = [], [], set()
    for i, size in enumerate(sizes):
        generator = torch.Generator().manual_seed(100 + i)
        images = torch.randn(size, 3, 64, 64, generator=generator)
        labels = torch.randint(0, 10, (size,), generator=generator)
        with session if session is not None else contextlib.nullcontext():
            loss = torch.nn.functional.cross_entropy(model(images), labels) / 2
            loss.backward()
        if session is not None:
            stats.append(session.stats())
            notes.update(session.notes())  # the recompute note is the latest plan's
        losses.append(loss.detach().clone())
        if i % 2 == 1:
            optimizer.step()
            optimizer.zero_grad(set_to_none=False)
    state = [t.detach().clone() for t in list(model.parameters()) + list(model.buffers())]
    return losses, state, stats, notes


def test_segment_plans_under_gradient_accumulation_and_two_batch_sizes():
    # Accumulation windows of two micro-batches (the first of a window adds to
    # zeroed gradients like the second, so one program per batch size), the
    # batch size changing to 2 and back: every micro-batch and the trained
    # weights, batch-norm running statistics included, equal eager's.
    peak, _ = activation_peak(densenet_case)
    e_losses, e_state, _, _ = accumulate_two()
    for fraction in FRACTIONS:
        budget = int(peak * fraction)
        session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="recompute"))
        losses, state, stats, notes = accumulate_two(session)
        for i, (loss, e_loss) in enumerate(zip(losses, e_losses)):
            assert torch.equal(loss, e_loss), f"{fraction:.0%}, micro-batch {i}: loss differs"
        for t, (a, b) in enumerate(zip(state, e_state)):
            assert torch.equal(a, b), f"{fraction:.0%}: parameter or buffer {t} differs after training"
        for i, s in enumerate(stats):
            if s["kind"] == "replay":
                assert s["peak_held_bytes"] <= budget, f"{fraction:.0%}, micro-batch {i}"
        # One warmup per batch size, then replays (no extra warmup per window).
        assert [s["kind"] for s in stats] == ["warmup", "replay", "replay", "replay",
                                              "warmup", "replay", "replay", "replay"]
        if any("segment re-runs" in note for note in notes):
            return
    pytest.skip(NO_SEGMENT_PLAN)
