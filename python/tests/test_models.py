"""Real models through a session: bit-identical training within half the activation peak."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import hyperoffload as ho
from conftest import StepResult, activation_peak, assert_bit_identical, train
from models import CASES

STEPS = 3


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    """A model case with its eager reference and its unplanned activation peak."""
    case = CASES[request.param]
    eager = train(case.build, steps=STEPS)
    peak, trace = activation_peak(case.build)
    return case, eager, peak, trace


def test_the_unbudgeted_session_traces_the_step_without_offloading(case):
    model_case, eager, peak, trace = case
    session = ho.OffloadSession()
    results = train(model_case.build, session, steps=STEPS)
    assert_bit_identical(eager, results)
    assert [r.stats["kind"] for r in results] == ["warmup", "replay", "replay"]
    for r in results:
        assert r.stats["offloaded_bytes"] == 0
        assert r.stats["faults"] == 0
    assert peak > 0
    assert len(trace["ops"]) == results[0].stats["ops"]
    assert all(op["name"].startswith("aten::") for op in trace["ops"])
    assert session.unplanned_peak_bytes() == peak
    assert ho.unplanned_peak(trace) == peak


@pytest.mark.parametrize("planner", ["greedy", "peak"])
def test_training_is_bit_identical_within_half_the_activation_peak(case, planner):
    model_case, eager, peak, _ = case
    budget = peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=planner))
    results = train(model_case.build, session, steps=STEPS)
    assert_bit_identical(eager, results)
    kinds = [r.stats["kind"] for r in results]
    assert kinds == ["warmup", "replay", "replay"]
    for step, r in enumerate(results):
        assert r.stats["peak_held_bytes"] <= budget, f"step {step} ({kinds[step]})"
        assert r.stats["offloaded_bytes"] > 0, "the budget binds: something is offloaded"
        assert r.stats["budget_bytes"] == budget
    # The plan hides every copy back: replays never demand-page.
    assert [r.stats["faults"] for r in results[1:]] == [0, 0]
    assert session.schedule()["planner"] == planner
    assert session.floor_bytes() <= budget


def run_loop(build, session, steps, grads):
    """SGD steps with the gradient handling of a common training loop.

    grads="zeroed": PyTorch 1.13's zero_grad() — .grad is created in the first
    step and zeroed in place afterwards (so step 1 runs other ops than the
    rest); grads="none": zero_grad(set_to_none=True) — every step creates it.
    """
    model, batch, loss_fn = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    results = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=grads == "none")
            context = session if session is not None else contextlib.nullcontext()
            with context:
                loss = loss_fn(model, batch)
                loss.backward()
            stats = session.stats() if session is not None else None
            results.append(StepResult(loss.detach().clone(), [p.grad.clone() for p in model.parameters()], stats))
            optimizer.step()
    return results, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_a_loop_whose_first_step_creates_the_gradients_warms_up_again_once():
    build = CASES["gpt_decoder"].build
    eager, _ = run_loop(build, None, 5, "zeroed")
    steady_peak, _ = activation_peak(build)  # gradients exist before the step
    budget = steady_peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak"))
    results, warned = run_loop(build, session, 5, "zeroed")
    assert_bit_identical(eager, results)
    # Step 1 keeps every new .grad on the device to its end: above this budget.
    assert [r.stats["kind"] for r in results] == ["warmup", "warmup", "replay", "replay", "replay"]
    assert len(warned) == 1 and "below the unavoidable floor" in warned[0]
    for r in results[1:]:
        assert r.stats["peak_held_bytes"] <= budget


def test_a_loop_that_resets_gradients_to_none_offloads_them_too():
    build = CASES["gpt_decoder"].build
    eager, _ = run_loop(build, None, 3, "none")
    probe = ho.OffloadSession()
    run_loop(build, probe, 1, "none")
    budget = probe.unplanned_peak_bytes() * 6 // 10
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget))
    results, warned = run_loop(build, session, 3, "none")
    assert_bit_identical(eager, results)
    assert warned == []
    assert [r.stats["kind"] for r in results] == ["warmup", "replay", "replay"]
    for r in results:
        assert r.stats["peak_held_bytes"] <= budget
        assert r.stats["offloaded_bytes"] > 0
    # Every parameter's new .grad is retained by the step.
    retained = sum(s["size_bytes"] for s in session.trace()["storages"] if s["retained"])
    parameters = sum(p.numel() * p.element_size() for p in build()[0].parameters())
    assert retained >= parameters
