"""Real models through a session: bit-identical training within half the activation peak."""

from __future__ import annotations

import pytest

import hyperoffload as ho
from conftest import activation_peak, assert_bit_identical, train
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
        assert r.stats["peak_resident_bytes"] <= budget, f"step {step} ({kinds[step]})"
        assert r.stats["offloaded_bytes"] > 0, "the budget binds: something is offloaded"
        assert r.stats["budget_bytes"] == budget
    # The plan hides every copy back: replays never demand-page.
    assert [r.stats["faults"] for r in results[1:]] == [0, 0]
    assert session.schedule()["planner"] == planner
    assert session.floor_bytes() <= budget
