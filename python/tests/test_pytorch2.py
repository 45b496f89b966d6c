"""PyTorch 2 training and inference idioms through a session (tested on 2.13).

Each test runs a model of models.py eagerly and through a session whose budget
is half the unplanned activation peak of the same kind of step (measured by an
unbudgeted session), and asserts: the loss (or output) and every gradient
torch.equal to eager over 3 steps, the runtime-measured resident peak at or
under the budget in every step, and offloading in every replay.
"""

from __future__ import annotations

import warnings
from typing import Callable, List, Optional

import pytest
import torch

import hyperoffload as ho
from conftest import StepResult, assert_bit_identical
from models import CASES, VIT_SHAPE, VisionTransformer

STEPS = 3


def run(build: Callable, step: Callable, session: Optional[ho.OffloadSession], steps: int = STEPS,
        grads: str = "none", with_optimizer: bool = True):
    """`steps` SGD steps; `step(model, batch, loss_fn)` is the body of the `with session:` block.

    grads="none": `optimizer.zero_grad()` with PyTorch 2's default
    set_to_none=True, every step creates .grad; "zeros": .grad exists before the
    first step and is zeroed in place. Returns the results and the RuntimeWarnings.
    """
    model, batch, loss_fn = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if grads == "zeros":
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
    results: List[StepResult] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            if grads == "none":
                optimizer.zero_grad()  # set_to_none=True, PyTorch 2's default
            else:
                optimizer.zero_grad(set_to_none=False)
            if session is None:
                out = step(model, batch, loss_fn)
                stats = None
            else:
                with session:
                    out = step(model, batch, loss_fn)
                stats = session.stats()
            grads_now = [p.grad.clone() if p.grad is not None else None for p in model.parameters()]
            results.append(StepResult(out.detach().clone(), grads_now, stats))
            if with_optimizer:
                optimizer.step()
    return results, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def assert_equal_results(expected, actual):
    """assert_bit_identical, also for steps without gradients (None)."""
    for step, (e, a) in enumerate(zip(expected, actual)):
        assert (e.grads[0] is None) == (a.grads[0] is None)
    if expected[0].grads[0] is None:
        assert all(torch.equal(e.loss, a.loss) for e, a in zip(expected, actual))
    else:
        assert_bit_identical(expected, actual)


def check_at_half_the_peak(build, step, grads="none", planner="peak", with_optimizer=True):
    """Runs `step` eagerly, unbudgeted (for the peak) and at half the peak; returns the session and results."""
    eager, _ = run(build, step, None, grads=grads, with_optimizer=with_optimizer)
    probe = ho.OffloadSession()
    run(build, step, probe, steps=1, grads=grads, with_optimizer=with_optimizer)
    peak = probe.unplanned_peak_bytes()
    assert peak > 0
    budget = peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=planner))
    results, warned = run(build, step, session, grads=grads, with_optimizer=with_optimizer)
    assert_equal_results(eager, results)
    assert warned == []
    assert [r.stats["kind"] for r in results] == ["warmup", "replay", "replay"]
    for index, r in enumerate(results):
        assert r.stats["peak_held_bytes"] <= budget, f"step {index}"
        assert r.stats["offloaded_bytes"] > 0
    for r in results[1:]:
        assert r.stats["d2h_count"] > 0 and r.stats["faults"] == 0
    return session, results, peak


def build_vit_batch32():
    """models.py's ViT with a batch of 32 images instead of 4.

    With PyTorch 2's zero_grad() every step's new .grad tensors are retained
    activations (the parameters' bytes, ~0.4 MiB here) on the device at the
    step's end; at batch 4 they put the floor above half the peak. At batch 32
    the activations dominate and half the peak is feasible.
    """
    s = dict(VIT_SHAPE, batch=32)
    torch.manual_seed(3)
    model = VisionTransformer(s["image"], s["patch"], s["width"], s["heads"], s["layers"], s["ffn"], s["classes"])
    images = torch.randn(s["batch"], 3, s["image"], s["image"])
    labels = torch.randint(0, s["classes"], (s["batch"],))

    def loss_fn(model, batch):
        images, labels = batch
        return torch.nn.functional.cross_entropy(model(images), labels)

    return model, (images, labels), loss_fn


