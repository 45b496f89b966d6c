"""In-place ops regenerable as one unit with the op before them (issue 35, part 2).

An in-place op (``relu_`` after a batch norm, the residual ``add_`` of a
ResNet block, ``masked_fill_`` on attention scores) cannot be re-run from its
inputs: it read the version it overwrote. Re-run after the op that made that
version, the two regenerate it exactly (Note [In-place units] in
src/hyperoffload/ir/trace.h). torchvision's ResNet-18 writes every ReLU and
every residual sum in place; before units, what those ops wrote could only
be kept or offloaded, never recomputed.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import hyperoffload as ho
from torchvision_models import torchvision

STEPS = 3


def build_resnet():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    model.train()
    images = torch.randn(4, 3, 96, 96, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([3, 7, 0, 9])
    return model, images, labels


def train(session=None, steps=STEPS, accumulate=1):
    """Optimizer steps of SGD, each over `accumulate` micro-batches: losses, gradients, weights and running
    statistics after each. The gradients exist before the first step and are zeroed in place (outside the
    steps), so they are not activations of a step."""
    model, images, labels = build_resnet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    results = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=False)
        for _ in range(accumulate):
            if session is None:
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                loss.backward()
            else:
                with session:
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                    loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
        results.append((loss.detach().clone(), grads, [t.clone() for t in model.state_dict().values()],
                        session.stats() if session is not None else None))
    return results


@pytest.fixture(scope="module")
def eager():
    return train()


@pytest.fixture(scope="module")
def activation_peak():
    session = ho.OffloadSession()
    train(session, steps=1)
    return session.unplanned_peak_bytes()


def in_place_sources(session):
    """Names of the in-place ops the plan's recompute actions re-run (as a unit's last member)."""
    ops = session.trace()["ops"]
    names = [ops[a["source_op"]]["name"] for a in session.schedule()["actions"] if a["kind"] == "recompute"]
    return [n for n in names if n.split(".")[0].endswith("_")]


def test_resnets_in_place_relus_and_residual_sums_are_marked_recomputable():
    session = ho.OffloadSession()
    train(session, steps=1)
    ops = session.trace()["ops"]
    marks = {}
    for op in ops:
        marks.setdefault(op["name"], set()).add(bool(op.get("recomputable")))
    # Every ReLU follows a batch norm (training: recomputable) or a residual
    # sum that does; every residual sum follows a batch norm.
    assert marks["aten::relu_"] == {True}
    assert marks["aten::add_.Tensor"] >= {True}


@pytest.mark.parametrize("planner,interception", [("recompute", None), ("hybrid", None),
                                                   ("recompute", "dispatch_mode")])
def test_plans_that_re_run_in_place_units_train_bit_identically(eager, activation_peak, planner, interception):
    # Hybrid plans for a slow link (0.01 GiB/s), where re-running beats moving.
    # Under the session's TorchDispatchMode a re-run calls the recorded
    # OpOverloads instead of the boxed dispatcher calls: the same units.
    budget = int(activation_peak * 0.6)
    config = dict(max_resident_activation_bytes=budget, planner=planner, copy_bandwidth_gib_per_s=0.01)
    if interception is not None:
        config.update(interception=interception)
    session = ho.OffloadSession(ho.OffloadConfig(**config))
    results = train(session)
    for step, ((loss, grads, state, stats), (e_loss, e_grads, e_state, _)) in enumerate(zip(results, eager)):
        assert torch.equal(loss, e_loss), f"step {step}: loss {loss.item()!r} != {e_loss.item()!r}"
        for p, (g, e) in enumerate(zip(grads, e_grads)):
            assert torch.equal(g, e), f"step {step}: gradient of parameter {p} differs"
        # Weights and batch-norm running statistics: a re-run updates nothing.
        for t, (a, b) in enumerate(zip(state, e_state)):
            assert torch.equal(a, b), f"step {step}: state tensor {t} differs"
    assert [r[3]["kind"] for r in results] == ["warmup", "replay", "replay"]
    for step, (_, _, _, stats) in enumerate(results[1:], start=1):
        assert stats["peak_held_bytes"] <= budget, f"step {step}"
    sources = in_place_sources(session)
    assert sources, "the plan re-runs no in-place unit"
    assert {n.split(".")[0] for n in sources} <= {"aten::relu_", "aten::add_"}


def test_accumulation_re_runs_units_exactly(activation_peak):
    # Two micro-batches per optimizer step: the second adds its gradients in
    # place to the first's (AccumulateGrad's add_ follows no recomputable op,
    # so it stays outside every unit).
    eager_results = train(steps=2, accumulate=2)
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=int(activation_peak * 0.6),
                                                 planner="recompute"))
    results = train(session, steps=2, accumulate=2)
    for step, ((loss, grads, state, _), (e_loss, e_grads, e_state, _)) in enumerate(zip(results, eager_results)):
        assert torch.equal(loss, e_loss), f"step {step}"
        assert all(torch.equal(g, e) for g, e in zip(grads, e_grads)), f"step {step}"
        assert all(torch.equal(a, b) for a, b in zip(state, e_state)), f"step {step}"
    assert in_place_sources(session)


# Step 3 detaches new gradients inside the step, so the program it continues as
# has their 45 MiB at its floor, above the budget: the session says so.
@pytest.mark.filterwarnings("ignore:hyperoffload. the budget")
def test_a_step_that_leaves_its_plan_regenerates_what_units_dropped(activation_peak):
    # The gradients exist before the first step; steps 1-2 zero them in place
    # (AccumulateGrad adds into them), step 3 sets them to None (it detaches
    # new ones instead). Step 3 replays the plan of steps 1-2 and leaves it at
    # the first AccumulateGrad of the backward, after the forward dropped
    # tensors that in-place units regenerate. It continues as a warmup: every
    # dropped tensor it still holds is regenerated first, a relu_'s or
    # residual add_'s result by re-running its batch norm and then the
    # in-place ops (Note [Leaving a plan]); steps 4-5 replay again.
    def loop(session):
        model, images, labels = build_resnet()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        results = []
        for set_to_none in (False, False, True, False, False):
            optimizer.zero_grad(set_to_none=set_to_none)
            with session if session is not None else contextlib.nullcontext():
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                loss.backward()
            results.append((loss.detach().clone(), [p.grad.clone() for p in model.parameters()],
                            session.stats() if session is not None else None))
            optimizer.step()
        return results

    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=int(activation_peak * 0.6),
                                                 planner="recompute"))
    offloaded, eager = loop(session), loop(None)
    for step, ((loss, grads, stats), (e_loss, e_grads, _)) in enumerate(zip(offloaded, eager)):
        assert torch.equal(loss, e_loss), f"step {step}"
        assert all(torch.equal(g, e) for g, e in zip(grads, e_grads)), f"step {step}"
        assert not stats["passthrough"], f"step {step}"
    assert [s["kind"] for _, _, s in offloaded] == ["warmup", "replay", "warmup", "replay", "replay"]
    assert in_place_sources(session)
