"""Sessions on a CUDA device: the CUDA backend under PyTorch, and the emulated-link tests on a real link.

test_emulated_link.py checks, on a CPU session whose copies are paced to a slow
link, that every step holds at most the budget in time and trains
bit-identically. Here the same checks run on a GPU, where the copies cross the
real link on their own streams (the CUDA backend, runtime/cuda_backend.h) and
PyTorch's caching allocator gives the memory. Every test is skipped without a
CUDA device; scripts/gpu-check.sh runs them on a lent GPU machine
(docs/GPU.md), and conftest.py sets CUBLAS_WORKSPACE_CONFIG, which cuBLAS needs
under torch.use_deterministic_algorithms.

Attention runs on the math kernel of scaled_dot_product_attention: the fused
kernels' backward passes are not deterministic on every GPU, and bit-identical
comparisons need the same bits from two eager runs first (the `eager`
fixtures check that before any session runs).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import hyperoffload as ho
from conftest import activation_peak, assert_bit_identical, train
from models import CASES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

STEPS = 3


def on_cuda(build):
    """The model case `build`, built as on the CPU (same seeds, same values), then moved to cuda:0."""

    def build_on_cuda():
        model, batch, loss_fn = build()
        return model.to("cuda"), tuple(t.to("cuda") for t in batch), loss_fn

    return build_on_cuda


@pytest.fixture(autouse=True)
def math_attention():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield
    torch.cuda.synchronize()


def eager_reference(build):
    """Eager steps of `build`, checked to be reproducible bit for bit (else no comparison means anything).

    An op with no deterministic CUDA kernel (PyTorch raises under
    use_deterministic_algorithms) skips the test, naming the op: that is PyTorch's
    limit, not the session's.
    """
    try:
        eager = train(build, steps=STEPS)
    except RuntimeError as error:
        if "does not have a deterministic implementation" in str(error):
            pytest.skip(f"eager has no deterministic kernel here: {str(error).splitlines()[0]}")
        raise
    assert_bit_identical(eager, train(build, steps=STEPS))
    return eager


@pytest.fixture(scope="module")
def gpt():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    build = on_cuda(CASES["gpt_decoder"].build)
    with sdpa_kernel(SDPBackend.MATH):
        eager = eager_reference(build)
        peak, _ = activation_peak(build)
    assert peak > 0, "the session tracked no activation on cuda:0"
    return build, eager, peak


def check_within_budget_and_bit_identical(eager, results, budget):
    assert_bit_identical(eager, results)
    kinds = [r.stats["kind"] for r in results]
    assert kinds[0] == "warmup" and kinds[-1] == "replay", kinds
    for step, r in enumerate(results):
        assert r.stats["device"] == "cuda:0", r.stats["device"]
        assert r.stats["peak_held_bytes"] <= budget, f"step {step}: {r.stats}"
        assert r.stats["over_budget_allocations"] == 0, f"step {step}: {r.stats}"
        assert r.stats["peak_held_bytes"] >= r.stats["peak_resident_bytes"], f"step {step}"


def test_a_session_binds_to_the_gpu_and_replays_a_step():
    torch.manual_seed(0)
    w = torch.randn(64, 64, device="cuda")
    x = torch.randn(8, 64, device="cuda")
    session = ho.OffloadSession()
    outputs = []
    for _ in range(2):
        with session:
            outputs.append(torch.relu(x @ w) @ w)
    assert session.device == torch.device("cuda", 0)
    stats = session.stats()
    assert stats["kind"] == "replay" and stats["device"] == "cuda:0", stats
    assert torch.equal(outputs[0], outputs[1])
    assert torch.equal(outputs[1], torch.relu(x @ w) @ w)


def test_host_tensors_in_a_gpu_step_are_left_alone():
    w = torch.randn(32, 32, device="cuda")
    session = ho.OffloadSession()
    for _ in range(2):
        with session:
            y = w @ w
            host = torch.ones(4) * 3  # a CPU tensor inside a GPU step: not tracked, not an error
    assert session.device == torch.device("cuda", 0)
    assert torch.equal(host, torch.full((4,), 3.0)) and torch.equal(y, w @ w)


@pytest.mark.parametrize("percent", [50, 70])
@pytest.mark.parametrize("planner", ["hybrid", "peak", "recompute", "greedy"])
def test_on_the_real_link_every_step_holds_at_most_the_budget_and_trains_bit_identically(gpt, planner, percent):
    build, eager, peak = gpt
    budget = peak * percent // 100
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=planner))
    if planner == "recompute":
        # As on the CPU (test_emulated_link.py): recompute-only may have its floor above
        # the budget; then the session refuses it, naming both numbers.
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                results = train(build, session, steps=STEPS)
        except ho.BudgetError as error:
            assert "below the unavoidable floor" in str(error)
            return
    else:
        results = train(build, session, steps=STEPS)
    check_within_budget_and_bit_identical(eager, results, budget)


@pytest.mark.parametrize("copy_engines", [1, 2])
def test_the_real_link_moves_the_planned_bytes(gpt, copy_engines, record_property):
    # The peak planner offloads and brings back within the step; on the real link the
    # copies run on the backend's copy streams, and the warmup measured the link.
    build, eager, peak = gpt
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=peak // 2, planner="peak",
                                                 copy_engines=copy_engines))
    results = train(build, session, steps=STEPS)
    check_within_budget_and_bit_identical(eager, results, peak // 2)
    replay = results[-1].stats
    assert replay["d2h_bytes"] > 0 and replay["h2d_bytes"] > 0, replay
    trace = session.trace()
    for key in ("d2h_bandwidth_gbps", "h2d_bandwidth_gbps"):
        if key in trace:
            record_property(key, trace[key])
            assert trace[key] > 0.0, (key, trace[key])
    record_property("replay_step_ms", replay["step_ms"])
    record_property("replay_faults", replay["faults"])
    record_property("memory_wait_ms", replay["memory_wait_ms"])


def test_a_recorded_replay_timeline_on_the_real_link(gpt):
    build, _, peak = gpt
    budget = peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak",
                                                 record_timeline=True))
    results = train(build, session, steps=2)
    timeline, stats = session.last_timeline(), results[1].stats
    assert timeline is not None and stats["kind"] == "replay"
    ops = [s for s in timeline["spans"] if s["kind"] == "op"]
    assert [s["op"] for s in ops] == list(range(stats["ops"]))
    assert all(s["lane"] == "compute" and 0 <= s["start_ms"] <= s["end_ms"] for s in ops)
    d2h = [s for s in timeline["spans"] if s["kind"] == "copy_d2h"]
    assert len(d2h) == stats["d2h_count"] > 0 and sum(s["bytes"] for s in d2h) == stats["d2h_bytes"]
    assert all(s["end_ms"] >= s["start_ms"] >= 0 for s in d2h)
    assert max(b for _, b in timeline["memory"]) == stats["peak_held_bytes"] <= budget == timeline["budget_bytes"]


@pytest.mark.parametrize("planner", ["peak", "hybrid"])
@pytest.mark.parametrize("case", ["resnet18", "vit"])
def test_other_models_train_bit_identically_within_half_their_peak(case, planner):
    build = on_cuda(CASES[case].build)
    eager = eager_reference(build)
    peak, _ = activation_peak(build)
    budget = peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=planner))
    check_within_budget_and_bit_identical(eager, train(build, session, steps=STEPS), budget)