def train_step(model, batch, loss_fn):
    loss = loss_fn(model, batch)
    loss.backward()
    return loss


# ---- (a) zero_grad() with set_to_none=True ----------------------------------------------------


def test_the_default_zero_grad_loop_is_bit_identical_within_half_the_peak():
    build = build_vit_batch32
    session, results, peak = check_at_half_the_peak(build, train_step, grads="none")
    # Every step creates each parameter's .grad and the step ends holding it:
    # retained activations of every step, at least the parameters' bytes.
    retained = sum(s["size_bytes"] for s in session.trace()["storages"] if s["retained"])
    parameters = sum(p.numel() * p.element_size() for p in build()[0].parameters())
    assert retained >= parameters


# ---- (b) torch.autocast on CPU (bfloat16) ----------------------------------------------------------


def autocast_step(model, batch, loss_fn):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(model, batch)
    loss.backward()
    return loss


def test_an_autocast_bf16_step_is_bit_identical_within_half_the_peak():
    build = CASES["gpt_decoder"].build
    session, results, _ = check_at_half_the_peak(build, autocast_step, grads="zeros")
    # Autocast's casts are ordinary aten ops: the bf16 copies of the weights are
    # activations of the step (2 bytes per element) and the matmuls run in bf16.
    ops = session.trace()["ops"]
    assert any(op["name"] == "aten::_to_copy" for op in ops)
    assert results[0].loss.dtype == torch.float32  # cross_entropy autocasts to float32


# ---- (c) inference steps: no_grad and inference_mode ----------------------------------------------


def no_grad_step(model, batch, loss_fn):
    with torch.no_grad():
        return loss_fn(model, batch)


def inference_mode_step(model, batch, loss_fn):
    with torch.inference_mode():
        return loss_fn(model, batch)


def logits_step(context):
    def step(model, batch, loss_fn):
        with context():
            return model(batch[0])

    return step


@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
def test_inference_steps_are_bit_identical_at_their_floor(context):
    # Without autograd nothing is saved for a backward: an activation lives from
    # the op making it to the op last reading it, so the peak is one op's
    # inputs and outputs plus the residual stream — the floor is close to the
    # peak and half of it is infeasible: BudgetError, naming the floor. At the
    # floor itself the budget still binds (what the residual stream and the
    # causal mask hold is offloaded around the widest op). (ResNet-18's
    # inference floor is its peak: nothing to offload.) inference_mode makes inference tensors
    # (no version counter, no autograd metadata): ordinary storages to the
    # session, offloaded and brought back the same way.
    build = CASES["gpt_decoder"].build
    step = logits_step(torch.no_grad if context == "no_grad" else torch.inference_mode)
    eager, _ = run(build, step, None, grads="zeros", with_optimizer=False)
    probe = ho.OffloadSession()
    run(build, step, probe, steps=1, grads="zeros", with_optimizer=False)
    peak = probe.unplanned_peak_bytes()
    half = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=peak // 2, rewarm_once=False))
    with pytest.raises(ho.BudgetError, match="below the unavoidable floor"):
        run(build, step, half, steps=1, grads="zeros", with_optimizer=False)
    floor = half.floor_bytes()
    assert peak // 2 < floor < peak
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=floor, planner="peak"))
    results, warned = run(build, step, session, grads="zeros", with_optimizer=False)
    assert warned == []
    assert all(torch.equal(e.loss, a.loss) for e, a in zip(eager, results))
    assert [r.stats["kind"] for r in results] == ["warmup", "replay", "replay"]
    for r in results:
        assert r.stats["peak_held_bytes"] <= floor
        assert r.stats["offloaded_bytes"] > 0
    model, batch, loss_fn = build()
    with session:  # a 4th step, replayed: its result is what the step returned
        out = step(model, batch, loss_fn)
    assert out.is_inference() == (context == "inference_mode")
    assert torch.equal(out, eager[0].loss) and session.stats()["offloaded_bytes"] > 0
    trace = session.trace()
    assert not any("backward" in op["name"] for op in trace["ops"])
    retained = sum(s["size_bytes"] for s in trace["storages"] if s["retained"])
    assert retained == 4 * 32 * 256 * 4  # the [4, 32, 256] float32 logits are all the step keeps


