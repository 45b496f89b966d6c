"""Segment re-runs in a live session (issue 35, part 1).

Near the floor the recompute planner may choose activation checkpointing's
plan with segments of its own choosing (Note [Segment re-runs] in
src/hyperoffload/plan/recompute/segment_reruns.h): a segment's sources re-run
once, in op order, where the backward pass first needs any of them, and their
results stay until their own backward use. Such a plan re-runs many ops at one
point, each reading what the ones before it regenerated there; this checks
that the runtime replays it bit-identically to eager, within the budget.

The plan depends on the op times the warmup measures, so which budget gets a
segment plan differs between machines and with the load on them (under a
loaded CI machine 35% and 40% got the plain plan): the test tries the budgets
at which DenseNet-121 got one when this was written (25% to 45% of the
activation peak), checks every one of them against eager, and needs at least
one to get a segment plan.
"""

from __future__ import annotations

import torch

import hyperoffload as ho
from torchvision_models import torchvision

STEPS = 3


def build_densenet():
    torch.manual_seed(0)
    model = torchvision.models.densenet121(num_classes=10)
    model.train()
    images = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([3, 7, 0, 9])
    return model, images, labels


def train(session=None, steps=STEPS):
    """Losses and gradients of `steps` steps (gradients zeroed in place between them)."""
    model, images, labels = build_densenet()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    results = []
    for _ in range(steps):
        for p in model.parameters():
            p.grad.zero_()
        if session is None:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
        else:
            with session:
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                loss.backward()
        results.append((loss.detach().clone(), [p.grad.clone() for p in model.parameters()],
                        session.stats() if session is not None else None))
    return results


def test_segment_plans_replay_bit_identically_within_the_budget():
    probe = ho.OffloadSession()
    train(probe, steps=1)
    peak = probe.unplanned_peak_bytes()
    eager = train()
    segment_plans = 0
    for fraction in (0.25, 0.3, 0.35, 0.4, 0.45):
        budget = int(peak * fraction)
        session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="recompute"))
        results = train(session)
        for step, ((loss, grads, _), (e_loss, e_grads, _)) in enumerate(zip(results, eager)):
            assert torch.equal(loss, e_loss), f"{fraction:.0%}, step {step}: loss differs"
            for p, (g, e) in enumerate(zip(grads, e_grads)):
                assert torch.equal(g, e), f"{fraction:.0%}, step {step}: gradient of parameter {p} differs"
        assert [r[2]["kind"] for r in results] == ["warmup", "replay", "replay"]
        for step, (_, _, stats) in enumerate(results[1:], start=1):
            assert stats["peak_held_bytes"] <= budget, f"{fraction:.0%}, step {step}"
        segment_plans += any("segment re-runs" in note for note in session.notes())
    assert segment_plans >= 1, "no budget got a segment plan"