def test_a_training_step_after_inference_steps_warms_up_again():
    # A training step after inference steps is another step program: it
    # differs at the first op that saves for backward, before the inference
    # plan offloaded anything or after; either way it continues as a warmup
    # and its plan joins the cache (docs/PYTHON.md, "Training loops").
    build = CASES["vit"].build
    model, batch, loss_fn = build()
    session = ho.OffloadSession()
    with session:
        with torch.inference_mode():
            loss_fn(model, batch)
    with session:
        with torch.inference_mode():
            loss_fn(model, batch)
    assert session.stats()["kind"] == "replay"
    with session:
        loss_fn(model, batch).backward()
    assert session.stats()["kind"] == "warmup" and session.stats()["plans_cached"] == 2


# ---- (d) gradient accumulation ------------------------------------------------------------------------


def accumulation_step(model, batch, loss_fn):
    """3 micro-batches, forward and backward each, inside one step; the loss is their mean."""
    inputs, targets = batch
    micro = inputs.shape[0] // 2
    total = None
    for start in (0, micro, 0):  # 3 micro-batches (the first one twice)
        loss = loss_fn(model, (inputs[start:start + micro], targets[start:start + micro])) / 3
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total


@pytest.mark.parametrize("grads", ["none", "zeros"])
def test_gradient_accumulation_over_three_micro_batches_in_one_step(grads):
    # With grads="none" the first micro-batch's AccumulateGrad creates .grad
    # and the next two add into it — inside one step, so every step runs the
    # same ops. Each micro-batch's activations die at its backward, so the
    # step's peak is one micro-batch's, not three.
    build = build_vit_batch32
    session, results, peak = check_at_half_the_peak(build, accumulation_step, grads=grads)
    single = ho.OffloadSession()
    run(build, lambda m, b, f: train_step(m, (b[0][:16], b[1][:16]), f), single, steps=1, grads=grads)
    assert peak < 2 * single.unplanned_peak_bytes()
    names = [op["name"] for op in session.trace()["ops"]]
    assert names.count("aten::convolution_backward") == 3


# ---- (e) storages are untyped_storage()s --------------------------------------------------------------


def test_views_of_one_storage_are_one_tracked_storage():
    # Two views of one tensor (and a view of a view, and a reinterpreting
    # view) share one untyped_storage(): one storage of the trace, of the
    # untyped storage's nbytes, read by every op that reads a view.
    weight = torch.randn(16, 16)
    session = ho.OffloadSession()
    with session:
        base = torch.tanh(weight)  # op 0: produces the only activation here
        assert base.untyped_storage().nbytes() == 16 * 16 * 4
        left, right = base[:, :8], base[:, 8:]
        flat = base.view(-1)[::2]
        as_int = base.view(torch.int32)
        assert {t.untyped_storage().data_ptr() for t in (left, right, flat, as_int)} == {base.data_ptr()}
        total = left.sum() + right.sum() + flat.sum() + as_int.sum()
    trace = session.trace()
    produced = [s for s in trace["storages"] if s["size_bytes"] == 16 * 16 * 4]
    assert len(produced) == 1
    tanh_storage = produced[0]["id"]
    sums = [op for op in trace["ops"] if op["name"].startswith("aten::sum")]
    assert len(sums) == 4
    assert all(any(a["storage"] == tanh_storage for a in op["accesses"]) for op in sums)
    # 1 tanh output + 4 sums + 3 adds, each a new (4-byte or 8-byte) storage:
    assert len(trace["storages"]) == 1 + 4 + 3
    assert total.item() == (left.sum() + right.sum() + flat.sum() + as_int.sum()).item()
